"""How an activation ends: the run finishes, or parks, or the activation just stops.

Each is one last fenced write. A refused write (the lease was lost meanwhile)
or a store error ends the activation without an outcome; the run continues
where the journal left it, in another activation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from sdk._core._journal import Record
from sdk._core._serde import (
    clean_message,
    converter,
    dumps,
    exception_message,
    traceback_text,
    type_path,
)
from sdk._core._types import ErrorInfo, Reason, RunStatus
from sdk._core._waiting import encode
from sdk.engine import _waits
from sdk.engine._ops import STEP_TAG
from sdk.engine._writes import Stop
from sdk.errors import FlowBlocked, SerializationError
from sdk.model._flowdef import RESULT_GRACE
from sdk.model._intercept import ActivationOutcome
from sdk.store import CorruptData, Parked, Refusal, Refused

if TYPE_CHECKING:
    from sdk.engine._state import ActivationState

__all__ = ["canceled", "conclude", "continue_as_new", "fail", "park", "report"]

log = logging.getLogger("steadyflow.worker")
#: Characters of an error message a failure's log line shows (the run keeps it all).
_LOGGED = 300


async def conclude(act: ActivationState) -> None:
    """The flow's main task ended: record the run's outcome."""
    main = act.machine.main
    assert main is not None
    await act.settle()  # background steps are cut off (as asyncio.run does)
    if act.abandoned:
        return
    if act.machine.cancel_given:
        await canceled(act)
        return
    if main.cancelled():
        msg = "the flow's main task was canceled"
        await fail(act, asyncio.CancelledError, msg, None, Reason.FLOW_ERROR)
        return
    failure = main.exception()
    if failure is not None:
        key, reason = getattr(failure, STEP_TAG, (None, Reason.FLOW_ERROR))
        if isinstance(failure, SerializationError) and key is None:
            reason = Reason.SERIALIZATION_ERROR
        tb = traceback_text(failure)
        await fail(act, type(failure), exception_message(failure), key, reason, tb)
        return
    unreached = act.cursor.unreached()
    if unreached is not None:
        # The flow returned before reaching calls the journal holds: the
        # code changed (e.g. a step was removed), just as a changed call is.
        err = act.cursor.error(unreached.pos, unreached.key, None)
        await fail(act, type(err), str(err), None, Reason.NON_DETERMINISM)
        return
    flow = act.flow
    try:
        data, tpath = act.serializer.encode(
            main.result(), flow.return_type(), f"result of flow {flow.name!r}"
        )
    except Exception as exc:  # a converter hook's error too: the result cannot be kept
        await fail(act, type(exc), exception_message(exc), None, Reason.SERIALIZATION_ERROR)
        return
    now = act.clock.time()
    grace = now + RESULT_GRACE if flow.delete_on_success else None
    act.ended = ActivationOutcome.COMPLETED
    await _end(
        act,
        act.store.finish(
            act.run_id, act.fence, RunStatus.COMPLETED, now, result=dumps(data),
            result_type=tpath, retention=flow.retention, delete_until=grace,
        ),
        "completed",
    )  # fmt: skip


async def canceled(act: ActivationState) -> None:
    """The flow ended after it was given its cancel: the run ends ``canceled`` with
    the cancel's reason, however the flow ended. What it returned is kept as the
    run's result, an error it raised as its error (for inspection)."""
    act.ended = ActivationOutcome.CANCELED
    main = act.machine.main
    assert main is not None
    result = result_type = error = None
    if not main.cancelled():
        failure = main.exception()
        if failure is not None:
            info = ErrorInfo(
                type_path(type(failure)), clean_message(exception_message(failure)),
                getattr(failure, STEP_TAG, (None,))[0], Reason.FLOW_ERROR,
                traceback_text(failure),
            )  # fmt: skip
            error = dumps(converter.unstructure(info))
        else:
            flow = act.flow
            try:
                data, result_type = act.serializer.encode(
                    main.result(), flow.return_type(), f"result of flow {flow.name!r}"
                )
                result = dumps(data)
            except Exception:  # the result cannot be kept: the run is canceled all the same
                log.warning("run %s: the result of its canceled flow cannot be kept", act.run_id)
    await _end(
        act,
        act.store.finish(
            act.run_id, act.fence, RunStatus.CANCELED, act.clock.time(), result=result,
            result_type=result_type, error=error, reason=act.cancel_reason or "canceled",
            retention=act.flow.retention,
        ),
        "canceled",
    )  # fmt: skip


