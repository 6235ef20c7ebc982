"""The deployment's audit log: what a store keeps of actions that have no run log
to live in, or that outlive the run they acted on.

Part of the store protocol (`sdk.store._protocol.Store` includes `AuditStore`).
A run's own event log records what was done to it; it goes when the run is
deleted. The audit log holds what must stay: a run's deletion (written by the
same atomic step that deletes it), the operations on schedules, and the
refusals of calls that have no run to log them in (a refused start, a refused
schedule operation). It is two logs, so that refusals, which any caller can
provoke, never push changes out of theirs:

- `AuditLog.CHANGES`: ``run.deleted``, ``schedule.created``,
  ``schedule.replaced``, ``schedule.paused``, ``schedule.resumed``,
  ``schedule.deleted``, ``schedule.triggered``;
- `AuditLog.REFUSALS`: ``auth.denied`` of a start or a schedule operation.

Each log keeps at least its newest `MAX_AUDIT_ENTRIES` entries per partition of
the store (older ones are trimmed); a store with several partitions keeps one
log of each kind per partition and merges them when read.
"""

from __future__ import annotations

import enum
from typing import Protocol

import attrs

from sdk.store._statuses import EventType

__all__ = ["MAX_AUDIT_ENTRIES", "AuditLog", "AuditStore", "StoredAuditEntry"]

#: Entries each audit log keeps at least, per partition (then the oldest are trimmed).
MAX_AUDIT_ENTRIES = 100_000


class AuditLog(enum.Enum):
    """Which of the deployment's two audit logs."""

    CHANGES = "changes"  # deletions of runs, schedule operations
    REFUSALS = "refusals"  # auth.denied of calls that have no run: starts, schedule operations


@attrs.frozen
class StoredAuditEntry:
    """One entry of an audit log, with its stable cursor (`entry_id`)."""

    entry_id: str
    type: str  # an EventType value, or a newer one
    at: float
    run_id: str | None = None
    schedule_id: str | None = None
    data: str | None = None  # JSON: who, and what


class AuditStore(Protocol):
    """The deployment's audit logs (see the module). Entries are also written by
    `Store.delete` (``run.deleted``, always) and by `save_schedule` and
    `schedule_op` when they are given ``audit_data``, in the same atomic step
    as the change."""

    async def append_audit(
        self,
        log: AuditLog,
        event_type: EventType,
        now: float,
        data: str,
        *,
        run_id: str | None = None,
        schedule_id: str | None = None,
    ) -> None:
        """Append an entry to `log` (in the partition of `run_id` when given);
        repeated, a second entry."""
        ...

    async def audit_log(
        self, log: AuditLog, cursor: str | None, limit: int
    ) -> list[StoredAuditEntry]:
        """A page of `log` after `cursor` (an `entry_id`, exclusive), oldest first,
        over every partition. Several round trips (one per partition, at once)."""
        ...
