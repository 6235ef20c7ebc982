"""Journal records: what a run did, one record per step key.

A run's journal is a map ``step key -> record``. Each record also carries the
*position* of the call that made it (the order in which the activation made
its intercepted calls), which is what non-determinism is checked against.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from typing import Any

import attrs
from cattrs.gen import make_dict_unstructure_fn, override

from sdk._core._serde import FORMAT_VERSION, acyclic_encoder, converter, loads
from sdk.store import StepEvent

__all__ = ["Journal", "Kind", "Record", "State", "StepEvent"]


class Kind(enum.StrEnum):
    """What made a record."""

    STEP = "step"
    WAIT = "wait"
    SLEEP = "sleep"
    NOW = "now"
    UUID = "uuid"
    TIMER = "timer"  # an asyncio timer of the flow's loop (asyncio.sleep, asyncio.timeout...)
    CANCEL = "cancel"  # the cancel request given to the flow (`sdk.engine._cursor.CANCEL_KEY`)
    CHILD = "child"  # start_child: the child run's id (or why it could not start)
    PATCH = "patch"  # a patch marker: `patched(change_id)` took the new path here


class State(enum.StrEnum):
    """Where a record stands."""

    OK = "ok"  # completed with `value`
    FAILED = "failed"  # failed for good with `error`
    RETRY = "retry"  # failed `attempts` times, next attempt at `due`
    PENDING = "pending"  # a wait or sleep registered, deadline `due`
    TIMEOUT = "timeout"  # a wait that reached its deadline


@attrs.frozen
class Record:
    """One journal entry.

    Attributes:
        key: the step key.
        pos: position of the call in the activation.
        kind: what made it.
        state: where it stands.
        value: the JSON value (result, payload, time...).
        type: recorded ``module:qualname`` for values without a declared type.
        error: the failure (type, message, args) for FAILED and RETRY.
        reason: the `Reason` code of a FAILED step.
        attempts: failed attempts so far.
        due: deadline (epoch seconds) of a PENDING wait or a RETRY.
        rh: request hash of a step's arguments (the side-effect ledger's check).
        r: the round in which the result was delivered to the flow (format 2;
            see `sdk.engine._activation`); None for an unresolved record, or one
            written by format 1 (delivered as soon as it is called).
        v: record format version.
    """

    key: str
    pos: int
    kind: Kind
    state: State
    value: Any = None
    type: str | None = None
    error: dict[str, Any] | None = None
    reason: str | None = None
    attempts: int = 0
    due: float | None = None
    rh: str | None = None
    r: int | None = None
    v: int = FORMAT_VERSION

    def to_json(self) -> str:
        # What the converter's hook below writes (a test checks they agree),
        # without its generic machinery: this runs once per journal write.
        # Written piece by piece, the encoder only for the value, the error and
        # `due` (a float JSON spells its own way): the encoder's per-string
        # calls made up most of a step record's cost. Kinds and states are
        # plain ASCII words; ints print as JSON does.
        # (`_value_`: the member's value without `Enum.value`'s descriptor.)
        text = (
            f'{{"key":{_string(self.key)},"pos":{_int(self.pos)},'
            f'"kind":"{self.kind._value_}","state":"{self.state._value_}","v":{_int(self.v)}'
        )
        value = self.value
        if value is not None:
            text += f',"value":{value}' if type(value) is int else ',"value":' + _encode(value)
        if self.type is not None:
            text += ',"type":' + _string(self.type)
        if self.error is not None:
            text += ',"error":' + _encode(self.error)
        if self.reason is not None:
            text += ',"reason":' + _string(self.reason)
        if self.attempts != 0:
            text += f',"attempts":{_int(self.attempts)}'
        if self.due is not None:
            text += ',"due":' + _encode(self.due)
        if self.rh is not None:
            text += ',"rh":' + _string(self.rh)
        if self.r is not None:
            text += f',"r":{_int(self.r)}'
        return text + "}"

    def splice_prefix(self) -> str:
        """JSON of this record minus its closing brace, ending in ``"value":``.

        The store appends a raw JSON payload and ``}`` without decoding it.
        """
        return self.to_json()[:-1] + ',"value":'

    @property
    def resolved(self) -> bool:
        """Whether the record is an outcome the flow was given (not a wait or retry)."""
        return self.state in _RESOLVED

    @classmethod
    def from_json(cls, text: str | bytes) -> Record:
        return _structure(loads(text))


# Every record states its format version, even the current one (the converter
# omits defaults), so a later reader can tell which format it is upgrading.
converter.register_unstructure_hook(
    Record,
    make_dict_unstructure_fn(
        Record, converter, _cattrs_omit_if_default=True, v=override(omit_if_default=False)
    ),
)


_encode = acyclic_encoder()  # a record's values were checked as JSON data already
_string: Callable[[str], str] = json.encoder.encode_basestring


def _int(n: int) -> str:
    """An int field as JSON (anything else through the encoder, as before)."""
    return str(n) if type(n) is int else _encode(n)


_FIELDS = frozenset(a.name for a in attrs.fields(Record))


def _structure(data: dict[str, Any]) -> Record:
    # A record without "v" is format 1 (the first commit left the default out).
    # Format 1 has no delivery rounds: its outcomes replay as soon as called.
    data.setdefault("v", 1)
    return converter.structure(data, Record)


_RESOLVED = frozenset({State.OK, State.FAILED, State.TIMEOUT})
_KINDS = {k.value: k for k in Kind}
_STATES = {s.value: s for s in State}


class Journal:
    """The records of one run, indexed by key, by position and by delivery round."""

    __slots__ = ("by_key", "by_pos", "last_pos", "rounds")

    def __init__(self, records: list[Record]) -> None:
        self.by_key: dict[str, Record] = {r.key: r for r in records}
        self.by_pos: dict[int, Record] = {r.pos: r for r in records}
        self.last_pos = max(self.by_pos, default=-1)
        # round -> the positions whose outcomes were delivered in it
        self.rounds: dict[int, list[int]] = {}
        for rec in records:
            if rec.r is not None and rec.resolved:
                self.rounds.setdefault(rec.r, []).append(rec.pos)

    @property
    def max_round(self) -> int:
        """The last round a recorded outcome was delivered in (0: none)."""
        return max(self.rounds, default=0)

    @classmethod
    def from_raw(cls, raw: dict[str, str]) -> Journal:
        """Parse a stored journal (step key -> record JSON), fast: one `json.loads`
        for all records, and records built directly where the format is current."""
        if not raw:
            return cls([])
        records = []
        kinds, states = _KINDS, _STATES
        for d in loads("[" + ",".join(raw.values()) + "]"):
            if (
                d.get("v", 1) == FORMAT_VERSION
                and d.keys() <= _FIELDS
                and d["kind"] in kinds
                and d["state"] in states
            ):
                d["kind"] = kinds[d["kind"]]  # a dict lookup: a tenth of Kind(...)
                d["state"] = states[d["state"]]
                records.append(Record(**d))
            else:  # an older or unusual format: the converter upgrades it
                records.append(_structure(d))
        return cls(records)

    def put(self, record: Record) -> None:
        """Note a record the activation wrote (its rounds are the activation's business)."""
        self.by_key[record.key] = record
        self.by_pos[record.pos] = record
        if record.pos > self.last_pos:
            self.last_pos = record.pos

    def failures(self) -> int:
        """Failed attempts recorded across the whole run (for failure budgets)."""
        return sum(r.attempts for r in self.by_key.values() if r.kind is Kind.STEP)
