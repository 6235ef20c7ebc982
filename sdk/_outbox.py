"""The outbox: durable outbound intents, written with the step that emits them.

A step calls `emit(channel, payload)`; the intent is kept with the attempt and
written by the same script as the step's result, so it exists exactly when
the step is recorded (a failed or crashed attempt's intents are dropped; a
replayed step does not emit again). A worker's dispatcher then delivers it to
the handler registered with `channel`, at least once, always with the same
idempotency key.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import attrs

from sdk._checks import check_id
from sdk._context import _OUTSIDE, _run_var, _step_var
from sdk._registry import Registry
from sdk._retry import RetryPolicy
from sdk._serde import dumps
from sdk._types import ErrorInfo
from sdk.errors import InvalidArgument, NotInRunError
from stores.protocol import NewIntent

__all__ = [
    "DEFAULT_CHANNEL_RETRY",
    "ChannelDef",
    "Intent",
    "IntentStatus",
    "NewIntent",
    "channel",
    "emit",
]


#: Retries of a channel without its own policy: 10 deliveries, 1 s doubling to 5 min.
DEFAULT_CHANNEL_RETRY = RetryPolicy(max_attempts=10, initial_interval=1.0, max_interval=300.0)


class IntentStatus(enum.StrEnum):
    """Where an outbound intent is; equal to its string value."""

    PENDING = "pending"
    """Recorded, not delivered yet (due, in delivery, or waiting for a retry)."""
    SENT = "sent"
    """Its handler returned."""
    DEAD = "dead"
    """Its handler failed `max_attempts` times (or raised a non-retryable error)."""
    CANCELED = "canceled"
    """Its run was canceled before it was delivered."""

    def __str__(self) -> str:
        return self.value


@attrs.frozen
class Intent:
    """An outbound message a step emitted (see `emit`), as a handler or `Client.intents` sees it.

    Attributes:
        intent_id: the intent's id (unique within its run's partition).
        run_id: the run whose step emitted it.
        channel: the channel whose handler delivers it.
        payload: the payload, in its JSON form (dicts, lists, strings, numbers).
        idempotency_key: the same on every delivery: pass it to the receiving
            side so a repeated delivery has no second effect.
        attempt: the number of this delivery (1 for the first; a delivery cut
            off by a crash counts too); for `Client.intents`, deliveries so far.
        created_at: when the step emitted it.
        step_key: the step that emitted it.
        status: an `IntentStatus` (a handler always sees ``pending``).
        failures: failed deliveries so far.
        last_error: the last failure, if any (reason ``retries_exhausted`` or
            ``non_retryable`` once dead).
        updated_at: when its status or failure count last changed.
        next_attempt_at: when a pending intent is due (or its delivery lease ends).
    """

    intent_id: str
    run_id: str
    channel: str
    payload: Any
    idempotency_key: str
    attempt: int
    created_at: datetime
    step_key: str = ""
    status: IntentStatus = IntentStatus.PENDING
    failures: int = 0
    last_error: ErrorInfo | None = None
    updated_at: datetime | None = None
    next_attempt_at: datetime | None = None


Handler = Callable[[Intent], Awaitable[None]]
H = TypeVar("H", bound=Handler)


@attrs.frozen
class ChannelDef:
    """A registered channel: its handler and retry policy."""

    name: str
    handler: Handler
    retry: RetryPolicy


def _check_name(value: Any, what: str) -> str:
    return check_id(value, what)


def emit(channel: str, payload: Any = None, *, key: str | None = None) -> str:
    """Record an outbound intent (an email to send, a webhook to call) in the current step.

    The intent is stored atomically with the step's result: if the step
    attempt fails or its worker dies before recording, the intent is dropped
    with it (the re-executed step emits again); a step replayed from the
    journal does not emit at all. A worker with a handler for `channel` (see
    `channel`) then delivers it at least once, with the same idempotency key
    on every delivery.

    Args:
        channel: the handler's channel name.
        payload: any JSON-able value (the handler gets its JSON form).
        key: a name for the intent's idempotency key,
            ``f"{root run id}:{key}"``; default ``f"{step idempotency key}:{n}"``
            (n counts this step's emits from 1).

    Returns:
        The intent's idempotency key.

    Raises:
        NotInRunError: outside a step of a run.
        SerializationError: the payload is not JSON-able.

    Example::

        @step
        async def confirm(order_id: str, email: str) -> None:
            emit("email", {"to": email, "template": "confirmed", "order": order_id})
    """
    ctx = _step_var.get()
    act = _run_var.get()
    if ctx is None or act is None:
        raise NotInRunError(_OUTSIDE.format(what="emit() (inside a @step)"))
    _check_name(channel, "emit: channel")
    buffer = ctx._intents
    if key is None:
        idem = f"{ctx.idempotency_key}:{len(buffer) + 1}"
    else:
        _check_name(key, "emit: key")
        root = ctx.idempotency_key.removesuffix(f":{ctx.key}")
        idem = f"{root}:{key}"
        if any(i.idempotency_key == idem for i in buffer):
            raise InvalidArgument(f"emit: key {key!r} was already used in step {ctx.key!r}")
    data, _ = act.serializer.encode(payload, None, f"payload of intent {idem!r}")
    body = dumps(
        {
            "run_id": ctx.run_id, "step_key": ctx.key, "channel": channel, "payload": data,
            "idempotency_key": idem, "created_at": act.clock.time(),
        }
    )  # fmt: skip
    hooked = bool(act.engine.interceptors)
    if hooked:  # a test kit may crash here: the intent is dropped
        act.call_hooks(f"~emit:{idem}", "emit", finished=False)
    buffer.append(NewIntent(channel, idem, body))
    if hooked:
        act.call_hooks(f"~emit:{idem}", "emit", finished=True)
    return idem


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
    _check_name(name, "channel name")
    policy = retry if retry is not None else DEFAULT_CHANNEL_RETRY
    if not isinstance(policy, RetryPolicy):
        raise InvalidArgument(f"channel {name!r}: retry must be a RetryPolicy, got {retry!r}")

    def register(fn: H) -> H:
        handler: Any = fn  # (iscoroutinefunction would narrow `fn` itself)
        if not inspect.iscoroutinefunction(handler):
            raise InvalidArgument(f"channel {name!r}: the handler must be an async function")
        cdef = ChannelDef(name, handler, policy)
        (registry or Registry.default()).add_channel(cdef)
        handler.__steadyflow_channel__ = cdef
        return fn

    return register
