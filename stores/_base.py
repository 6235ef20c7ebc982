"""What every part of the Redis store shares: its clients, key names and script calls."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from sdk.store._records import CorruptData, PartitionsMismatch
from stores import _decode
from stores._keys import Keys
from stores._redispy import ScriptRunner
from stores._wakeups import ShardedWaits

__all__ = ["RedisBase"]


def block_seconds(timeout: float) -> float:
    """`timeout` as a blocking command's timeout (BLPOP, BRPOPLPUSH): at least 1 ms,
    whole milliseconds plus half of one. Redis counts it in whole milliseconds,
    and 0 blocks forever: Redis 6.2 truncates 0.001 s to 0 ms (binary floating
    point falls just short) and would never return; the extra half millisecond
    keeps every value off that edge."""
    return math.ceil(max(timeout, 0.001) * 1000) / 1000 + 0.0005


class RedisBase:
    """The state and helpers of `stores.redis.RedisStore`, for its parts (mixins)."""

    client: aioredis.Redis
    blocking_client: aioredis.Redis
    keys: Keys
    _scripts: dict[str, Any]
    _runner: ScriptRunner
    #: Whether `client` is a Redis Cluster client (see `stores.redis.RedisStore`).
    cluster: bool
    #: Cluster wake-up waits, made by the first wait (see `_blpop_any`).
    _waits: ShardedWaits | None = None
    #: The deployment's partition count was found to be this store's (`_layout`).
    _layout_ok: bool = False
    #: This store's blocking waits (`_blpop_until`): an id, and how many it made.
    _bell_id: str = ""
    _bells: int = 0

    async def _call(self, name: str, keys: Sequence[str | bytes], args: Sequence[Any]) -> Any:
        if not self._layout_ok:
            await self._layout()
        return await self._runner.run(self._scripts[name], keys, args)

    async def _layout(self) -> None:
        """Before this store's first script call (and until one succeeds): check that
        the deployment under its prefix uses its partition count, recording it if
        no process has yet. One round trip per store; calls made together before
        it is known each ask (the answer is the same). Raises `PartitionsMismatch`
        (nothing is written) when the counts differ."""
        keys = self.keys
        reply = _decode.corrupt(
            "", await self._runner.run(
                self._scripts["layout"], [keys.layout()], ["", str(keys.partitions)]
            )
        )  # fmt: skip
        self._found(reply.decode() if isinstance(reply, bytes) else str(reply))

    async def _read_layout(self) -> None:
        """Before this store's first read: the partition count recorded under its
        prefix, if one is, must be this store's. Reads make no script call (a
        read-only user may run none), and one with another count would look in
        the wrong partitions: "no such run", an empty list. One ``HMGET`` (the
        read-only ACL user has it), once; until a count is recorded (by a first
        script call, never by a read) each read asks. Raises `PartitionsMismatch`,
        or `CorruptData` naming the key if it is not a hash."""
        key = self.keys.layout()
        try:
            found: Any = await self.client.hmget(key, ["partitions"])
        except ResponseError as error:
            raise await self._unreadable("", key, error, "hash") from None
        if found[0] is not None:
            self._found(str(found[0]))

    def _found(self, recorded: str) -> None:
        """The recorded partition count is `recorded`: this store's, or `PartitionsMismatch`."""
        if recorded != str(self.keys.partitions):
            raise PartitionsMismatch(self.keys.prefix, recorded, self.keys.partitions)
        self._layout_ok = True

    def _partitions(self) -> range:
        return range(self.keys.partitions)

    def _anchor(self, partition: int) -> str:
        # Scripts that work on a whole partition name one of its keys, so a
        # Redis Cluster client routes them to the node owning that hash tag.
        return self.keys.all_runs(partition)

    async def _blpop_any(self, per_partition: list[list[str]], timeout: float) -> bool:
        """Take a wake-up token from any of the lists, waiting up to `timeout` seconds
        for one; False when none came."""
        if self.cluster:
            # A cluster refuses keys of several slots in one BLPOP: one per
            # partition would hold one connection each. Sharded Pub/Sub instead,
            # one connection per master, kept for the store's life (stores._wakeups).
            if self._waits is None:
                self._waits = ShardedWaits(
                    self.client,  # type: ignore[arg-type]  # a cluster client (self.cluster)
                    lambda keys: self._call("take_wake", keys, []),
                )
            return await self._waits.wait(per_partition, timeout)
        # One BLPOP on every list. (Several, raced and the losers cancelled,
        # would leave a cancelled BLPOP blocking its connection server-side: the
        # next command on that connection waits behind it, and the losers may
        # pop tokens nobody reads.)
        return await self._blpop_until([key for keys in per_partition for key in keys], timeout)

    async def _blpop_until(self, keys: list[str], timeout: float) -> bool:
        """BLPOP on `keys`, ended by this process at `timeout` rather than by Redis.

        Redis ends a blocking command's timeout at its next cron tick: with the
        default ``hz 10``, up to 100 ms late, so every timer a worker waits for
        (a sleep, a retry's backoff, a timeout, an outbox retry) would fire that
        late. The BLPOP also watches a list of its own (`Keys.bell`), and at
        `timeout` this process pushes a token onto it, which ends the BLPOP at
        once: one more round trip per wait that times out, none otherwise.
        Redis's own timeout stays as a backstop, a second later. A token that
        came on another list meanwhile wins, and the bell's is deleted."""
        self._bells += 1
        bell = self.keys.bell(f"{self._bell_id}.{self._bells}")
        pop = asyncio.ensure_future(
            self.blocking_client.blpop([*keys, bell], timeout=block_seconds(timeout + 1.0))
        )
        rang = rung = False  # the bell was rung; its token was what the BLPOP took
        reply = None
        try:
            done, _ = await asyncio.wait({pop}, timeout=max(timeout, 0.0))
            if not done:
                rang = True
                await self.client.lpush(bell, "1")
            reply = await pop
            rung = reply is not None and reply[0] in (bell, bell.encode())
        finally:
            if not pop.done():
                pop.cancel()  # (redis-py closes a connection whose reply is not read)
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await pop
            if rang and not rung:
                with contextlib.suppress(Exception):  # (a process killed here leaves it)
                    await self.client.delete(bell)
        return reply is not None and not rung

    async def _close_waits(self) -> None:
        """Close the cluster wake-up subscription, if one was made."""
        if self._waits is not None:
            waits, self._waits = self._waits, None
            await waits.close()

    async def _unreadable(
        self, run_id: str, key: str, error: ResponseError, want: str
    ) -> Exception:
        """The error to raise for a read that Redis refused: `CorruptData` for a key
        of another type than `want` (WRONGTYPE), else `error` itself."""
        if not str(error).startswith("WRONGTYPE"):
            return error
        kind: Any = await self.client.type(key)
        return CorruptData(run_id, key, f"holds a {kind}, not a {want}")
