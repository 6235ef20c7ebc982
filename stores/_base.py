"""What every part of the Redis store shares: its clients, key names and script calls."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError

from stores._keys import Keys
from stores._records import CorruptData
from stores._redispy import ScriptRunner

__all__ = ["RedisBase"]


class RedisBase:
    """The state and helpers of `stores.redis.RedisStore`, for its parts (mixins)."""

    client: aioredis.Redis
    blocking_client: aioredis.Redis
    keys: Keys
    _scripts: dict[str, Any]
    _runner: ScriptRunner

    async def _call(self, name: str, keys: Sequence[str | bytes], args: Sequence[Any]) -> Any:
        return await self._runner.run(self._scripts[name], keys, args)

    def _partitions(self) -> range:
        return range(self.keys.partitions)

    def _anchor(self, partition: int) -> str:
        # Scripts that work on a whole partition name one of its keys, so a
        # Redis Cluster client routes them to the node owning that hash tag.
        return self.keys.all_runs(partition)

    async def _blpop_any(self, per_partition: list[list[str]], timeout: float) -> bool:
        """BLPOP until any of the lists has an element (or `timeout` seconds)."""
        secs = max(timeout, 0.001)  # BLPOP's timeout is in seconds (0 blocks forever)
        if len(per_partition) == 1 or not isinstance(self.blocking_client, RedisCluster):
            # One BLPOP on every list. (Several, raced and the losers cancelled,
            # would leave a cancelled BLPOP blocking its connection server-side:
            # the next command on that connection waits behind it, and the
            # losers may pop tokens nobody reads.)
            keys = [key for keys in per_partition for key in keys]
            return await self.blocking_client.blpop(keys, timeout=secs) is not None
        # One BLPOP per partition: a cluster refuses keys of several slots in one.
        waits = [
            asyncio.ensure_future(self.blocking_client.blpop(keys, timeout=secs))
            for keys in per_partition
        ]
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            return any(t.result() is not None for t in done)
        finally:
            for t in waits:
                t.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    async def _unreadable(
        self, run_id: str, key: str, error: ResponseError, want: str
    ) -> Exception:
        """The error to raise for a read that Redis refused: `CorruptData` for a key
        of another type than `want` (WRONGTYPE), else `error` itself."""
        if not str(error).startswith("WRONGTYPE"):
            return error
        kind: Any = await self.client.type(key)
        return CorruptData(run_id, key, f"holds a {kind}, not a {want}")
