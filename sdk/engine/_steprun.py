"""Running a step live: attempts under its retry policy, and what replays and forks reuse.

A step op that has no recorded outcome is started here by its activation
(`start`). Its body runs on the worker's event loop; every attempt that fails
is journaled (so budgets survive crashes), and the outcome is recorded with
one fenced write that the activation delivers to the flow in a later round.
A retry backoff longer than the worker's ``inline_backoff_max`` leaves the
op waiting on a durable timer (the run parks); so does a replayed step with
``replay="require_human"`` until its approval arrives.

An attempt of a step with a timeout runs as a task of its own, raced against
a deadline on the worker's clock (`sdk._core._clock.sleep_until`): past it, the task
is cancelled, allowed to unwind, and the attempt fails with `StepTimeout`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import types
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from sdk._core._clock import sleep_until
from sdk._core._journal import Kind, Record, State
from sdk._core._retry import RetryPolicy
from sdk._core._serde import converter, dumps, encode_exception, exception_message
from sdk._core._types import CheckpointKind, Decision, EventType, Reason
from sdk.engine._ops import Outcome, StepOp, tag
from sdk.engine._writes import Stop
from sdk.errors import IdempotencyConflict, SerializationError, StepTimeout
from sdk.model._intercept import StepCall, execute_step, wrapping
from sdk.runtime._runtime import StepContext, step_var
from sdk.store import Mailbox, StepEvent

if TYPE_CHECKING:
    from sdk.engine._state import ActivationState

__all__ = ["announce", "approval_mailbox", "decided", "retry_now", "start"]

_COMPLETED = StepEvent(EventType.STEP_COMPLETED, "", CheckpointKind.STEP_COMPLETED)


def approval_mailbox(op: StepOp) -> Mailbox:
    """The human wait a ``require_human`` step takes before running again."""
    return Mailbox(f"replay:{op.key}", human=True)


def start(act: ActivationState, op: StepOp) -> None:
    """Begin a step op the journal has no outcome for (at the live frontier)."""
    rec = op.record
    if rec is not None and rec.kind is Kind.WAIT:  # its approval, taken or awaited
        if rec.state is State.OK:
            decided(act, op, rec.value)
        else:
            op.approval = True
            act.park_op(op)
        return
    if rec is None and act.has_lineage:
        lin = act.lineage_record(op.key, op.pos, Kind.STEP)
        if lin is not None and op.spec.replay == "use_recorded_result":
            act.spawn(_reuse(act, op, lin))
            return
        if lin is not None and op.spec.replay == "require_human":
            op.approval = True
            act.park_op(op)
            return
    attempts = 0
    if rec is not None and rec.state is State.RETRY:
        attempts = rec.attempts  # the budget survives crashes
        if rec.due is not None and act.clock.time() < rec.due:
            op.retry_due = rec.due
            act.park_op(op)
            return
        act.hooks.timer_fired(op.key, "retry", rec.due)  # the backoff the run parked on is over
    act.spawn(_attempts(act, op, attempts), step=True)


def retry_now(act: ActivationState, op: StepOp) -> None:
    """A waiting retry is due: run the next attempt."""
    act.hooks.timer_fired(op.key, "retry", op.retry_due)
    op.retry_due = None
    attempts = op.record.attempts if op.record is not None else 0
    act.spawn(_attempts(act, op, attempts), step=True)


def decided(act: ActivationState, op: StepOp, decision: Any) -> None:
    """The approval ``replay:{key}`` arrived: run the step again, or reuse its result."""
    op.approval = False
    approved = converter.structure(decision, Decision).approved
    lin = act.lineage_record(op.key, op.pos, Kind.STEP)
    if approved or lin is None:
        act.spawn(_attempts(act, op, 0), step=True)
    else:
        act.spawn(_reuse(act, op, lin))


def announce(rec: Record, optional: bool) -> StepEvent | None:
    """The event (and checkpoint) a step's journal write makes, in the same script."""
    if rec.state is State.OK:
        return _COMPLETED
    err = rec.error or {}
    if rec.state is State.FAILED:
        # a step that ended in failure is a boundary too: the flow may catch
        # it and carry on without that result (a degraded step)
        data = {"type": err.get("type"), "message": err.get("message"), "reason": rec.reason}
        return StepEvent(EventType.STEP_FAILED, dumps(data), CheckpointKind.STEP_COMPLETED)
    data = {"attempt": rec.attempts, "due": rec.due, "type": err.get("type"),
            "message": err.get("message")}  # fmt: skip
    kind = CheckpointKind.RETRY_SCHEDULED if optional else None
    return StepEvent(EventType.STEP_RETRY_SCHEDULED, dumps(data), kind)


