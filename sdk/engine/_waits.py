"""Waits and timers of an activation: ``wait_for``, ``sleep``, asyncio timers, retry times.

A waiting call completes when its signal is in its mailbox, its deadline or
due time has passed, or (a step) its retry is due. Waits complete one at a
time, in call order, and only while the flow still waits for them
(`FlowMachine.wanted`): when one of several raced waits wins, the others are
withdrawn instead of consuming a later signal. With nothing else to do, the
run parks on what the flow still waits for (`park_plan`), unless all it waits
for ends by itself soon (`holds`): then the activation waits for it in place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from sdk._core._journal import Kind, Record, State
from sdk._core._serde import dumps, loads
from sdk._core._types import RunStatus, WaitingOn, WaitKind
from sdk._core._waiting import at, capped
from sdk.engine import _steprun
from sdk.engine._ops import (
    ChildWaitOp,
    EventWaitOp,
    Op,
    Outcome,
    SleepOp,
    StepOp,
    TimerOp,
    WaitOp,
    due,
)
from sdk.store import Consumed, EventType, Mailbox, StepEvent

if TYPE_CHECKING:
    from sdk.engine._state import ActivationState

__all__ = ["ParkPlan", "describe", "holds", "park_plan", "start", "start_next"]


def holds(act: ActivationState, first: float) -> bool:
    """Whether an activation with nothing else to do waits in place until `first`
    (its earliest due time) instead of parking the run.

    It does when every call the flow still waits for ends by itself (a sleep, a
    timer, a step's retry time: no signal, decision or child can end it), the
    first of them within the worker's ``inline_backoff_max``, as a retry backoff
    that short is slept in place. A park and its wake-up cost three round trips
    (suspend, claim, the timer's record); waiting in place costs the record
    alone, and holds a worker slot for at most ``inline_backoff_max``. The same on
    every clock: on a test's `FakeClock` the activation waits until the test
    advances the clock (`sdk._core._clock.wait_until`).
    """
    limit = act.engine.inline_backoff_max
    if limit <= 0:
        return False
    for op in act.waiting.values():
        ends_by_itself = isinstance(op, (SleepOp, TimerOp)) or (
            isinstance(op, StepOp) and not op.approval and op.retry_due is not None
        )
        if not ends_by_itself and act.machine.wanted(op):
            return False
    return first - act.clock.time() <= limit


def start(act: ActivationState, op: WaitOp | SleepOp | TimerOp, now: float) -> None:
    """A wait, sleep or timer the journal has no outcome for starts waiting; its
    deadline comes from its pending record when a parked run recorded one."""
    rec = op.record
    recorded = rec.due if rec is not None else None
    if isinstance(op, WaitOp):
        if rec is not None:
            op.deadline = recorded
        elif op.timeout is not None:
            op.deadline = now + op.timeout
    elif isinstance(op, SleepOp):
        if recorded is not None:
            op.due = recorded
        else:
            op.due = op.until if op.until is not None else now + (op.duration or 0.0)
    else:
        assert op.handle is not None
        op.due = recorded if recorded is not None else op.handle.when()
    act.waiting[op.pos] = op


def start_next(act: ActivationState) -> None:
    """Start completing the first call (in call order) that can complete now."""
    now = act.clock.time()
    for op in sorted(act.waiting.values(), key=lambda o: o.pos):
        if not act.machine.wanted(op):
            continue  # withdrawn: nothing awaits it (e.g. a race's loser)
        if isinstance(op, StepOp):
            if op.approval:
                if act.mail is None or _steprun.approval_mailbox(op) in act.mail:
                    act.resolving = act.waiting.pop(op.pos)
                    act.spawn(_take_approval(act, op))
                    return
            elif op.retry_due is not None and op.retry_due <= now:
                del act.waiting[op.pos]
                _steprun.retry_now(act, op)
                return
        elif isinstance(op, WaitOp):
            passed = op.deadline is not None and op.deadline <= now
            # a wait_for_event listens only once consumed (in each activation)
            unarmed = isinstance(op, EventWaitOp) and not op.armed
            if act.mail is None or op.mailbox in act.mail or passed or unarmed:
                act.resolving = act.waiting.pop(op.pos)
                act.spawn(_consume(act, op))
                return
        else:
            at = due(op)
            if at is not None and at <= now:
                act.resolving = act.waiting.pop(op.pos)
                act.spawn(_fire(act, op))
                return


async def _fire(act: ActivationState, op: Op) -> None:
    at = due(op)
    # its event says when it ended, in the same write: a timeline places what the
    # flow did next after it (docs/operations.md, "Timeline times")
    said = StepEvent(EventType.WAIT_COMPLETED, dumps({"kind": op.kind.value, "due": at}))
    await act.writes.resolve(
        op, lambda r: Record(op.key, op.pos, op.kind, State.OK, due=at, r=r), Outcome(None), said
    )
    if isinstance(op, SleepOp):
        act.hooks.call_finished(op)


async def _consume(act: ActivationState, op: WaitOp) -> None:
    """Take a signal (or the deadline) for `op`, in one script; delivered in its batch."""
    batch = act.writes.batch()
    try:
        r = batch.round
        watch = op.watch if isinstance(op, EventWaitOp) else None
        code, payload = await act.writes.guard(
            act.store.consume(
                act.run_id, act.fence, op.key, op.mailbox, act.clock.time(), op.deadline,
                Record(op.key, op.pos, Kind.WAIT, State.OK, r=r).to_json(),
                Record(op.key, op.pos, Kind.WAIT, State.TIMEOUT, due=op.deadline, r=r).to_json(),
                watch=watch,
            )
        )  # fmt: skip
        if isinstance(op, EventWaitOp):
            op.armed = True
        if code is Consumed.FENCED:
            act.writes.fenced(f"while waiting at {op.key!r}")
        if code is Consumed.SIGNAL:
            value = loads(payload or "null")
            op.record = Record(op.key, op.pos, Kind.WAIT, State.OK, value=value, r=r)
            try:
                outcome = Outcome(op.payload(value))
            except Exception as exc:
                outcome = Outcome(error=exc)
        elif code is Consumed.TIMEOUT:
            op.record = Record(op.key, op.pos, Kind.WAIT, State.TIMEOUT, due=op.deadline, r=r)
            outcome = Outcome(error=op.timed_out())
        else:  # the mailbox was empty after all: wait on
            _empty(act, op, op.mailbox)
            return
        act.journal.put(op.record)
        act.hooks.call_finished(op)
        batch.outcomes.append((op, outcome))
    finally:
        act.writes.leave(batch)


async def _take_approval(act: ActivationState, op: StepOp) -> None:
    """Take the approval a ``require_human`` step waits for (it delivers nothing)."""
    box = _steprun.approval_mailbox(op)
    rec = Record(op.key, op.pos, Kind.WAIT, State.OK)
    code, payload = await act.writes.guard(
        act.store.consume(
            act.run_id, act.fence, op.key, box, act.clock.time(), None,
            rec.to_json(), Record(op.key, op.pos, Kind.WAIT, State.TIMEOUT).to_json(),
        )
    )  # fmt: skip
    if code is Consumed.FENCED:
        act.writes.fenced(f"while waiting at {op.key!r}")
    if code is not Consumed.SIGNAL:
        _empty(act, op, box)
        return
    act.resolving = None
    value = loads(payload or "null")
    op.record = attrs.evolve(rec, value=value)
    act.journal.put(op.record)
    _steprun.decided(act, op, value)


def _empty(act: ActivationState, op: Op, box: Mailbox) -> None:
    if act.mail is not None:
        act.mail.discard(box)
    act.resolving = None
    act.waiting[op.pos] = op


def describe(op: Op) -> WaitingOn | None:
    """What a call the run parks on waits for; None for a call it does not park on."""
    if isinstance(op, ChildWaitOp):
        return WaitingOn(WaitKind.CHILD, op.child.run_id, at(op.deadline))
    if isinstance(op, EventWaitOp):
        return WaitingOn(WaitKind.EVENT, op.name, at(op.deadline), dict(op.match))
    if isinstance(op, WaitOp):
        kind = WaitKind.HUMAN if op.human else WaitKind.SIGNAL
        return WaitingOn(kind, op.name, at(op.deadline))
    if isinstance(op, (SleepOp, TimerOp)):
        return WaitingOn(WaitKind.SLEEP, None, at(op.due))
    if isinstance(op, StepOp):
        if op.approval:  # a replayed step whose policy asks a person first
            return WaitingOn(WaitKind.HUMAN, f"replay:{op.key}")
        if op.retry_due is not None:
            return WaitingOn(WaitKind.RETRY, op.key, at(op.retry_due))
    return None


@attrs.frozen
class ParkPlan:
    """What parking a run writes: the deadlines its waiting calls keep, what it waits on
    (`waiting_on`: its `RunRecord.waiting_on`)."""

    records: list[tuple[str, str]]
    mailboxes: list[Mailbox]
    approvers: dict[Mailbox, tuple[str, ...]]
    status: RunStatus
    deadline: float | None
    waiting_on: tuple[WaitingOn, ...]


def park_plan(act: ActivationState) -> ParkPlan | None:
    """How to park on what the flow still waits for; None when it waits for nothing
    that can complete (every task blocked on something else)."""
    waiting = [
        op for op in sorted(act.waiting.values(), key=lambda o: o.pos)
        if op.fut is None or not op.fut.cancelled()
    ]  # fmt: skip
    alive = [op for op in waiting if act.machine.wanted(op)]
    if not alive:
        return None
    records: list[tuple[str, str]] = []
    for op in waiting:
        rec = _pending_record(op)
        if rec is not None and rec != op.record:
            records.append((op.key, rec.to_json()))
    mailboxes: set[Mailbox] = set()
    approvers: dict[Mailbox, tuple[str, ...]] = {}
    human = False
    for op in alive:
        if isinstance(op, WaitOp):
            mailboxes.add(op.mailbox)
            human = human or op.human
            if op.approvers is not None:
                approvers[op.mailbox] = op.approvers
        elif isinstance(op, StepOp) and op.approval:
            mailboxes.add(_steprun.approval_mailbox(op))
            human = True
    dues = [d for op in alive if (d := due(op)) is not None]
    described = [w for op in alive if (w := describe(op)) is not None]
    return ParkPlan(
        records,
        sorted(mailboxes, key=lambda b: (b.human, b.name)),
        approvers,
        RunStatus.WAITING_FOR_HUMAN if human else RunStatus.WAITING_FOR_SIGNAL,
        min(dues) if dues else None,
        tuple(capped(described)),
    )


def _pending_record(op: Op) -> Record | None:
    """What the journal keeps of a waiting call: its deadline, stable across replays."""
    if isinstance(op, WaitOp):
        return Record(op.key, op.pos, Kind.WAIT, State.PENDING, due=op.deadline)
    if isinstance(op, (SleepOp, TimerOp)):
        return Record(op.key, op.pos, op.kind, State.PENDING, due=op.due)
    if isinstance(op, StepOp) and op.approval:
        return Record(op.key, op.pos, Kind.WAIT, State.PENDING)
    return None  # a retry: its RETRY record has the due time
