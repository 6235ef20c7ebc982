"""The part of `Client` that reports on queues (`Client.queues`)."""

from __future__ import annotations

from sdk.client._clientbase import ClientBase
from sdk.model._queues import QueueInfo, claim_limits

__all__ = ["Queuing"]


class Queuing(ClientBase):
    """`queues`."""

    async def queues(self) -> list[QueueInfo]:
        """Every queue that has had runs, and every queue declared in the client's
        registry, by name: ready runs, executing runs, limits, the limit holding
        runs back now, and the age of the oldest ready run.

        Example::

            for q in await client.queues():
                print(q.name, q.pending, q.executing, q.limited_by)
        """
        declared = self.registry.queues()
        now = self.clock.time()
        stats = await self.store.queue_stats(
            sorted(declared), claim_limits(declared.values(), {}), now
        )
        return [
            QueueInfo(
                s.queue,
                s.pending,
                s.executing,
                declared.get(s.queue),
                s.limited_by,
                None if s.oldest_pending_at is None else max(now - s.oldest_pending_at, 0.0),
            )
            for s in stats
        ]
