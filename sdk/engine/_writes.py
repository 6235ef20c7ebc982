"""An activation's fenced writes, and the batches that deliver their outcomes.

Every write carries the activation's fencing token; one the store refuses
means the lease is lost, and the activation stops (`Writes.fenced`). A write
that delivers an outcome to the flow joins a *batch*: the writes in flight
together. Its number is the round the outcome is delivered in, written into
the record (`Record.r`), so a replay delivers it in the same round.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

import attrs

from sdk._core._journal import Kind, Record, State
from sdk._core._keys import CANCEL_KEY, CANCEL_POS
from sdk.engine._eager import Started
from sdk.engine._ops import Op, Outcome
from sdk.errors import LeaseLost
from sdk.store import NewIntent, StepEvent

if TYPE_CHECKING:
    from sdk._core._clock import Clock
    from sdk._core._journal import Journal
    from sdk.engine._cursor import ReplayCursor
    from sdk.store import Store

__all__ = ["Batch", "Owner", "Stop", "Writes"]


class Stop(BaseException):
    """Unwinds a step execution or a write of an activation that stopped."""


@attrs.define(eq=False)
class Batch:
    """Outcome writes in flight together; delivered as one round (`round`)."""

    round: int
    inflight: int = 0
    closed: bool = False  # one of its writes is back: later writes open the next batch
    outcomes: list[tuple[Op, Outcome]] = attrs.field(factory=list)


class Owner(Protocol):
    """What `Writes` needs of the activation whose writes it makes."""

    run_id: str
    fence: int
    store: Store
    clock: Clock
    journal: Journal
    cursor: ReplayCursor
    abandoned: bool
    cut: set[asyncio.Task[Any]]  # work cut off to give a cancel: its writes are dropped

    @property
    def cancel_pending(self) -> bool: ...

    def kick(self) -> None: ...

    def abandon(self, *, error: Exception | None = None, lost: LeaseLost | None = None) -> None: ...


class Writes:
    """The writes of one activation (see the module docstring)."""

    def __init__(self, act: Owner) -> None:
        self.act = act
        self.batches: collections.deque[Batch] = collections.deque()
        self.writing: set[asyncio.Task[Any]] = set()  # tasks in a write: not cut off
        self.inline = False  # the one piece of work in flight runs inline
        self.direct: tuple[int, Op, Outcome] | None = None  # its outcome, for the next round
        # The write left on the wire (`send`) and its record: `landed` awaits it.
        # The activation does so before it awaits any other store call
        # (`sdk.engine._ahead`); `_written` and `guard` hold it to that.
        self.pending: tuple[Started[bool], Record] | None = None
        self._last = act.journal.max_round

    def batch(self) -> Batch:
        """Join the open batch of outcome writes (or open the next); `leave` it after."""
        batches = self.batches
        if batches and not batches[-1].closed:
            batch = batches[-1]
        else:
            self._last = max(self._last, self.act.cursor.round) + 1
            batch = Batch(self._last)
            batches.append(batch)
        batch.inflight += 1
        return batch

    def leave(self, batch: Batch) -> None:
        batch.inflight -= 1
        batch.closed = True
        self.act.kick()

    def ready(self) -> Batch | None:
        """The next batch to deliver, once all of its writes are back."""
        batches = self.batches
        if batches and batches[0].closed and not batches[0].inflight:
            return batches.popleft()
        return None

    async def resolve(
        self,
        op: Op,
        make: Callable[..., Record],
        outcome: Outcome,
        event: StepEvent | None = None,
        intents: Sequence[NewIntent] = (),
    ) -> None:
        """Write `op`'s outcome (the record ``make(r=round)`` builds for the write's
        round); the flow gets `outcome` in that round."""
        act = self.act
        if act.abandoned or (act.cut and asyncio.current_task() in act.cut):
            raise Stop  # stopped, or cut off to give a cancel: nothing is recorded
        if self.inline and self.direct is None:
            # the only work in flight: its outcome is the next round on its own
            r = self._last = max(self._last, self.act.cursor.round) + 1
            rec = make(r=r)
            self.send(rec, event, intents)  # on the wire while the flow goes on
            op.record = rec
            self.direct = (r, op, outcome)
            return
        batch = self.batch()
        try:
            rec = make(r=batch.round)
            await self._record(rec, event, intents)
            op.record = rec
            batch.outcomes.append((op, outcome))
        finally:
            self.leave(batch)

    async def write(
        self, rec: Record, event: StepEvent | None = None, intents: Sequence[NewIntent] = ()
    ) -> None:
        """A fenced journal write that delivers nothing (a failed attempt, an approval)."""
        act = self.act
        if act.abandoned or (act.cut and asyncio.current_task() in act.cut):
            raise Stop
        await self._record(rec, event, intents)

    async def cancel_given(self, reason: str) -> int:
        """Journal that the flow is given its cancel request in the next round (the
        ``~cancel`` record); returns that round. Nothing else is in flight."""
        act = self.act
        if act.abandoned:
            raise Stop
        r = self._last = max(self._last, act.cursor.round) + 1
        rec = Record(CANCEL_KEY, CANCEL_POS, Kind.CANCEL, State.OK, value={"reason": reason}, r=r)
        written = await self.guard(
            act.store.record(act.run_id, act.fence, rec.key, rec.to_json(), now=act.clock.time())
        )
        if not written:
            self.fenced("the cancel was not given")
        return r

    async def mark(self, key: str) -> None:
        """The optional ``step.started`` event and checkpoint."""
        act = self.act
        if act.abandoned:
            raise Stop
        if not await self.guard(act.store.mark(act.run_id, act.fence, key, act.clock.time())):
            self.fenced(f"before step {key!r} started")

    def _call(
        self, rec: Record, event: StepEvent | None, intents: Sequence[NewIntent]
    ) -> Coroutine[Any, Any, bool]:
        act = self.act
        return act.store.record(
            act.run_id, act.fence, rec.key, rec.to_json(), now=act.clock.time(),
            event=event, intents=intents,  # a step's outbox intents go with its result
        )  # fmt: skip

    async def _record(
        self, rec: Record, event: StepEvent | None, intents: Sequence[NewIntent]
    ) -> None:
        await self._written(self._call(rec, event, intents), rec)

    def send(self, rec: Record, event: StepEvent | None, intents: Sequence[NewIntent]) -> None:
        """`_record`, split at the wire: the write is sent now and awaited by `landed`.

        Meanwhile the activation delivers the outcome and runs the flow's own code
        up to its next calls (no effect: the flow's code is deterministic, and
        runs again on every replay); everything that has one (a step body, a
        write, the run's end or park) awaits `landed` first. So the Python of
        the flow and of the next step's start runs while the write is on the
        wire, and a process that dies before the write is back has done nothing
        more than one that died while waiting for it.
        """
        assert self.pending is None, "a second write left on the wire"
        self.pending = (Started(self._call(rec, event, intents)), rec)

    async def landed(self) -> None:
        """The write `send` left on the wire is back, and was recorded (else `Stop`)."""
        assert self.pending is not None
        (call, rec), self.pending = self.pending, None
        await self._written(call, rec)

    def drop(self) -> None:
        """The activation stopped with a write on the wire: its reply is read by a
        task of its own (whether it was recorded, recovery finds out)."""
        if self.pending is not None:
            (call, _), self.pending = self.pending, None
            call.finish()

    async def _written(self, call: Awaitable[bool], rec: Record) -> None:
        assert self.pending is None, "a write awaited with another on the wire"
        act = self.act
        # `guard`, inlined: one coroutine less on every journal write
        task = asyncio.current_task()
        writing = self.writing
        if task is not None:
            writing.add(task)
        try:
            written = await call
        except Exception as exc:
            act.abandon(error=exc)
            raise Stop from exc
        finally:
            if task is not None:
                writing.discard(task)
            if act.cancel_pending:
                act.kick()  # the cancel waited for this write
        if not written:
            self.fenced(f"{rec.key!r} was not recorded")
        act.journal.put(rec)

    async def guard(self, call: Awaitable[Any]) -> Any:
        """Await a store call: a store error stops the activation (a write whose
        outcome is unknown is left to recovery, as after a crash)."""
        # Work is cut off by `abandon` (and to give a cancel) unless it is writing;
        # so is work that runs inline, in `execute`'s task.
        assert self.pending is None, "a store call awaited with a write on the wire"
        task = asyncio.current_task()
        writing = self.writing
        if task is not None:
            writing.add(task)
        try:
            return await call
        except Exception as exc:
            self.act.abandon(error=exc)
            raise Stop from exc
        finally:
            if task is not None:
                writing.discard(task)
            if self.act.cancel_pending:
                self.act.kick()  # the cancel waited for this write

    def fenced(self, what: str) -> NoReturn:
        """The store refused a fenced write: this activation lost its lease; it stops."""
        act = self.act
        act.abandon(lost=LeaseLost(f"run {act.run_id!r}: lease lost; {what}"))
        raise Stop
