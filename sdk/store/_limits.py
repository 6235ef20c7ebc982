"""What a store bounds per run, so that no caller can grow one run without limit
or push the run's audit events out of its log.

Part of the store protocol (`Store.limits`). Two concerns, one record:

- **The audit trail.** A run's event log keeps about its `max_events_per_run`
  newest events; older ones are trimmed. The audit events among them
  (`AUDIT_EVENTS`: who changed the run, and every refusal) are kept in the
  run's *audit trail* before they go, which no trim touches, and reads of the
  log (`Store.events`) give them back in their place. A caller who may only
  signal cannot erase a record by flooding the run. The trail keeps every
  change; refusals (``auth.denied``, which any caller can provoke) only while
  it holds fewer than `max_refusals_per_run` entries (the first ones stay).
- **Mailboxes.** A message (a signal, a decision, a delivered event) is at
  most `max_message_bytes` of JSON, and a run holds at most
  `max_pending_messages` messages not yet taken by its flow, of at most
  `max_pending_bytes` together. The script that stores a message checks them
  in the same atomic step (`Refusal.TOO_LARGE`, `Refusal.FULL`). A decision
  (approve/deny) needs the run to wait for it, so it never piles up: only its
  size is bounded. A child's outcome, which the engine delivers to its
  parent's mailbox, is not bounded: a parent must always learn how its child
  ended.
"""

from __future__ import annotations

from typing import Any

import attrs

from sdk.store._statuses import EventType

__all__ = ["AUDIT_EVENTS", "StoreLimits", "is_audit_event"]

#: The event types of a run's log that are audit events (kept in its trail), with
#: ``signal.received`` of a decision (approve/deny: its data has ``"decision"``).
AUDIT_EVENTS: frozenset[EventType] = frozenset({
    EventType.AUTH_DENIED,
    EventType.RUN_CREATED,
    EventType.RUN_CANCEL_REQUESTED,
    EventType.RUN_CANCELED,
    EventType.RUN_RESUMED,
    EventType.RUN_REPLAYED,
    EventType.RUN_FORKED,
})  # fmt: skip


def is_audit_event(event_type: str, data: str | None) -> bool:
    """Whether an event of the log is an audit event (see `AUDIT_EVENTS`)."""
    if event_type == EventType.SIGNAL_RECEIVED:
        # JSON escapes a quote inside a string: only the key itself can match
        return data is not None and '"decision":' in data
    return event_type in AUDIT_EVENTS


def _at_least(low: int) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[int], value: int) -> None:
        if type(value) is not int or value < low:
            raise ValueError(f"{attribute.name} must be an int of at least {low}, got {value!r}")

    return check


@attrs.frozen
class StoreLimits:
    """The bounds a store holds each run to (see the module). A store takes them as
    options (`stores.open_store(url, max_pending_messages=...)`); every process of
    a deployment should use the same.

    Attributes:
        max_events_per_run: a run's event log keeps about this many newest events
            (at least 100).
        max_refusals_per_run: refusals (``auth.denied``) trimmed out of the log are
            kept in the run's audit trail while it holds fewer entries than this;
            changes always are.
        max_message_bytes: the largest message a caller may leave in a mailbox, in
            bytes of its stored JSON (a signal's payload, a decision with its
            actor and reason, an event's data).
        max_pending_messages: messages a run may hold that its flow has not taken yet.
        max_pending_bytes: their bytes together.
    """

    max_events_per_run: int = attrs.field(default=10_000, validator=_at_least(100))
    max_refusals_per_run: int = attrs.field(default=1_000, validator=_at_least(1))
    max_message_bytes: int = attrs.field(default=2 * 1024 * 1024, validator=_at_least(64))
    max_pending_messages: int = attrs.field(default=1_000, validator=_at_least(1))
    max_pending_bytes: int = attrs.field(default=16 * 1024 * 1024, validator=_at_least(64))
