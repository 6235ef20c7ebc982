"""The outbox's definitions: channels, and the intents their handlers deliver.

A step calls `emit(channel, payload)`; the intent is kept with the attempt and
written by the same script as the step's result, so it exists exactly when
the step is recorded (a failed or crashed attempt's intents are dropped; a
replayed step does not emit again). A worker's dispatcher then delivers it to
the handler registered with `channel`, at least once, always with the same
idempotency key.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import attrs

from sdk._core._checks import check_id
from sdk._core._retry import RetryPolicy
from sdk._core._types import ErrorInfo
from sdk.store import NewIntent

__all__ = [
    "DEFAULT_CHANNEL_RETRY",
    "ChannelDef",
    "Handler",
    "Intent",
    "IntentStatus",
    "NewIntent",
    "check_name",
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


@attrs.frozen
class ChannelDef:
    """A registered channel: its handler and retry policy."""

    name: str
    handler: Handler
    retry: RetryPolicy


def check_name(value: Any, what: str) -> str:
    return check_id(value, what)
