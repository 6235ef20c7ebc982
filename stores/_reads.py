"""The Redis store's reads of a run's history, and its blocking waits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio.client import PubSub
from redis.exceptions import ResponseError

from sdk.store import (
    CorruptData,
    Lineage,
    Mailbox,
    RunStatus,
    StoredCheckpoint,
    StoredEvent,
    StoredRun,
)
from stores import _codec, _decode
from stores._keys import SUFFIX
from stores._listing import Partition, merged
from stores._storecore import StoreCore, block_seconds
from stores._wakeups import ShardedFeed

__all__ = ["RunReads"]


def _event_order(event_id: str) -> tuple[int, int]:
    """A stream entry id ("<ms>-<seq>") as what orders it."""
    ms, _, seq = str(event_id).partition("-")
    return int(ms), int(seq or 0)


class RunReads:
    """Runs, lineage, events, checkpoints, the live feed; wake-up and finish waits."""

    def __init__(self, core: StoreCore) -> None:
        self._core = core
        self._keys = core.keys

    async def get_run(self, run_id: str) -> StoredRun | None:
        return await self._read_run(run_id, self._keys.run(run_id))

    async def get_tombstone(self, run_id: str) -> StoredRun | None:
        return await self._read_run(run_id, self._keys.gone(run_id))

    async def _read_run(self, run_id: str, key: str) -> StoredRun | None:
        if not self._core.layout_ok:
            await self._core.read_layout()
        try:
            h: Any = await self._core.client.hgetall(key)
        except ResponseError as e:
            return await self._mistyped_run(run_id, key, e)
        return _decode.stored_run(run_id, h, key) if h else None

    async def _mistyped_run(self, run_id: str, key: str, error: ResponseError) -> StoredRun:
        """A run whose record is not a hash (HGETALL answered WRONGTYPE): reported
        damaged, with nothing read. Another error is raised as it is."""
        if not str(error).startswith("WRONGTYPE"):
            raise error
        kind: Any = await self._core.client.type(key)
        return _decode.damaged_run(run_id, {}, key, f"holds a {kind}, not a hash")

    async def list_runs(
        self,
        status: RunStatus | None,
        flow: str | None,
        limit: int,
        *,
        parent_run_id: str | None = None,
    ) -> list[StoredRun]:
        if not self._core.layout_ok:
            await self._core.read_layout()
        k = self._keys

        def index(p: int) -> str:
            if parent_run_id is not None:
                return k.children(p, parent_run_id)
            return k.status_index(p, status.value) if status else k.all_runs(p)

        def wanted(run: StoredRun) -> bool:
            return (flow is None or run.flow == flow) and (
                parent_run_id is None or status is None or run.status is status
            )

        async def unindexed(key: str, error: ResponseError) -> Exception:
            # a run's children are that run's (CorruptData naming it); the status
            # and all-runs indexes are the partition's (CorruptIndex)
            if parent_run_id is not None:
                return await self._core.unreadable(parent_run_id, key, error, "zset")
            return await self._core.unreadable_shared(key, error, "zset")

        # pages of about twice a partition's share of `limit` (stores._listing)
        page = min(100, max(10, 2 * -(-limit // k.partitions)))
        parts = [
            Partition(self._core.client, k, index(p), page, wanted, self._mistyped_run, unindexed)
            for p in self._core.partitions()
        ]
        return await merged(parts, limit)

    async def read_lineage(self, run_id: str) -> Lineage | None:
        if not self._core.layout_ok:
            await self._core.read_layout()
        k = self._keys
        base = k.base_of(run_id)
        names = [k.run(run_id), k.journal(run_id), base + SUFFIX["jseq"] + run_id,
                 base + SUFFIX["lineage"] + run_id, k.checkpoints(run_id)]  # fmt: skip
        async with self._core.client.pipeline(transaction=False) as pipe:
            for name in names[:4]:
                pipe.hgetall(name)
            pipe.xrange(names[4], "-", "+")
            replies = await pipe.execute(raise_on_error=False)
        for name, reply, want in zip(names, replies, ("hash",) * 4 + ("stream",), strict=True):
            if isinstance(reply, ResponseError):
                raise await self._core.unreadable(run_id, name, reply, want)
        h, journal, jseq, lineage, cps = replies
        if not h:
            return None
        # A replay or fork copies these records: every one must be readable.
        run = _decode.stored_run(run_id, h, names[0])
        if run.damage is not None:
            raise CorruptData(run_id, names[0], run.damage[len(names[0]) + 2 :])
        for name, pairs in zip(names[1:4], (journal, jseq, lineage), strict=True):
            for step, text in pairs.items():
                if _decode.unreadable(step) or _decode.unreadable(text):
                    raise CorruptData(
                        run_id, name, f"entry {_decode.show(step)} holds bytes that are not UTF-8"
                    )
        return Lineage(
            run, journal, _codec.written(jseq, run_id, names[2]), lineage,
            _codec.checkpoints(cps, jseq, run_id, (names[4], names[2])),
        )  # fmt: skip

    async def events(self, run_id: str, cursor: str | None, limit: int) -> list[StoredEvent]:
        if not self._core.layout_ok:
            await self._core.read_layout()
        start = "-" if cursor is None else f"({cursor}"
        # The log, and the audit events trimmed out of it (the run's audit trail,
        # see the Lua `trim`): they share ids, so a page of each, merged by id, is
        # a page of the whole history. One round trip: both share the run's slot.
        keys = (self._keys.events(run_id), self._keys.trail(run_id))
        async with self._core.client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.xrange(key, start, "+", count=limit)
            replies = await pipe.execute(raise_on_error=False)
        for key, reply in zip(keys, replies, strict=True):
            if isinstance(reply, ResponseError):
                raise await self._core.unreadable(run_id, key, reply, "stream")
        log, trail = replies
        if not trail:  # the common case: nothing was ever trimmed out
            return [_codec.stored_event(str(eid), run_id, fields, keys[0]) for eid, fields in log]
        found = {_event_order(eid): (eid, fields, keys[1]) for eid, fields in trail}
        found.update({_event_order(eid): (eid, fields, keys[0]) for eid, fields in log})
        page = [found[order] for order in sorted(found)[:limit]]
        return [_codec.stored_event(str(eid), run_id, fields, key) for eid, fields, key in page]

    async def approvers(self, run_id: str) -> dict[Mailbox, tuple[str, ...]]:
        if not self._core.layout_ok:
            await self._core.read_layout()
        key = self._keys.base_of(run_id) + SUFFIX["approvers"] + run_id
        try:
            found: Any = await self._core.client.hgetall(key)  # decode_responses: str -> str
        except ResponseError as e:
            raise await self._core.unreadable(run_id, key, e, "hash") from None
        out: dict[Mailbox, tuple[str, ...]] = {}
        for box, who in found.items():
            if _decode.unreadable(box) or _decode.unreadable(who) or box[:2] not in ("h:", "s:"):
                raise CorruptData(run_id, key, f"entry {_decode.show(box)} cannot be read")
            out[_decode.parse_mailbox(box)] = tuple(w for w in who.split("\n") if w)
        return out

    async def checkpoints(self, run_id: str) -> list[StoredCheckpoint]:
        if not self._core.layout_ok:
            await self._core.read_layout()
        # Run-level checkpoints are stream entries; a step_completed checkpoint
        # lives in its step's js: entry ("seq:id:at", see the Lua `journaled`).
        k = self._keys
        names = (k.checkpoints(run_id), k.base_of(run_id) + SUFFIX["jseq"] + run_id)
        async with self._core.client.pipeline(transaction=False) as pipe:
            pipe.xrange(names[0], "-", "+")
            pipe.hgetall(names[1])
            replies = await pipe.execute(raise_on_error=False)
        for name, reply, want in zip(names, replies, ("stream", "hash"), strict=True):
            if isinstance(reply, ResponseError):
                raise await self._core.unreadable(run_id, name, reply, want)
        entries, marks = replies
        return _codec.checkpoints(entries, marks, run_id, names)

    async def correlation(self, run_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        """Trace and tenant ids of runs (for feed followers); unknown runs are left
        out, and so are runs whose record cannot be read (their events still come)."""
        if not self._core.layout_ok:
            await self._core.read_layout()
        async with self._core.client.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hmget(self._keys.run(run_id), ["trace_id", "tenant_id"])
            rows = await pipe.execute(raise_on_error=False)
        return {
            run_id: (trace or run_id, tenant or None)
            for run_id, row in zip(run_ids, rows, strict=True)
            if not isinstance(row, ResponseError)
            for trace, tenant in [row]
            if (trace is not None or tenant is not None)
            and not any(x is not None and _decode.unreadable(x) for x in row)
        }

    async def follow(
        self, subscription: Any, timeout: float, count: int
    ) -> tuple[list[StoredEvent], Any]:
        if not self._core.layout_ok:
            await self._core.read_layout()
        channels = [self._keys.feed(p) for p in self._core.partitions()]
        if subscription is None and self._core.cluster:
            # Sharded channels (the scripts SPUBLISH there), one connection per master.
            subscription = await ShardedFeed.open(self._core.client, channels)  # type: ignore[arg-type]
        if isinstance(subscription, ShardedFeed):
            found = (_codec.feed_event(data) for data in await subscription.get(timeout, count))
            return [event for event in found if event is not None], subscription
        if subscription is None:
            subscription = self._core.blocking_client.pubsub()
            await subscription.subscribe(*channels)
            for _ in channels:  # subscribed to all before returning (an ack reads as None)
                await subscription.get_message(timeout=5.0)
        out: list[StoredEvent] = []
        msg = await subscription.get_message(ignore_subscribe_messages=True, timeout=timeout)
        while msg is not None:
            event = _codec.feed_event(msg["data"])
            if event is not None:  # a message that cannot be read is skipped
                out.append(event)
            if len(out) >= count:
                break
            msg = await subscription.get_message(ignore_subscribe_messages=True, timeout=0.0)
        return out, subscription

    async def unfollow(self, subscription: Any) -> None:
        if isinstance(subscription, ShardedFeed):
            await subscription.close()
        elif isinstance(subscription, PubSub):
            await subscription.aclose()  # type: ignore[no-untyped-call]

    # -- blocking waits --------------------------------------------------------

    async def wait_ready(
        self, queues: Sequence[str] | None, timeout: float, *, owner: str | None = None
    ) -> bool:
        names = list(queues) if queues else [None]
        own = [] if owner is None else [owner]  # the runs it keeps in memory (sticky)
        return await self._core.blpop_any(
            [
                [self._keys.wake(p, q) for q in names] + [self._keys.swake(p, o) for o in own]
                for p in self._core.partitions()
            ],
            timeout,
        )

    async def wait_finished(self, run_id: str, timeout: float) -> bool:
        if not self._core.layout_ok:
            await self._core.read_layout()
        # Rotating the one-element list onto itself reads it without taking it,
        # so every waiter wakes. Returns at once if the run already finished.
        key = self._keys.done(run_id)
        try:
            reply = await self._core.blocking_client.brpoplpush(key, key, block_seconds(timeout))
        except ResponseError as e:  # (the run's end replaces it: finished() in the scripts)
            raise await self._core.unreadable(run_id, key, e, "list") from None
        return reply is not None
