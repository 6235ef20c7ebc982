"""The `@step` decorator: a call of the function inside a run goes to the current runtime."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar, overload

import wrapt

from sdk._core._checks import check_id, check_timeout, show
from sdk._core._retry import RetryPolicy
from sdk.errors import InvalidArgument
from sdk.model._stepspec import REPLAY_POLICIES, ReplayPolicy, StepSpec
from sdk.runtime._runtime import run_var, step_var

__all__ = ["step"]

F = TypeVar("F", bound=Callable[..., Any])


@overload
def step(fn: F, /) -> F: ...
@overload
def step(
    *, name: str | None = None, retry: RetryPolicy | None = None,
    replay: ReplayPolicy = "use_recorded_result", timeout: float | timedelta | None = None,
) -> Callable[[F], F]: ...  # fmt: skip


def step(
    fn: Any = None,
    /,
    *,
    name: str | None = None,
    retry: RetryPolicy | None = None,
    replay: ReplayPolicy = "use_recorded_result",
    timeout: float | timedelta | None = None,
) -> Any:
    """Make a function a journaled step of the flows that call it.

    Inside a run, each call gets the key ``"{name}#{n}"`` (n counts this run's
    calls of that name) when it is made; if the journal has a result for that
    key, the call returns it without running; otherwise it runs under its
    retry policy and its result is recorded with one write. Inside a run,
    await the call even when the function is synchronous.

    Outside a run a step is the plain function, and a step called inside
    another step is a plain call.

    Args:
        name: the name in step keys; default the function's ``__qualname__``.
            Must not start with ``~`` (reserved for built-ins).
        retry: `RetryPolicy`; default the flow's, and with neither the step runs once.
        replay: what a replayed or forked run does with this step's recorded result.
        timeout: seconds (or a `timedelta`) one attempt may run, measured on the
            worker's clock. A longer attempt is cancelled (its task gets
            `asyncio.CancelledError`) and recorded as a failed attempt with
            `sdk.errors.StepTimeout`, then retried under the retry policy like
            any failure. Only for ``async def`` steps: a synchronous function
            blocks the event loop and cannot be interrupted. Default: no limit.

    Example::

        @step(retry=RetryPolicy(max_attempts=5))
        async def charge(order_id: str, cents: int) -> str:
            key = current_step().idempotency_key
            return await payments.charge(order_id, cents, idempotency_key=key)
    """

    def decorate(fn: F) -> F:
        sname = check_id(name if name is not None else fn.__qualname__, "@step: name")
        if sname.startswith("~"):
            raise InvalidArgument(
                f"invalid step name {sname!r} for {fn.__qualname__}: "
                "a non-empty string that does not start with '~'"
            )
        if replay not in REPLAY_POLICIES:
            raise InvalidArgument(f"step {sname!r}: replay must be one of {REPLAY_POLICIES}")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidArgument(f"step {sname!r}: retry must be a RetryPolicy, got {show(retry)}")
        limit = None
        if timeout is not None:
            limit = check_timeout(timeout, f"@step {sname!r}: timeout")
            if not inspect.iscoroutinefunction(fn):
                raise InvalidArgument(
                    f"@step {sname!r}: timeout needs an async def step; a synchronous "
                    "function blocks the event loop and cannot be cancelled"
                )
        spec = StepSpec(sname, retry, replay, fn, limit)

        @wrapt.decorator
        def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            rt = run_var.get()
            if rt is None or step_var.get() is not None:
                return wrapped(*args, **kwargs)
            # `wrapped` is bound for a method step: it travels with this call.
            return rt.step_call(spec, wrapped, args, kwargs)

        decorated: Any = wrapper(fn)
        decorated.__steadyflow_step__ = spec
        return decorated  # type: ignore[no-any-return]

    if fn is not None:
        return decorate(fn)
    return decorate
