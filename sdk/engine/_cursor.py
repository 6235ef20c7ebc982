"""The replay cursor: where an activation stands against its run's journal.

It gives each call of the flow its step key and *position* (the order in
which the activation's calls were made), checks the call against the
journal, and says which recorded outcomes come next: the journal records the
round each outcome was delivered in (`Record.r`), and a replay delivers them
in those rounds again. A call the journal disagrees with is a
`NonDeterminismError`, remembered (`fatal`) even if the flow catches it.

A cancel given to the flow (see `sdk.engine._activation`) is the record `CANCEL_KEY`:
no call of the flow made it (its position is `CANCEL_POS`, outside the
flow's), but its round is a round of the run, in which a replay gives the
cancel again (`cancel_due`).

Patches (`sdk.patched`): a marker ``~patch:{change_id}`` takes a position only
when it is journaled (the new path). A run whose journal holds calls at or
after the position where `patched` is called, and no marker there, passed this
point on the old code: `patched` answers False *without taking a position*, so
the old run's calls that follow keep their recorded positions. A run that holds
the marker there replays it (True) in its round, like ``now()``. A run with no
record from there on is live: the marker is journaled (True). `deprecate_patch`
takes the marker's position, if the journal holds it there, and drops it from
its round, so a marked run replays on code that no longer calls `patched`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from sdk._core._journal import Journal, Record
from sdk._core._keys import CANCEL_POS, patch_key
from sdk.engine._ops import Op
from sdk.errors import NonDeterminismError, RegistryConflict
from sdk.model._registry import same_function

if TYPE_CHECKING:
    from sdk.model._stepspec import StepSpec

__all__ = ["ReplayCursor"]


def _pos(op: Op) -> int:
    return op.pos


class ReplayCursor:
    """Keys, positions and recorded rounds of one activation."""

    def __init__(
        self, run_id: str, flow: str, journal: Journal, version: str | None = None
    ) -> None:
        self.run_id = run_id
        self.flow = flow
        self.version = version  # the flow version the run is on (named by errors)
        self.journal = journal
        self.round = 0  # the last round delivered
        # the cancel given to the flow, if it was: out of the calls' positions, its
        # round kept (with no call in it)
        self.cancel = journal.by_pos.pop(CANCEL_POS, None)
        self.cancel_round: int | None = None
        if self.cancel is not None and self.cancel.r is not None:
            self.cancel_round = self.cancel.r
            journal.rounds[self.cancel.r] = [
                p for p in journal.rounds.get(self.cancel.r, ()) if p != CANCEL_POS
            ]
        self.cancel_due = False  # next_recorded reached the cancel's round
        self._rounds = sorted(journal.rounds)  # the recorded rounds, in order
        self._next_round = 0  # index in _rounds of the first one after `round`
        self.live = not journal.by_pos and self.cancel_round is None  # past the last round
        self.fatal: NonDeterminismError | None = None
        self.ops: dict[int, Op] = {}  # calls made and not delivered yet, by position
        self.new: list[Op] = []  # calls to start at the live frontier
        self._asap: list[Op] = []  # format-1 outcomes: delivered as soon as called
        self._pos = 0
        self._made: list[str] = []  # the key of each call made, by position (for diffs)
        self._patches: dict[str, bool] = {}  # change id -> what patched() answered
        self._lineage_last: int | None = None  # last position of a lineage's records
        self._counts: dict[str, int] = {}
        self._specs: dict[str, StepSpec] = {}  # step name -> the step using it in this run

    @property
    def cancel_reason(self) -> str | None:
        """The reason of the cancel given to the flow (its record's value)."""
        rec = self.cancel
        if rec is None:
            return None
        value = rec.value
        return str(value.get("reason", "")) if isinstance(value, dict) else str(value)

    @property
    def calls(self) -> int:
        """How many calls the flow has made."""
        return self._pos

    def alloc(self, name: str) -> tuple[str, int]:
        """Next key for `name` and next position; synchronous, so gather is deterministic."""
        n = self._counts.get(name, 0) + 1
        self._counts[name] = n
        key = f"{name}#{n}"
        return key, self._take(key)

    def _take(self, key: str) -> int:
        pos = self._pos
        self._pos = pos + 1
        self._made.append(key)
        return pos

    def patch(self, change_id: str, lineage: Mapping[str, str]) -> int | None:
        """Where ``patched(change_id)`` journals (or replays) its marker, or None:
        it answers False and takes no position. `answered` says what it answered
        before in this activation (then it takes no position either).

        `lineage`: a replay's or fork's source records (key -> JSON); in a run
        with no record from here on, they decide as the source's journal would.
        Raises `NonDeterminismError` (the marker is recorded at another position).
        """
        if self.fatal is not None:
            raise self.fatal
        key, pos = patch_key(change_id), self._pos
        rec = self.journal.by_pos.get(pos)
        if rec is not None and rec.key == key:
            marked = True  # a run that took the new path here: replay its marker
        elif key in self.journal.by_key:
            raise self.error(pos, None, key)
        elif self.journal.last_pos >= pos:
            marked = False  # the run passed this point before the patch existed
        elif key in lineage:
            marked = True
        else:
            marked = self._lineage_before(pos, lineage)
        self._patches[change_id] = marked
        return self._take(key) if marked else None

    def answered(self, change_id: str) -> bool | None:
        """What ``patched(change_id)`` answered in this activation (None: not called)."""
        return self._patches.get(change_id)

    def _lineage_before(self, pos: int, lineage: Mapping[str, str]) -> bool:
        """Whether the lineage's source run had not reached `pos` (so: the new path)."""
        if not lineage:
            return True
        if self._lineage_last is None:
            self._lineage_last = max(Record.from_json(raw).pos for raw in lineage.values())
        return self._lineage_last < pos

    def deprecate(self, change_id: str) -> None:
        """``deprecate_patch(change_id)``: a marker the journal holds at this position
        takes it, and leaves its round (nothing awaits it)."""
        if self.fatal is not None:
            raise self.fatal
        key, pos = patch_key(change_id), self._pos
        rec = self.journal.by_pos.get(pos)
        if rec is None or rec.key != key:
            return  # a run that never recorded the marker (here): nothing to skip
        self._take(key)
        r = rec.r
        if r is None or r <= self.round:
            return  # format 1 (no rounds), or already delivered (it cannot be: not made)
        left = [p for p in self.journal.rounds.get(r, ()) if p != pos]
        if left:
            self.journal.rounds[r] = left
        else:  # the marker was the round's only outcome: the round is gone
            self.journal.rounds.pop(r, None)
            self._rounds.remove(r)

    def check_step(self, spec: StepSpec) -> None:
        """A step name is used by one step function per run (its keys would mix)."""
        known = self._specs.setdefault(spec.name, spec)
        if known is not spec and not same_function(known.fn, spec.fn):
            raise RegistryConflict(
                f"run {self.run_id!r}: flow {self.flow!r} calls two different steps named "
                f"{spec.name!r} ({known.fn.__module__}.{known.fn.__qualname__} and "
                f"{spec.fn.__module__}.{spec.fn.__qualname__}); their journal keys would mix. "
                "Give one of them another name: @step(name=...)"
            )

    def admit(self, op: Op) -> None:
        """Check a call against the journal and file it: recorded (replayed in its
        round) or new (started live). Raises `NonDeterminismError`."""
        self.check(op)
        self.file(op)

    def check(self, op: Op) -> None:
        """Set `op.record` from the journal. Raises `NonDeterminismError`."""
        if self.fatal is not None:
            raise self.fatal
        op.record = self._check(op.key, op.pos)

    def file(self, op: Op) -> None:
        """File a checked call: its recorded round, or the live frontier."""
        self.ops[op.pos] = op
        rec = op.delivery
        if rec is None:
            self.new.append(op)
        elif rec.r is None:
            self._asap.append(op)
        elif rec.r <= self.round:
            raise self.error(
                op.pos, rec.key, op.key,
                detail=f"the journal records {op.key!r} as completed in round {rec.r}, "
                "before the flow made this call (concurrent calls in another order)",
            )  # fmt: skip

    def _check(self, key: str, pos: int) -> Record | None:
        """The record for this call, or None; `NonDeterminismError` if the journal disagrees."""
        rec = self.journal.by_pos.get(pos)
        if rec is not None:
            if rec.key != key:
                raise self.error(pos, rec.key, key)
            return rec
        if key in self.journal.by_key:
            raise self.error(pos, None, key)
        return None

    def error(
        self, pos: int, recorded: str | None, called: str | None, *, detail: str | None = None
    ) -> NonDeterminismError:
        """The divergence at `pos`, with the diff of the recorded calls and the calls
        made (`NonDeterminismError`); remembered as `fatal` (the first one)."""
        journal = {p: rec.key for p, rec in self.journal.by_pos.items()}  # (no ~cancel)
        err = NonDeterminismError(
            self.run_id, pos, recorded, called, detail=detail, journal=journal,
            calls=self._made, flow=self.flow, flow_version=self.version,
        )  # fmt: skip
        if self.fatal is None:
            self.fatal = err
        return err

    def next_recorded(self) -> list[Op] | None:
        """The calls whose recorded outcomes make the next round, in position order;
        None when no recorded round is left (or the flow diverged: `fatal`)."""
        if self.live or self.fatal is not None:
            return None
        if self._asap:
            ops, self._asap = sorted(self._asap, key=_pos), []
            return ops
        rounds, i = self._rounds, self._next_round
        while i < len(rounds) and rounds[i] <= self.round:
            i += 1
        self._next_round = i
        if i == len(rounds):
            return None
        r = rounds[i]
        if r == self.cancel_round:  # no call is delivered in it: the cancel is given
            self.round = r
            self.cancel_due = True
            return []
        positions = sorted(self.journal.rounds[r])
        missing = [p for p in positions if p not in self.ops]
        if missing:
            key = self.journal.by_pos[missing[0]].key
            self.error(
                missing[0], key, None,
                detail=f"the journal records {key!r} there, completed in round {r}, "
                "and the flow had not made that call by then",
            )  # fmt: skip
            return None
        self.round = r
        return [self.ops[p] for p in positions]

    def take_alone(self, rec: Record) -> bool:
        """Whether the next recorded round delivers `rec`, a checked call's recorded
        outcome, alone; if so, that round is now delivered (the call needs no
        filing). What `next_recorded` would return as [the call] once the flow
        blocks."""
        if rec.r is None or self.live or self._asap:
            return False
        rounds, i = self._rounds, self._next_round
        while i < len(rounds) and rounds[i] <= self.round:
            i += 1
        self._next_round = i
        if i == len(rounds) or rounds[i] != rec.r or len(self.journal.rounds[rec.r]) != 1:
            return False
        self.round = rec.r
        return True

    def delivered(self, op: Op) -> None:
        self.ops.pop(op.pos, None)

    def take_new(self) -> list[Op]:
        """The calls to start live, in position order."""
        new, self.new = self.new, []
        if len(new) > 1:
            new.sort(key=_pos)
        return new

    def unreached(self) -> Record | None:
        """A record at a position the flow never reached (it returned before it)."""
        left = [pos for pos in self.journal.by_pos if pos >= self._pos]
        return self.journal.by_pos[min(left)] if left else None
