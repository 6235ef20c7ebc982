"""The `@step` decorator, and the options it records (`StepSpec`)."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal, TypeVar, overload

import attrs
import wrapt

from sdk._checks import check_id, check_timeout
from sdk._context import _run_var, _step_var
from sdk._hashing import positional_hasher
from sdk._retry import RetryPolicy
from sdk._serde import return_type
from sdk._values import Serializer
from sdk.errors import InvalidArgument

__all__ = ["REPLAY_POLICIES", "StepSpec", "step"]

F = TypeVar("F", bound=Callable[..., Any])

ReplayPolicy = Literal["use_recorded_result", "require_human", "reexecute"]
REPLAY_POLICIES = ("use_recorded_result", "require_human", "reexecute")


@attrs.define
class StepSpec:
    """A decorated step's options (and caches of what is derived from its function)."""

    name: str
    retry: RetryPolicy | None
    replay: str
    fn: Callable[..., Any]
    timeout: float | None = None  # seconds an attempt may run before it is cancelled
    _rtype: Any = None
    _rtype_done: bool = False
    _sigs: dict[bool, inspect.Signature] = attrs.field(factory=dict)
    _plain: dict[bool, tuple[str, ...] | None] = attrs.field(factory=dict)
    # (method, number of positional arguments) -> their hasher (`positional_hasher`)
    _hashers: dict[tuple[bool, int], Callable[[tuple[Any, ...]], str | None]] = attrs.field(
        factory=dict
    )

    def request_hash(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        serializer: Serializer,
    ) -> str:
        """The ledger's hash of a call, by parameter name (a bound method: without self)."""
        method = isinstance(fn, types.MethodType)
        sig = self._sigs.get(method)
        if sig is None:
            sig = self._sigs[method] = inspect.signature(fn)
            simple = all(p.kind is p.POSITIONAL_OR_KEYWORD for p in sig.parameters.values())
            self._plain[method] = tuple(sig.parameters) if simple else None
        names = self._plain[method]
        if names is not None and not kwargs and len(args) <= len(names):
            if type(serializer).request_hash is _STOCK_HASH:  # not overridden
                hasher = self._hashers.get((method, len(args)))
                if hasher is None:
                    hasher = positional_hasher(names[: len(args)])
                    self._hashers[method, len(args)] = hasher
                rh = hasher(args)
                if rh is not None:  # plain scalars: the same hash, sooner
                    return rh
            # what Signature.bind gives for positional calls, without its cost
            return serializer.request_hash(args, kwargs, dict(zip(names, args, strict=False)))
        try:
            named: dict[str, Any] | None = dict(sig.bind(*args, **kwargs).arguments)
        except TypeError:  # the call itself will fail; hash what was passed
            named = None
        return serializer.request_hash(args, kwargs, named)

    def return_type(self) -> Any:
        if not self._rtype_done:
            self._rtype = return_type(self.fn)
            self._rtype_done = True
        return self._rtype


_STOCK_HASH = Serializer.request_hash


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
            act = _run_var.get()
            if act is None or _step_var.get() is not None:
                return wrapped(*args, **kwargs)
            # `wrapped` is bound for a method step: it travels with this call.
            return act.step_call(spec, wrapped, args, kwargs)

        decorated: Any = wrapper(fn)
        decorated.__steadyflow_step__ = spec
        return decorated  # type: ignore[no-any-return]

    if fn is not None:
        return decorate(fn)
    return decorate
