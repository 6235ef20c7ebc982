"""The part of `Client` that reports on queues (`Client.queues`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sdk.model._queues import QueueInfo, claim_limits

if TYPE_CHECKING:
    from sdk.client._clientcore import ClientCore

__all__ = ["QueueReport"]


class QueueReport:
    """`Client.queues`: the store's queue figures, with the client's declared queues."""

    __slots__ = ("_core",)

    def __init__(self, core: ClientCore) -> None:
        self._core = core

    async def queues(self) -> list[QueueInfo]:
        core = self._core
        declared = core.registry.queues()
        now = core.clock.time()
        stats = await core.store.queue_stats(
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