async def continue_as_new(act: ActivationState) -> None:
    """The flow called `continue_as_new`: end this generation, start the next."""
    args = act.machine.continuing
    assert args is not None
    await act.settle()  # background steps are cut off, as when the flow returns
    if act.abandoned:
        return
    unreached = act.cursor.unreached()
    if unreached is not None:  # the journal holds calls after this point: code changed
        err = act.cursor.error(unreached.pos, unreached.key, "~continue_as_new")
        await fail(act, type(err), str(err), None, Reason.NON_DETERMINISM)
        return
    run_id, gen = act.run_id, act.stored.generation
    archived = f"{run_id}~g{gen}"
    await _end(
        act,
        act.store.continue_as_new(
            run_id, act.fence, act.clock.time(), args,
            dumps({"generation": gen + 1, "archived_as": archived}),
            dumps({"generation": gen, "continued_as": run_id}),
        ),
        "continued-as-new",
    )  # fmt: skip


async def fail(
    act: ActivationState,
    etype: type[BaseException],
    message: str,
    key: str | None,
    reason: Reason,
    tb: str | None = None,
) -> None:
    """Record the run's failure (`tb`: its traceback, `traceback_text`)."""
    act.ended = ActivationOutcome.FAILED
    # a message with a lone surrogate, or of 10 MB, must not make the write fail
    error = ErrorInfo(type_path(etype), clean_message(message), key, reason, tb)
    text = dumps(converter.unstructure(error))
    refused = await _end(
        act,
        act.store.finish(
            act.run_id, act.fence, RunStatus.FAILED, act.clock.time(), error=text,
            reason=str(reason),
        ),
        "failed",
    )  # fmt: skip
    if refused is None and not act.abandoned and act.store_error is None:
        _log_failure(act, error)


def _log_failure(act: ActivationState, error: ErrorInfo) -> None:
    """One WARNING line for a run the worker failed (the run's error keeps it whole,
    with its traceback: ``steadyflow runs show RUN_ID``)."""
    first = error.message.partition("\n")[0]
    said = first if len(first) <= _LOGGED else first[:_LOGGED] + "..."
    log.warning(
        "run %s of flow %s failed: %s: %s (step %s, reason %s)",
        act.run_id, act.flow.name, error.type, said, error.step_key or "-", error.reason,
        extra={
            "run_id": act.run_id, "flow": act.flow.name, "error_type": error.type,
            "step_key": error.step_key, "reason": str(error.reason),
        },
    )  # fmt: skip


async def park(act: ActivationState) -> None:
    """Nothing runs and nothing can complete now: park on what the flow waits for."""
    plan = _waits.park_plan(act)
    if plan is None:
        err = FlowBlocked(
            f"run {act.run_id!r}: every task of the flow waits on something no signal, "
            "timer or step can complete (an asyncio.Event or future nothing sets, or a "
            "task whose wait was withdrawn), so the flow cannot go on"
        )
        await fail(act, FlowBlocked, str(err), None, Reason.FLOW_ERROR)
        return
    act.parking = True
    keeping = act.engine.keeping
    keep = keeping is not None
    delay = None  # kept: how long its wake-up waits for this worker (sdk.worker._sticky)
    if keeping is not None:
        delay = keeping.delay if keeping.serving else 0.0
    reply = await _end(
        act,
        act.store.suspend(
            act.run_id, act.fence, act.clock.time(), plan.deadline, plan.status,
            plan.records, plan.mailboxes, approvers=plan.approvers,
            sticky=delay, waiting_on=encode(plan.waiting_on),
        ),
        "parked",
    )  # fmt: skip
    if reply is Parked.PARKED:
        act.hooks.parked(plan.waiting_on)
    if keep and (reply is Parked.PARKED or reply is Parked.READY):
        # Kept (sdk.worker._sticky): the waiting calls hold what a replay would read from
        # the journal now, their pending records.
        ops = {op.key: op for op in act.waiting.values()}
        for key, text in plan.records:
            rec = Record.from_json(text)
            act.journal.put(rec)
            if key in ops:
                ops[key].record = rec
        act.kept = True


async def _end(
    act: ActivationState, call: Awaitable[Refused | Parked | None], outcome: str
) -> Refused | Parked | None:
    """The activation's last write (a lost lease or a store error: see `report`);
    returns the store's reply (None when it stopped the activation)."""
    with contextlib.suppress(Stop):
        reply = await act.writes.guard(call)
        if reply is Parked.FENCED or (isinstance(reply, Refused) and reply.why is Refusal.FENCED):
            act.writes.fenced(f"its {outcome} outcome was dropped")
        return reply  # type: ignore[no-any-return]
    return None


def report(act: ActivationState) -> None:
    """Log how an activation stopped without an outcome, if it did."""
    if isinstance(act.store_error, CorruptData):
        return  # damaged data: the worker fails the run for it, and logs that
    if act.store_error is not None:
        log.error(
            "run %s: store error (%s: %s); activation abandoned, the run is recovered "
            "when its lease expires", act.run_id, type(act.store_error).__name__,
            act.store_error,
        )  # fmt: skip
    elif act.lost is not None:
        log.warning(
            "run %s: lease lost (another worker owns it now, or it was canceled); "
            "this worker stopped writing: %s", act.run_id, act.lost,
        )  # fmt: skip
    elif act.abandoned:
        log.warning("run %s: simulated crash; the lease is left to expire", act.run_id)
