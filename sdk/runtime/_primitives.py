"""Built-in journaled operations: waits, sleeps, time, random ids and patches.

Each one is a plain function that takes its step key when called (so
``asyncio.gather(wait_for("a"), wait_for("b"))`` is deterministic) and returns
the coroutine to await. Their keys live in the reserved ``~`` namespace.
"""

from __future__ import annotations

import uuid as _uuid
from collections.abc import Collection, Coroutine, Mapping
from datetime import datetime, timedelta
from typing import Any, NoReturn

from sdk._core._checks import check_id, check_name
from sdk._core._clock import instant, seconds
from sdk.errors import InvalidArgument
from sdk.model._events import match_data, watch_for
from sdk.runtime._runtime import current_runtime

__all__ = [
    "continue_as_new",
    "deprecate_patch",
    "now",
    "patched",
    "sleep",
    "sleep_until",
    "uuid4",
    "wait_for",
    "wait_for_event",
]


def wait_for(
    name: str,
    *,
    timeout: float | timedelta | None = None,
    human: bool = False,
    approvers: Collection[str] | None = None,
) -> Coroutine[Any, Any, Any]:
    """Wait durably for the signal `name` and return its payload.

    A signal sent before the wait is kept and consumed here (FIFO per name).
    While waiting the run is ``waiting_for_signal`` (``waiting_for_human`` with
    ``human=True``) and holds no worker. With ``human=True`` the result is a
    `Decision` sent by `Client.approve` / `Client.deny`.

    Args:
        name: the signal's name.
        timeout: seconds or a timedelta; when it passes first, `WaitTimeout`
            is raised (and raised again, identically, on replay).
        human: wait for an approval instead of a signal.
        approvers: with ``human=True``, the only actors whose `Client.approve` /
            `Client.deny` count; anyone else gets `Forbidden` (audited as
            ``auth.denied``). Default: any actor the client's authorizer allows.

    Example::

        decision = await wait_for("manager-approval", human=True, timeout=timedelta(days=2))
        if not decision.approved:
            return "rejected"
    """
    check_name(name, "wait_for(): name")
    who: tuple[str, ...] | None = None
    if approvers is not None:
        if not human:
            raise InvalidArgument(f"wait_for({name!r}): approvers= only applies with human=True")
        if isinstance(approvers, str):
            raise InvalidArgument(
                f"wait_for({name!r}): approvers must be a collection of actor names"
            )
        who = tuple(sorted({check_id(a, f"wait_for({name!r}): an approver") for a in approvers}))
        if not who:
            raise InvalidArgument(f"wait_for({name!r}): approvers must name at least one actor")
    limit = None if timeout is None else seconds(timeout, "wait_for timeout")
    if limit is not None and limit < 0:
        raise InvalidArgument(f"wait_for({name!r}): timeout must not be negative, got {timeout!r}")
    return current_runtime("wait_for()").wait(name, limit, human, who)


def wait_for_event(
    name: str, *, match: Mapping[str, Any] | None = None, timeout: float | timedelta | None = None
) -> Coroutine[Any, Any, Any]:
    """Wait durably for an event `name` sent by `Client.send_event`; return its data.

    Only events whose data has every field of `match` with an equal value
    (top-level fields, compared as JSON) count. The wait listens from the
    moment it begins: an event sent before that is missed (send it again, or
    use `wait_for` and `Client.signal` when the sender knows the run). An event
    reaches each listening wait at most once per event id. Journaled like
    `wait_for`: a replay returns the recorded data (or raises the recorded
    `WaitTimeout`), and it can race other waits in ``asyncio.wait``.

    Args:
        name: the event's name.
        match: field -> value that the event's data must hold (default: any event).
        timeout: seconds or a timedelta; when it passes first, `WaitTimeout`.

    Example::

        paid = await wait_for_event("payment.succeeded", match={"order_id": order_id},
                                    timeout=timedelta(days=1))
    """
    check_id(name, "wait_for_event(): name")
    limit = None if timeout is None else seconds(timeout, "wait_for_event timeout")
    if limit is not None and limit < 0:
        raise InvalidArgument(
            f"wait_for_event({name!r}): timeout must not be negative, got {timeout!r}"
        )
    rt = current_runtime("wait_for_event()")
    data = match_data(name, match, rt.serializer)
    return rt.wait_event(name, watch_for(name, data, rt.serializer), limit, data)