async def _reuse(act: ActivationState, op: StepOp, lin: Record) -> None:
    """Take the source run's recorded result instead of running the side effect again."""
    rh = op.spec.request_hash(op.fn, op.args, op.kwargs, act.serializer)
    idem = f"{act.key_root}:{op.key}"
    if lin.rh is not None and rh != lin.rh:
        exc = IdempotencyConflict(
            f"run {act.run_id!r}: step {op.key!r} (idempotency key {idem!r}) was recorded "
            "with other arguments in the source run; it is not run again"
        )
        await _fail(act, op, exc, Reason.IDEMPOTENCY_CONFLICT, 0, rh)
        return
    data = dumps({"idempotency_key": idem, "source_run_id": act.stored.source_run_id})
    event = StepEvent(EventType.SIDE_EFFECT_REUSED, data, CheckpointKind.STEP_COMPLETED)
    await act.writes.resolve(
        op,
        lambda r: Record(op.key, op.pos, Kind.STEP, State.OK, value=lin.value, type=lin.type,
                         rh=lin.rh, r=r),
        op.outcome(lin, act.serializer),
        event,
    )  # fmt: skip


async def _attempts(act: ActivationState, op: StepOp, attempts: int) -> None:
    spec = op.spec
    policy = spec.retry or act.retry_override or act.flow.retry
    rh = spec.request_hash(op.fn, op.args, op.kwargs, act.serializer)
    hooks = act.engine.interceptors
    wrappers = wrapping(hooks) if hooks else ()  # interceptors that wrap the body
    idem = f"{act.key_root}:{op.key}"
    if act.writes.pending is not None:
        await act.writes.landed()  # the last step's write is back before this one runs
        if act.abandoned or act.cancel_pending:
            raise Stop  # stopped meanwhile, or a cancel came: given before this step runs
    while True:
        if hooks:
            act.hooks.step_started(op, attempts + 1)
        if act.flow.optional_checkpoints:
            await act.writes.mark(op.key)
        ctx = StepContext(act.run_id, op.key, attempts + 1, idem)
        token = step_var.set(ctx)
        failure: Exception | None = None
        try:
            if wrappers:
                call = StepCall(act.run_id, op.key, spec.name, attempts + 1, op.args, op.kwargs)
                value = execute_step(wrappers, call, op.fn)
            else:
                value = op.fn(*op.args, **op.kwargs)
            if spec.timeout is not None and isinstance(value, Awaitable):
                value = await _within(act, op, value, spec.timeout)
            elif type(value) is types.CoroutineType or isinstance(value, Awaitable):
                value = await value
        except Exception as exc:
            failure = exc
        finally:
            step_var.reset(token)
        if failure is not None:
            attempts += 1
            if hooks:
                act.hooks.step_ended(op, attempts, failure)
            due = await _failed(act, op, failure, attempts, policy, rh)
            if hooks:
                act.hooks.step_failed(op, attempts, failure, due is not None)
            if due is None:
                return
            delay = due - act.clock.time()
            if delay > act.engine.inline_backoff_max:
                op.retry_due = due  # a durable timer at the recorded due time
                act.park_op(op)
                return
            act.backing_off += 1  # on the activation's clock, as every wait in place
            act.maybe_held()
            try:
                await sleep_until(act.clock, due)
            finally:
                act.backing_off -= 1
            continue
        if hooks:
            act.hooks.step_ended(op, attempts + 1, None)
            act.hooks.step_finished(op, attempts + 1)
        try:
            data, tpath = act.serializer.encode(value, spec.return_type(), op.what)
        except Exception as exc:
            # Never a store error: the step ran, its result cannot be kept, and
            # running it again would not change that (so: no retry, no recovery).
            err = exc if isinstance(exc, SerializationError) else _unstorable(op, exc)
            await _fail(act, op, err, Reason.SERIALIZATION_ERROR, attempts + 1, None)
            return
        done = functools.partial(Record, op.key, op.pos, Kind.STEP, State.OK, value=data,
                                 type=tpath, attempts=attempts, rh=rh)  # fmt: skip
        await act.writes.resolve(op, done, Outcome(value), _COMPLETED, ctx._intents)
        return


