"""What every part of the Redis store shares: its clients, key names and script calls.

`stores.redis.RedisStore` makes one `StoreCore` and hands it to each of its
parts (claims, writes, reads...): they hold it, never each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import secrets
from collections.abc import Sequence
from typing import Any

import attrs
import redis.asyncio as aioredis
from redis.exceptions import NoScriptError, RedisError, ResponseError, TryAgainError

from sdk.store import CorruptData, CorruptIndex, PartitionsMismatch, RunStatus, StoreLimits
from stores import _decode, _migrating
from stores._keys import SHARED_TYPES, SUFFIX, Keys
from stores._redispy import ScriptRunner, is_cluster, script_runner, strict_args
from stores._scripts import build_scripts
from stores._wakeups import ShardedWaits

__all__ = ["STORE_OPTIONS", "StoreCore", "block_seconds"]

#: The options of a store itself (its bounds, `StoreLimits`), as opposed to its
#: connection pool's: `RedisStore`, `open_store` and ``memory://`` take them.
STORE_OPTIONS = tuple(a.name for a in attrs.fields(StoreLimits))


def block_seconds(timeout: float) -> float:
    """`timeout` as a blocking command's timeout (BLPOP, BRPOPLPUSH): at least 1 ms,
    whole milliseconds plus half of one. Redis counts it in whole milliseconds,
    and 0 blocks forever: Redis 6.2 truncates 0.001 s to 0 ms (binary floating
    point falls just short) and would never return; the extra half millisecond
    keeps every value off that edge."""
    return math.ceil(max(timeout, 0.001) * 1000) / 1000 + 0.0005


class StoreCore:
    """The Redis store's connections and layout, and the helpers its parts share:
    script calls (one, one per partition, pipelined), the check of the
    deployment's partition count, and blocking waits for wake-up tokens.

    Args: as `stores.redis.RedisStore`'s.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        prefix: str,
        partitions: int,
        blocking_client: aioredis.Redis | None,
        limits: StoreLimits,
    ) -> None:
        self.client = client
        self.blocking_client = blocking_client or client
        self.keys = Keys(prefix, partitions)
        #: The store's bounds per run (its options; the scripts hold them).
        self.limits = limits
        self.max_events_per_run = limits.max_events_per_run
        #: Whether `client` is a Redis Cluster client (scripts then guard against slot migration).
        self.cluster = is_cluster(client)
        scripts = build_scripts(limits, cluster=self.cluster)
        #: redis-py's script objects, by name: their SHA, and their NOSCRIPT reload.
        self.scripts: dict[str, Any] = {
            name: client.register_script(src) for name, src in scripts.items()
        }
        #: How every script call is sent (see stores._redispy).
        self.runner: ScriptRunner = script_runner(client)
        #: The deployment's partition count was found to be this store's (`check_layout`).
        self.layout_ok = False
        #: Cluster wake-up waits, made by the first wait (see `blpop_any`).
        self.waits: ShardedWaits | None = None
        # This store's blocking waits (`blpop_until`): an id, and how many it made.
        self._bell_id = secrets.token_hex(6)
        self._bells = 0

    async def close(self) -> None:
        """Close the wake-up subscription, the script runner and the clients."""
        if self.waits is not None:
            waits, self.waits = self.waits, None
            await waits.close()
        await self.runner.close()
        if self.blocking_client is not self.client:
            await self.blocking_client.aclose()
        await self.client.aclose()

    # -- keys ------------------------------------------------------------------

    def partitions(self) -> range:
        return range(self.keys.partitions)

    def anchor(self, partition: int) -> str:
        # Scripts that work on a whole partition name one of its keys, so a
        # Redis Cluster client routes them to the node owning that hash tag.
        return self.keys.all_runs(partition)

    def key(self, suffix: str, run_id: str) -> str:
        """A key of a run, by its `stores._keys.SUFFIX` name (for damage reports)."""
        return self.keys.base_of(run_id) + SUFFIX[suffix] + run_id

    # -- script calls ----------------------------------------------------------

    async def call(self, name: str, keys: Sequence[str | bytes], args: Sequence[Any]) -> Any:
        """Script `name` on `keys` with `args`: its reply. `CorruptIndex` when the
        script found a key that runs share damaged (it wrote nothing), or Redis
        stopped it on one (`shared_damage`)."""
        if not self.layout_ok:
            await self.check_layout()
        try:
            reply = await self.runner.run(self.scripts[name], keys, args)
        except ResponseError as error:
            raise await self.shared_damage(args, error) from None
        return _decode.index_damage(reply)

    async def each(self, name: str, calls: list[tuple[list[str], list[str]]]) -> list[Any]:
        """Script `name` once per call, all at once: the replies in order. On one
        node concurrent calls (the lane sends them in one write); on a cluster
        one pipeline (redis-py sends each node its share, the nodes at once),
        which saves the cluster client's per-command work."""
        if len(calls) == 1:  # (one partition: no task for gather to make)
            return [await self.call(name, *calls[0])]
        if not self.layout_ok:
            await self.check_layout()  # once, not once per partition
        if self.cluster:
            await self.client.initialize()
            return await self.pipelined(name, calls)
        return list(await asyncio.gather(*(self.call(name, k, a) for k, a in calls)))

    async def pipelined(self, name: str, calls: Sequence[tuple[list[str], list[str]]]) -> list[Any]:
        """One script per call, sent as one pipeline (one round trip): the replies in
        order. A server that lacks the script (flushed, restarted) ran none of them:
        it is loaded and those calls are sent again. On a cluster, a call answered
        with an error (its slot moving: ASK, TRYAGAIN) is sent again alone, the way
        every script call is retried (`stores._migrating`): it wrote nothing.
        `CorruptIndex` when a call found a key that runs share damaged."""
        script = self.scripts[name]
        todo = list(range(len(calls)))
        replies: list[Any] = [None] * len(calls)
        alone: list[int] = []
        for _ in range(2):
            async with self.client.pipeline(transaction=False) as pipe:
                for i in todo:
                    # on a cluster, with the probe key: whole or not at all while its slot moves
                    keys, args = _migrating.declared(calls[i][0], self.cluster), calls[i][1]
                    # as a raw command: redis-py's cluster pipeline refuses its evalsha()
                    # method, but routes EVALSHA by its first key (one round trip per node)
                    pipe.execute_command(
                        "EVALSHA", script.sha, len(keys), *strict_args(keys), *strict_args(args)
                    )
                try:
                    got: list[Any] = await pipe.execute(raise_on_error=False)
                except Exception:
                    if not self.cluster:
                        raise
                    # an older redis-py's cluster pipeline raises on a moving
                    # slot (AskError, or an AttributeError in redis-py 5.3)
                    # instead of answering per call: each goes alone
                    # (a call that did run is run again: starts and records are
                    # idempotent by run id and step key)
                    got = [TryAgainError("pipeline refused")] * len(todo)
            missing = []
            for i, reply in zip(todo, got, strict=True):
                if isinstance(reply, NoScriptError):
                    missing.append(i)
                elif isinstance(reply, RedisError):  # a moving slot: ClusterError too
                    if isinstance(reply, ResponseError) and "WRONGTYPE" in str(reply):
                        raise await self.shared_damage(calls[i][1], reply) from None
                    if not self.cluster:
                        raise reply
                    alone.append(i)
                replies[i] = reply
            if not missing:
                for i in alone:
                    replies[i] = await self.call(name, *calls[i])
                for reply in replies:
                    _decode.index_damage(reply)
                return replies
            await self.client.script_load(script.script)
            todo = missing
        raise NoScriptError(f"script {name!r} could not be loaded")

    # -- the deployment's partition count --------------------------------------

    async def check_layout(self) -> None:
        """Before this store's first script call (and until one succeeds): check that
        the deployment under its prefix uses its partition count, recording it if
        no process has yet. One round trip per store; calls made together before
        it is known each ask (the answer is the same). Raises `PartitionsMismatch`
        (nothing is written) when the counts differ."""
        keys = self.keys
        reply = _decode.corrupt(
            "", await self.runner.run(
                self.scripts["layout"], [keys.layout()], ["", str(keys.partitions)]
            )
        )  # fmt: skip
        self._found(reply.decode() if isinstance(reply, bytes) else str(reply))

    async def read_layout(self) -> None:
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
            raise await self.unreadable("", key, error, "hash") from None
        if found[0] is not None:
            self._found(str(found[0]))

    def _found(self, recorded: str) -> None:
        """The recorded partition count is `recorded`: this store's, or `PartitionsMismatch`."""
        if recorded != str(self.keys.partitions):
            raise PartitionsMismatch(self.keys.prefix, recorded, self.keys.partitions)
        self.layout_ok = True

    async def unreadable(self, run_id: str, key: str, error: ResponseError, want: str) -> Exception:
        """The error to raise for a read that Redis refused: `CorruptData` for a key
        of another type than `want` (WRONGTYPE), else `error` itself."""
        if not str(error).startswith("WRONGTYPE"):
            return error
        kind: Any = await self.client.type(key)
        return CorruptData(run_id, key, f"holds a {kind}, not a {want}")

    async def shared_damage(self, args: Sequence[Any], error: ResponseError) -> Exception:
        """The error to raise for a script that Redis stopped with `error`: for
        WRONGTYPE (a key of another type that the script did not check before
        using it), `CorruptIndex` naming a key that the runs of its partition
        (``ARGV[1]``, the partition's base) share and that holds another type
        than its own; else `error` itself. Only on that error path: one round
        trip of ``TYPE`` reads."""
        base = str(args[0]) if args else ""
        if "WRONGTYPE" not in str(error) or base not in self._bases():
            return error
        wants = {base + SUFFIX[name]: kind for name, kind in SHARED_TYPES.items()}
        wants.update({base + SUFFIX["status"] + s.value: "zset" for s in RunStatus})
        wants[base + SUFFIX["wake"] + "*"] = "list"
        kind: Any = await self.client.type(base + SUFFIX["queues"])
        if kind == "set":
            names: Any = await self.client.smembers(base + SUFFIX["queues"])
            for q in names:
                wants[base + SUFFIX["queue"] + q] = "zset"
                wants[base + SUFFIX["wake"] + q] = "list"
        async with self.client.pipeline(transaction=False) as pipe:
            for key in wants:
                pipe.type(key)
            kinds = await pipe.execute()
        for (key, want), kind in zip(wants.items(), kinds, strict=True):
            if str(kind) not in (want, "none"):
                return CorruptIndex(key, f"holds a {kind}, not a {want}")
        return error

    def _bases(self) -> set[str]:
        return {self.keys.base(p) for p in self.partitions()}

    async def unreadable_shared(self, key: str, error: ResponseError, want: str) -> Exception:
        """As `unreadable`, for a key that runs share: `CorruptIndex`."""
        if not str(error).startswith("WRONGTYPE"):
            return error
        kind: Any = await self.client.type(key)
        return CorruptIndex(key, f"holds a {kind}, not a {want}")

    # -- blocking waits --------------------------------------------------------

    async def blpop_any(self, per_partition: list[list[str]], timeout: float) -> bool:
        """Take a wake-up token from any of the lists, waiting up to `timeout` seconds
        for one; False when none came."""
        if self.cluster:
            # A cluster refuses keys of several slots in one BLPOP: one per
            # partition would hold one connection each. Sharded Pub/Sub instead,
            # one connection per master, kept for the store's life (stores._wakeups).
            if self.waits is None:
                self.waits = ShardedWaits(
                    self.client,  # type: ignore[arg-type]  # a cluster client (self.cluster)
                    lambda keys: self.call("take_wake", keys, []),
                )
            return await self.waits.wait(per_partition, timeout)
        # One BLPOP on every list. (Several, raced and the losers cancelled,
        # would leave a cancelled BLPOP blocking its connection server-side: the
        # next command on that connection waits behind it, and the losers may
        # pop tokens nobody reads.)
        return await self.blpop_until([key for keys in per_partition for key in keys], timeout)

    async def blpop_until(self, keys: list[str], timeout: float) -> bool:
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
