"""Wake-up waits and the live feed on Redis Cluster, over sharded Pub/Sub.

On one node a worker waits with one ``BLPOP`` on its wake-up lists. A cluster
refuses keys of several slots in one command, so that would be one blocking
connection per partition (two with the outbox). Instead the lists stay as they
are (a token per wake-up, taken by one waiter, so nothing is lost while nobody
waits) and each gets a doorbell: the scripts also ``SPUBLISH`` on a sharded
channel named like the list (same hash tag, same slot). A wait:

1. subscribes the channels of its lists (once per store: the subscription is
   kept; `stores._sharded`, one connection per master) and registers itself;
2. takes a token if one is there (which partitions have one: an ``EXISTS``
   per partition, pipelined, one round trip per node; then the ``take_wake``
   script on one of them): a wake-up left before it waited;
3. sleeps until a doorbell of its lists rings, then takes a token from that
   partition (another worker may have taken it: it sleeps again).

A token left after step 1 rings the bell, so none is missed between "nothing
to claim" and "waiting". After a node or a slot was lost and subscribed again
(messages may have been missed), every waiter goes back to step 2.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from redis.asyncio.cluster import RedisCluster

from stores._redispy import strict_args
from stores._sharded import ShardedSubscriber

__all__ = ["ShardedFeed", "ShardedWaits"]

#: Feed messages a follower may have unread before the reader stops reading
#: (then the node's output buffer fills, as with a slow Pub/Sub client on one node).
FEED_BUFFER = 10_000


class _Waiter:
    __slots__ = ("channels", "event", "everything", "rang")

    def __init__(self, channels: frozenset[str]) -> None:
        self.channels = channels
        self.event = asyncio.Event()
        self.rang: set[str] = set()
        self.everything = False

    def due(self, per_partition: Sequence[Sequence[str]]) -> list[Sequence[str]]:
        """The partitions whose doorbell rang since the last call (all after a gap)."""
        rang, everything = self.rang, self.everything
        self.rang, self.everything = set(), False
        self.event.clear()
        if everything:
            return list(per_partition)
        return [keys for keys in per_partition if rang.intersection(keys)]


class ShardedWaits:
    """Waits for wake-up tokens on a Redis Cluster (see the module docstring)."""

    def __init__(
        self, cluster: RedisCluster, take: Callable[[Sequence[str]], Awaitable[Any]]
    ) -> None:
        self._cluster = cluster
        self._take = take  # the `take_wake` script on one partition's lists: 1 or 0
        self._waiters: set[_Waiter] = set()
        self._subscriber = ShardedSubscriber(cluster, self._rang, self._gap)

    @property
    def connections(self) -> int:
        """How many node connections the doorbells hold."""
        return self._subscriber.connections

    async def wait(self, per_partition: Sequence[Sequence[str]], timeout: float) -> bool:
        """Take a token from any partition's lists, waiting up to `timeout` seconds
        for one; False when none came. Each element of `per_partition` lists one
        partition's lists in the order to take from (what one BLPOP would get)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout, 0.0)
        waiter = _Waiter(frozenset(k for keys in per_partition for k in keys))
        await self._subscriber.subscribe(waiter.channels)
        self._waiters.add(waiter)
        try:
            due: list[Sequence[str]] = list(per_partition)
            while True:
                if due and await self._take_any(due):
                    return True
                left = deadline - loop.time()
                if left <= 0:
                    return False
                try:
                    async with asyncio.timeout(left):
                        await waiter.event.wait()
                except TimeoutError:
                    return False
                due = waiter.due(per_partition)
        finally:
            self._waiters.discard(waiter)

    async def close(self) -> None:
        await self._subscriber.close()

    async def _take_any(self, per_partition: Sequence[Sequence[str]]) -> bool:
        """Take one token (as one BLPOP would: never more, or a waiter that
        took several could leave another asleep with runs ready)."""
        candidates = list(per_partition)
        if len(candidates) > 1:
            # Which partitions have one: an EXISTS per partition (a command may
            # not span slots), pipelined: one round trip per node.
            pipe: Any = self._cluster.pipeline()
            for keys in candidates:
                pipe.execute_command("EXISTS", *strict_args(keys))
            found = await pipe.execute(raise_on_error=False)
            # an error (a slot moving, a node lost): the take below tells
            candidates = [k for k, n in zip(candidates, found, strict=True) if n != 0]
        for keys in candidates:
            if await self._take(keys) == 1:
                return True
        return False  # none, or other waiters took them first

    async def _rang(self, channel: str, _data: str) -> None:
        for waiter in self._waiters:
            if channel in waiter.channels:
                waiter.rang.add(channel)
                waiter.event.set()

    def _gap(self) -> None:
        for waiter in self._waiters:
            waiter.everything = True
            waiter.event.set()


class ShardedFeed:
    """A live-feed subscription on a Redis Cluster: every partition's feed channel,
    over one connection per master. Messages published while a node was being
    re-subscribed are missed, as the feed promises (live only)."""

    def __init__(self, cluster: RedisCluster) -> None:
        self._queue: asyncio.Queue[str] = asyncio.Queue(FEED_BUFFER)
        self._subscriber = ShardedSubscriber(cluster, self._received)

    @classmethod
    async def open(cls, cluster: RedisCluster, channels: Sequence[str]) -> ShardedFeed:
        feed = cls(cluster)
        try:
            await feed._subscriber.subscribe(channels)
        except BaseException:
            await feed.close()
            raise
        return feed

    @property
    def connections(self) -> int:
        return self._subscriber.connections

    async def get(self, timeout: float, count: int) -> list[str]:
        """Up to `count` messages, waiting up to `timeout` seconds for the first."""
        out: list[str] = []
        try:
            async with asyncio.timeout(max(timeout, 0.0)):
                out.append(await self._queue.get())
        except TimeoutError:
            return out
        while len(out) < count and not self._queue.empty():
            out.append(self._queue.get_nowait())
        return out

    async def close(self) -> None:
        await self._subscriber.close()

    async def _received(self, _channel: str, data: str) -> None:
        await self._queue.put(data)