async def _within(act: ActivationState, op: StepOp, attempt: Awaitable[Any], timeout: float) -> Any:
    """The attempt's result, or `StepTimeout` once it has run `timeout` seconds of the
    worker's clock: then its task is cancelled and has unwound (its ``except
    CancelledError`` / ``finally`` ran) before the failure is recorded."""
    body = asyncio.ensure_future(attempt)  # copies the context: current_step() holds
    timer = asyncio.ensure_future(sleep_until(act.clock, act.clock.time() + timeout))
    timed_out = False
    try:
        await asyncio.wait((body, timer), return_when=asyncio.FIRST_COMPLETED)
        timed_out = not body.done()
    finally:
        timer.cancel()
        if not body.done():  # timed out, or this activation is being cancelled
            body.cancel()
            await asyncio.wait((body,))
    if timed_out:
        # whatever the body did once cancelled (even returning a value), the
        # attempt ran out of time: its outcome is the timeout
        if not body.cancelled():
            body.exception()  # retrieved: not logged as "never retrieved"
        act.log.info("run %s: step %s timed out after %gs", act.run_id, op.key, timeout)
        raise StepTimeout(op.key, timeout)
    return body.result()


def _unstorable(op: StepOp, exc: Exception) -> SerializationError:
    """An unexpected error of the serializer (a converter hook's) as what it means."""
    err = SerializationError(
        f"{op.what}: cannot be stored: {type(exc).__name__}: {exception_message(exc)[:200]}"
    )
    err.__cause__ = exc
    return err


async def _failed(
    act: ActivationState,
    op: StepOp,
    exc: Exception,
    attempts: int,
    policy: RetryPolicy | None,
    rh: str,
) -> float | None:
    """Record a failed attempt; when the next one is due if the step will be retried."""
    if policy is None:
        verdict: Reason | None = Reason.STEP_FAILED
    else:
        verdict = policy.verdict(exc, attempts, act.journal.failures() + 1)
    if verdict is not None:
        await _fail(act, op, exc, verdict, attempts, None)
        return None
    assert policy is not None
    delay = policy.delay(attempts)
    due = act.clock.time() + delay
    rec = Record(op.key, op.pos, Kind.STEP, State.RETRY, error=encode_exception(exc),
                 attempts=attempts, due=due)  # fmt: skip
    await act.writes.write(rec, announce(rec, act.flow.optional_checkpoints))
    op.record = rec
    act.log.info(
        "run %s: step %s failed (attempt %d: %s); retrying in %.3fs",
        act.run_id, op.key, attempts, type(exc).__name__, delay,
    )  # fmt: skip
    return due


async def _fail(
    act: ActivationState, op: StepOp, exc: Exception, reason: Reason, attempts: int, rh: str | None
) -> None:
    """Record the step's failure for good; the flow gets `exc` (tagged with key and reason)."""
    error = encode_exception(exc)
    if "traceback" in error:  # the run's error reports the step's frames, as a replay does
        with contextlib.suppress(Exception):
            exc.__steadyflow_traceback__ = error["traceback"]  # type: ignore[attr-defined]

    def record(r: int) -> Record:
        return Record(op.key, op.pos, Kind.STEP, State.FAILED, error=error, reason=reason,
                      attempts=attempts, rh=rh, r=r)  # fmt: skip

    sample = record(0)
    await act.writes.resolve(
        op,
        record,
        Outcome(error=tag(exc, op.key, reason)),
        announce(sample, act.flow.optional_checkpoints),
    )