def sleep(duration: float | timedelta) -> Coroutine[Any, Any, None]:
    """Sleep durably: the run parks on a timer and holds no worker until it fires.

    A sleep that ends within the worker's ``inline_backoff_max`` (1 s by
    default), while the flow waits for nothing else that a signal, a decision
    or a child could end, is waited for in the worker instead: the run stays
    ``running`` and claimed, and wakes without a park, a wake-up and a claim.
    If the worker dies meanwhile, the next activation sleeps it again in full.

    Example::

        await sleep(timedelta(days=3))   # survives restarts and deploys
    """
    return current_runtime("sleep()").sleep_until(None, seconds(duration, "sleep duration"))


def sleep_until(when: datetime) -> Coroutine[Any, Any, None]:
    """Sleep durably until an aware datetime, from 0001-01-02 to 9999-12-31 UTC (a
    time every UTC offset can show; `InvalidArgument` otherwise)."""
    at = instant(when, "sleep_until(): when")
    return current_runtime("sleep_until()").sleep_until(at, None)


def now() -> Coroutine[Any, Any, datetime]:
    """The current time (UTC), recorded once: a replay sees the same value."""
    return current_runtime("now()").now()


def uuid4() -> Coroutine[Any, Any, _uuid.UUID]:
    """A random UUID, recorded once: a replay sees the same value."""
    return current_runtime("uuid4()").uuid4()


def patched(change_id: str) -> Coroutine[Any, Any, bool]:
    """Whether this run takes the new code path of the change `change_id`.

    A run that reaches this point on code that has the patch journals a marker
    and gets True; a run that passed this point before the patch existed (its
    journal holds the calls that came next on the old code) gets False and
    journals nothing, so its recorded calls replay on the ``else`` branch. A
    replay gives the run the same answer, and so does the same change id asked
    again in the run. See docs/changing-flows.md for the whole lifecycle.

    Args:
        change_id: names the change; a non-empty id, unique per change in the flow.

    Raises:
        InvalidArgument: `change_id` is not a valid id.
        NonDeterminismError: the run recorded this marker at another position.

    Example::

        if await patched("fraud-check"):
            await check_fraud(order)       # the new code
        await charge(order)                # old runs skip the check
    """
    check_id(change_id, "patched(): change_id")
    return current_runtime("patched()").patched(change_id)


def deprecate_patch(change_id: str) -> None:
    """Mark where ``patched(change_id)`` was, once no run is left on the old path.

    The code keeps only the new path. A run that journaled the marker here
    replays cleanly (the marker is skipped); a new run journals nothing. When
    the runs that hold the marker have drained too, remove this call.

    Example::

        deprecate_patch("fraud-check")
        await check_fraud(order)
        await charge(order)
    """
    check_id(change_id, "deprecate_patch(): change_id")
    current_runtime("deprecate_patch()").deprecate_patch(change_id)


def continue_as_new(*args: Any, **kwargs: Any) -> Coroutine[Any, Any, NoReturn]:
    """End this run's journal and go on as the same run, with new arguments.

    The flow function starts again from the top with `args` and `kwargs` (checked
    and encoded as `Client.start` does) and an empty journal, so a flow that
    loops for months keeps a bounded journal. The run keeps its id: `Client.get`,
    `RunHandle.result` and `Client.signal` reach the newest generation, and
    signals not consumed yet stay in its mailboxes. The generation that ended is
    kept as the completed run ``f"{run_id}~g{n}"`` (n = 0, 1, ...; reason
    ``continued_as_new``), with its journal, checkpoints and arguments; the run's
    event log shows each ``run.continued_as_new``.

    The await never returns: the flow is unwound (``finally`` blocks run, but call
    no step or wait) and the next generation is written in one atomic step. A
    crash before that write replays the flow to the same call.

    Example::

        @flow
        async def poller(cursor: int = 0) -> None:
            for _ in range(100):
                cursor = await fetch_and_handle(cursor)
                await sleep(60)
            await continue_as_new(cursor)
    """
    rt = current_runtime("continue_as_new()")
    return rt.continue_as_new(rt.encode_args(args, kwargs))
