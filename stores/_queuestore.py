"""The Redis store's queue limits: the claim arguments that carry them, and
`queue_stats` (stores/lua/queues.lua). The claim scripts enforce the limits
(``head`` and ``take`` in stores/lua/_prelude.lua); ``vacate`` gives a slot back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from sdk.store._queues import QueueLimits, QueueStats
from stores._codec import num
from stores._storecore import StoreCore

__all__ = ["Queues", "limits_args"]


def _opt(value: float | None) -> str:
    if value is None:
        return ""
    return str(value) if isinstance(value, int) else num(value)


def limits_args(limits: Sequence[QueueLimits]) -> list[str]:
    """Script arguments: the count, then name, concurrency, worker room, key
    concurrency, rate interval of each ('' for none)."""
    out = [str(len(limits))]
    for q in limits:
        out += [q.queue, _opt(q.concurrency), _opt(q.worker_room), _opt(q.key_concurrency),
                _opt(q.rate_interval)]  # fmt: skip
    return out


class Queues:
    """`queue_stats`."""

    def __init__(self, core: StoreCore) -> None:
        self._core = core
        self._keys = core.keys

    async def queue_stats(
        self, queues: Sequence[str], limits: Sequence[QueueLimits], now: float
    ) -> list[QueueStats]:
        found: dict[str, QueueStats] = {}
        replies = await asyncio.gather(*(  # the partitions at once
            self._core.call(
                "queues", [self._core.anchor(p)],
                [self._keys.base(p), num(now), *limits_args(limits), "0", *queues],
            )
            for p in self._core.partitions()
        ))  # fmt: skip
        for reply in replies:
            if reply and reply[0] == "err":
                raise ValueError(f"the store refused an argument: {reply[2]}")
            for name, pending, executing, oldest, why in reply:
                seen = found.get(name)
                at = float(oldest) if oldest != "" else None
                if seen is not None:
                    ats = [t for t in (at, seen.oldest_pending_at) if t is not None]
                    pending, executing = pending + seen.pending, executing + seen.executing
                    at, why = min(ats, default=None), seen.limited_by or why
                found[name] = QueueStats(name, int(pending), int(executing), at, why or None)
        return [found[name] for name in sorted(found)]
