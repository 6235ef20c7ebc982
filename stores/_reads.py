"""The Redis store's reads of a run's history, and its blocking waits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio.client import PubSub

from stores import _codec
from stores._base import RedisBase
from stores._keys import SUFFIX
from stores.protocol import Lineage, StoredCheckpoint, StoredEvent

__all__ = ["Reads"]


class Reads(RedisBase):
    """Lineage, events, checkpoints, the live feed; wake-up and finish waits."""

    async def read_lineage(self, run_id: str) -> Lineage | None:
        k = self.keys
        base = k.base_of(run_id)
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(k.run(run_id))
            pipe.hgetall(k.journal(run_id))
            pipe.hgetall(base + SUFFIX["jseq"] + run_id)
            pipe.hgetall(base + SUFFIX["lineage"] + run_id)
            pipe.xrange(k.checkpoints(run_id), "-", "+")
            h, journal, jseq, lineage, cps = await pipe.execute()
        if not h:
            return None
        return Lineage(
            _codec.stored_run(run_id, h), journal, _codec.written(jseq), lineage,
            _codec.checkpoints(cps, jseq),
        )  # fmt: skip

    async def events(self, run_id: str, cursor: str | None, limit: int) -> list[StoredEvent]:
        start = "-" if cursor is None else f"({cursor}"
        entries: Any = await self.client.xrange(self.keys.events(run_id), start, "+", count=limit)
        return [_codec.stored_event(str(eid), run_id, fields) for eid, fields in entries]

    async def checkpoints(self, run_id: str) -> list[StoredCheckpoint]:
        # Run-level checkpoints are stream entries; a step_completed checkpoint
        # lives in its step's js: entry ("seq:id:at", see the Lua `journaled`).
        k = self.keys
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.xrange(k.checkpoints(run_id), "-", "+")
            pipe.hgetall(k.base_of(run_id) + SUFFIX["jseq"] + run_id)
            entries, marks = await pipe.execute()
        return _codec.checkpoints(entries, marks)

    async def correlation(self, run_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        """Trace and tenant ids of runs (for feed followers); unknown runs are left out."""
        async with self.client.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hmget(self.keys.run(run_id), ["trace_id", "tenant_id"])
            rows = await pipe.execute()
        return {
            run_id: (trace or run_id, tenant or None)
            for run_id, (trace, tenant) in zip(run_ids, rows, strict=True)
            if trace is not None or tenant is not None
        }

    async def follow(
        self, subscription: Any, timeout: float, count: int
    ) -> tuple[list[StoredEvent], Any]:
        if subscription is None:
            subscription = self.blocking_client.pubsub()
            await subscription.subscribe(*(self.keys.feed(p) for p in self._partitions()))
        out: list[StoredEvent] = []
        msg = await subscription.get_message(ignore_subscribe_messages=True, timeout=timeout)
        while msg is not None:
            out.append(_codec.feed_event(msg["data"]))
            if len(out) >= count:
                break
            msg = await subscription.get_message(ignore_subscribe_messages=True, timeout=0.0)
        return out, subscription

    async def unfollow(self, subscription: Any) -> None:
        if isinstance(subscription, PubSub):
            await subscription.aclose()  # type: ignore[no-untyped-call]

    # -- blocking waits --------------------------------------------------------

    async def wait_ready(self, queues: Sequence[str] | None, timeout: float) -> bool:
        names = list(queues) if queues else [None]
        return await self._blpop_any(
            [[self.keys.wake(p, q) for q in names] for p in self._partitions()], timeout
        )

    async def wait_finished(self, run_id: str, timeout: float) -> bool:
        # Rotating the one-element list onto itself reads it without taking it,
        # so every waiter wakes. Returns at once if the run already finished.
        key = self.keys.done(run_id)
        reply = await self.blocking_client.brpoplpush(key, key, max(timeout, 0.001))
        return reply is not None
