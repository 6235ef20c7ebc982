"""The decorators that register definitions: `@flow` and `@channel`.

Each checks its options when the module that uses it is imported, records a
definition (`FlowDef`, `ChannelDef`) and adds it to a `Registry` (the default
one unless given another).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar, overload

import wrapt

from sdk._core._checks import check_id, check_optional_id, check_timeout, show
from sdk._core._retry import RetryPolicy
from sdk.errors import InvalidArgument
from sdk.model._channels import DEFAULT_CHANNEL_RETRY, ChannelDef, Handler, check_name
from sdk.model._flowdef import RESERVED_OPTIONS, FlowDef
from sdk.model._flowdef import retention as checked_retention
from sdk.model._queues import Queue
from sdk.model._registry import Registry

__all__ = ["channel", "flow"]

P = ParamSpec("P")
R = TypeVar("R")
H = TypeVar("H", bound=Handler)


@overload
def flow(fn: Callable[P, Coroutine[Any, Any, R]], /) -> Callable[P, Coroutine[Any, Any, R]]: ...
@overload
def flow(
    *,
    name: str | None = None,
    version: str | None = None,
    retry: RetryPolicy | None = None,
    queue: str | Queue = "default",
    optional_checkpoints: bool = False,
    delete_on_success: bool = False,
    retention: float | timedelta | None = None,
    registry: Registry | None = None,
    on_event: str | None = None,
    timeout: float | timedelta | None = None,
) -> Callable[[Callable[P, Coroutine[Any, Any, R]]], Callable[P, Coroutine[Any, Any, R]]]: ...


def flow(
    fn: Any = None,
    /,
    *,
    name: str | None = None,
    version: str | None = None,
    retry: RetryPolicy | None = None,
    queue: str | Queue = "default",
    optional_checkpoints: bool = False,
    delete_on_success: bool = False,
    retention: float | timedelta | None = None,
    registry: Registry | None = None,
    on_event: str | None = None,
    timeout: float | timedelta | None = None,
) -> Any:
    """Declare a durable flow: an ``async def`` whose steps and waits are journaled.

    Args:
        name: registry name; default ``f"{module}.{qualname}"``.
        version: recorded on every run.
        retry: default `RetryPolicy` for the flow's steps (none: run once).
        queue: the queue its runs go to unless `Client.start` says otherwise: a
            name, or a `Queue` (its limits), registered with the flow.
        optional_checkpoints: also checkpoint (and log) when each step starts and
            when a retry is scheduled; costs one round trip per step.
        delete_on_success: delete a run's data as it completes (in the same
            script). Only a tombstone with its result stays for `RESULT_GRACE`
            seconds, so `RunHandle.result()` still returns; `Client.get` raises
            `RunNotFound` at once. Failed and canceled runs are kept.
        retention: keep completed and canceled runs this long (seconds or a
            `timedelta`) after they finish, then a worker deletes them. Default:
            kept until `Client.delete`. Failed runs are always kept.
        registry: where to register it (default: `Registry.default()`).
        timeout: seconds (or a `timedelta`) a run may take, counted from its
            start (when a worker first claims it; time queued before does not
            count). A run that has not ended by then fails with reason
            ``timed_out`` wherever it is (running a step, parked on a wait),
            fired durably by any worker's tick. Default: no limit.
        on_event: an event name: every `Client.send_event` of it starts one run
            of this flow with the event's data as its one argument, run id
            ``f"{name}:{event_id}"`` (so a repeated event id starts nothing).

    Raises:
        RegistryConflict: another function is registered under this name.

    Example::

        @flow
        async def greet(name: str) -> str:
            return await shout(name)

    Called directly (outside a worker) a flow is the plain function; start it
    with `Client.start` to make it durable.
    """

    def decorate(fn: Callable[..., Coroutine[Any, Any, Any]]) -> Any:
        if not inspect.iscoroutinefunction(fn):
            raise InvalidArgument(f"@flow needs an async def; {fn.__qualname__} is not one")
        fname = check_id(name or f"{fn.__module__}.{fn.__qualname__}", "@flow: name")
        qdef = queue if isinstance(queue, Queue) else None
        qname = qdef.name if qdef is not None else check_id(queue, f"flow {fname!r}: queue")
        check_optional_id(version, f"flow {fname!r}: version")
        sig = inspect.signature(fn)
        clash = RESERVED_OPTIONS.intersection(sig.parameters)
        if clash:
            raise InvalidArgument(
                f"flow {fname!r}: parameter name(s) {sorted(clash)} are reserved for "
                "Client.start / start_child options; rename them"
            )
        keep = checked_retention(fname, retention)
        limit = None if timeout is None else check_timeout(timeout, f"flow {fname!r}: timeout")
        check_optional_id(on_event, f"flow {fname!r}: on_event")
        if on_event is not None:
            try:
                sig.bind(None)
            except TypeError:
                raise InvalidArgument(
                    f"flow {fname!r}: with on_event it must take the event's data as its "
                    "one argument"
                ) from None
        fd = FlowDef(
            fname, fn, version, retry, qname, sig, optional_checkpoints,
            bool(delete_on_success), keep, on_event=on_event, timeout=limit, queue_def=qdef,
        )  # fmt: skip

        @wrapt.decorator
        def passthrough(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            return wrapped(*args, **kwargs)

        (registry or Registry.default()).add_flow(fd)
        wrapper: Any = passthrough(fn)
        # on the wrapper itself (wrapt keeps `_self_` attributes there; others it
        # sets on the function): one function decorated twice, e.g. under two
        # versions, gives two flows
        wrapper._self_steadyflow_flow = fd
        return wrapper

    if fn is not None:
        return decorate(fn)
    return decorate


def channel(
    name: str, *, retry: RetryPolicy | None = None, registry: Registry | None = None
) -> Callable[[H], H]:
    """Register the handler that delivers the intents of channel `name`.

    Workers of this process dispatch the channel's intents to it (see `Worker`):
    it is called with an `Intent` and should use ``intent.idempotency_key`` so
    a repeated delivery has no second effect. Returning means delivered; an
    exception is a failed delivery, retried under `retry` (default 10
    deliveries, 1 s doubling to 5 minutes); after the last one, or on one of
    its ``non_retryable`` types, the intent is ``dead``. The handler is
    registered in `registry` (default: `Registry.default()`); another function
    under the same channel name raises `RegistryConflict`.

    Example::

        @channel("email", retry=RetryPolicy(max_attempts=5))
        async def send_email(intent: Intent) -> None:
            await mailer.send(**intent.payload, idempotency_key=intent.idempotency_key)
    """
    check_name(name, "channel name")
    policy = retry if retry is not None else DEFAULT_CHANNEL_RETRY
    if not isinstance(policy, RetryPolicy):
        raise InvalidArgument(f"channel {name!r}: retry must be a RetryPolicy, got {show(retry)}")

    def register(fn: H) -> H:
        handler: Any = fn  # (iscoroutinefunction would narrow `fn` itself)
        if not inspect.iscoroutinefunction(handler):
            raise InvalidArgument(f"channel {name!r}: the handler must be an async function")
        cdef = ChannelDef(name, handler, policy)
        (registry or Registry.default()).add_channel(cdef)
        handler.__steadyflow_channel__ = cdef
        return fn

    return register
