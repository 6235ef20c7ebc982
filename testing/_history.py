"""`FlowTestEnv.history`: a run's steps and waits as records a test compares with ``==``.

What a run did comes from its journal (outcomes, attempts, order) and its event
log (when each call ended); when each call began is noted by an interceptor of
the env (`Timings`), on the env's fake clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import attrs

from sdk._core._clock import Clock
from sdk._core._journal import Journal, Kind, Record, State
from sdk.errors import RunNotFound
from sdk.model._intercept import Interceptor
from sdk.store import Store

__all__ = ["HistoryEntry", "Timings", "read_history"]

_KINDS = {Kind.STEP: "step", Kind.WAIT: "wait", Kind.SLEEP: "sleep", Kind.CHILD: "child"}
# the events that end a call (their `step_key` names it)
_ENDS = frozenset(
    {"step.completed", "step.failed", "side_effect.reused", "wait.completed", "wait.timed_out"}
)
_PAGE = 500


@attrs.frozen
class HistoryEntry:
    """One step, wait, sleep or child start of a run, as `FlowTestEnv.history` gives it.

    Compare entries (or the whole list) with ``==``: every field is plain data.

    Attributes:
        key: the call's key (``"charge#1"``, ``"~wait:approval#1"``, ``"~sleep#1"``).
        kind: ``"step"``, ``"wait"``, ``"sleep"`` or ``"child"``.
        state: ``"ok"``, ``"failed"``, ``"timeout"`` (a wait past its deadline),
            ``"pending"`` (a wait or sleep not over yet) or ``"retry"`` (a step
            waiting for its next attempt).
        attempts: for a step, the attempts that ran to an outcome (the failed
            ones and the one that succeeded; a crash that cut one off does not
            count); 0 for the other kinds.
        result: the recorded value as JSON (a step's return value, a signal's
            payload, a human decision as a dict, a child's run id); None for a
            sleep and for anything not ``"ok"``.
        error: ``"Type: message"`` of a step's last failure, or None.
        started_at: when the call began on the env's clock (a step: its first
            attempt; a wait or sleep: when the flow reached it); None when this
            env did not see it begin.
        ended_at: when it ended (a sleep: its due time); None while it is not over.
        duration: ``ended_at - started_at`` when both are known.
    """

    key: str
    kind: str
    state: str
    attempts: int = 0
    result: Any = None
    error: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    duration: timedelta | None = None


class Timings(Interceptor):
    """Notes when each call of a run first began, on the env's clock."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.started: dict[tuple[str, str], float] = {}

    def step_started(self, run_id: str, key: str, attempt: int) -> None:
        self.started.setdefault((run_id, key), self._clock.time())

    def call_started(self, run_id: str, key: str, kind: str) -> None:
        self.started.setdefault((run_id, key), self._clock.time())


async def read_history(store: Store, run_id: str, timings: Timings) -> list[HistoryEntry]:
    """The run's steps, waits, sleeps and child starts, in the order the flow made them."""
    lineage = await store.read_lineage(run_id)
    if lineage is None:
        raise RunNotFound(run_id)
    ends: dict[str, float] = {}
    cursor: str | None = None
    while True:
        page = await store.events(run_id, cursor, _PAGE)
        for event in page:
            if event.step_key is not None and event.type in _ENDS:
                ends[event.step_key] = event.at
        if len(page) < _PAGE:
            break
        cursor = page[-1].event_id
    records = sorted(Journal.from_raw(lineage.journal).by_key.values(), key=lambda r: r.pos)
    return [
        _entry(rec, timings.started.get((run_id, rec.key)), ends.get(rec.key))
        for rec in records
        if rec.kind in _KINDS
    ]


def _entry(rec: Record, began: float | None, ended: float | None) -> HistoryEntry:
    state = rec.state
    if rec.kind is Kind.SLEEP and state is State.OK:
        ended = rec.due if rec.due is not None else ended
    elif rec.kind is Kind.CHILD and ended is None:
        ended = began  # a child start ends as it is recorded: no event of its own
    if state in (State.PENDING, State.RETRY):
        ended = None
    attempts = 0
    if rec.kind is Kind.STEP:
        attempts = rec.attempts + 1 if state is State.OK else rec.attempts
    error = None
    if rec.error is not None:
        kind = str(rec.error.get("type", "")).rpartition(":")[2]
        error = f"{kind}: {rec.error.get('message', '')}"
    start = _at(began)
    end = _at(ended)
    return HistoryEntry(
        key=rec.key,
        kind=_KINDS[rec.kind],
        state=state.value,
        attempts=attempts,
        result=rec.value if state is State.OK and rec.kind is not Kind.SLEEP else None,
        error=error,
        started_at=start,
        ended_at=end,
        duration=end - start if start is not None and end is not None else None,
    )


def _at(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC)
