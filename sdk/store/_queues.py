"""Queue limits at the store seam: what a claim is asked to respect, and what
`Store.queue_stats` reports.

The limits of a queue are the engine's (`sdk.Queue`); a store keeps only the
counts a claim checks them against, per partition: which runs execute (per
queue, and per concurrency key) and the rate limit's state. The caller passes
its limits with each claim (`QueueLimits`), so no configuration is stored and
none can go stale; two callers that declare different limits for one queue
each claim under their own (the counts are shared). The Redis store's side is
`stores._queuestore`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

__all__ = ["QueueLimits", "QueueReads", "QueueStats"]


@attrs.frozen
class QueueLimits:
    """One queue's limits, as a claim checks them (None: no such limit).

    `worker_room` is how many more runs of the queue the claiming worker may
    take (its ``worker_concurrency`` less what it executes); `rate_interval` is
    the rate limit's spacing in seconds (period / limit): one first activation
    per interval, at most.
    """

    queue: str
    concurrency: int | None = None
    worker_room: int | None = None
    key_concurrency: int | None = None
    rate_interval: float | None = None


@attrs.frozen
class QueueStats:
    """One queue, summed over the partitions: ready runs, executing runs, the
    oldest ready run's creation (or delayed start) time, and the limit that
    holds its ready runs back now (``"concurrency"``, ``"key"``, ``"rate"``)."""

    queue: str
    pending: int
    executing: int
    oldest_pending_at: float | None
    limited_by: str | None


class QueueReads(Protocol):
    """What the engine reads of queues (`Client.queues`)."""

    async def queue_stats(
        self, queues: Sequence[str], limits: Sequence[QueueLimits], now: float
    ) -> list[QueueStats]:
        """Each of `queues` and every queue that has had runs, by name: its
        figures, `limited_by` judged against `limits` at `now`. Reads only."""
        ...
