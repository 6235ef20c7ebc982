"""The Redis store's registry of live workers, from their heartbeats.

Each worker keeps a JSON record of itself in a hash and an entry in a sorted
set scored by when that record expires (from the injected clock, never a key
TTL), both in partition 0. Each beat also drops the registrations that
expired (atomically, in its script, so a worker renewing meanwhile keeps its
record); reading only reads, so a read-only user can list workers.

Each beat also checks the deployment's partition count again
(`StoreCore.check_layout`; one round trip a beat, off the hot path). A store
checks it once, before its first script call, so without this a Redis that
lost its data (restarted without persistence) would leave the count
unrecorded for the next process to record, whatever its own: a process
given another count would then split the runs unnoticed. With it, the live
workers record the count again within a beat, and one that finds another
count raises `PartitionsMismatch` (the worker stops on it, as on a first
check).
"""

from __future__ import annotations

import json
from typing import Any

import attrs
from redis.exceptions import ResponseError

from sdk.store._records import WorkerBeat
from stores._codec import num
from stores._storecore import StoreCore

__all__ = ["WorkerBeats"]


class WorkerBeats:
    """The registry of live workers: `beat`, `forget_worker`, `workers`."""

    def __init__(self, core: StoreCore) -> None:
        self._core = core
        self._keys = core.keys

    async def beat(self, beat: WorkerBeat) -> None:
        await self._core.check_layout()  # every beat (see the module's docstring)
        record = json.dumps(attrs.asdict(beat), separators=(",", ":"), ensure_ascii=False)
        await self._core.call(
            "beat",
            [self._keys.workers()],
            [self._keys.base(0), beat.worker_id, record, num(beat.expires_at), num(beat.beat_at)],
        )

    async def forget_worker(self, worker_id: str) -> None:
        await self._core.call(
            "forget_worker", [self._keys.workers()], [self._keys.base(0), worker_id]
        )

    async def workers(self, now: float) -> list[WorkerBeat]:
        # Reads only (a read-only user may list workers); writers prune.
        names = (self._keys.workers(), self._keys.worker())
        async with self._core.client.pipeline(transaction=False) as pipe:
            pipe.zrangebyscore(names[0], f"({num(now)}", "+inf")
            pipe.hgetall(names[1])
            replies = await pipe.execute(raise_on_error=False)
        for name, reply, want in zip(names, replies, ("zset", "hash"), strict=True):
            if isinstance(reply, ResponseError):  # (the repair pass rebuilds them)
                raise await self._core.unreadable_shared(name, reply, want) from None
        alive, records = replies
        found = []
        for w in alive:
            try:
                found.append(_beat(json.loads(records[w])))
            except (KeyError, TypeError, ValueError):
                continue  # gone meanwhile, or a record that cannot be read: not listed
        return found


def _beat(data: dict[str, Any]) -> WorkerBeat:
    queues = data.get("queues")
    return WorkerBeat(
        worker_id=data["worker_id"], host=data["host"], pid=int(data["pid"]),
        flows=tuple(data["flows"]), queues=None if queues is None else tuple(queues),
        concurrency=int(data["concurrency"]), in_flight=int(data["in_flight"]),
        started_at=float(data["started_at"]), beat_at=float(data["beat_at"]),
        expires_at=float(data["expires_at"]),
    )  # fmt: skip
