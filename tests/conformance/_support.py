"""Builders and raw-key readers shared by the conformance tests."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from sdk._journal import Kind, Record, State
from sdk._types import RunStatus
from stores._keys import SUFFIX
from stores._protocol import Claim, NewRun
from stores.redis import RedisStore

T0 = 1_000_000.0  # a fixed "now" for scripts: stores take time only as an argument
TTL = 10.0
OWNER = "worker-a"
NO_ARGS = '{"args":[],"kwargs":{},"types":{}}'
RECOVERY_ERROR = json.dumps(
    {"type": "sdk.errors:SteadyflowError", "message": "too many recoveries",
     "reason": "max_recoveries_exceeded"}
)  # fmt: skip


def new_run(
    run_id: str,
    *,
    flow: str = "tests.flow",
    args: str = NO_ARGS,
    queue: str = "default",
    priority: int = 0,
    created_at: float = T0,
    tenant_id: str | None = None,
) -> NewRun:
    digest = hashlib.sha256(f"{flow}\n{args}".encode()).hexdigest()
    return NewRun(run_id, flow, None, args, digest, queue, priority, tenant_id, created_at)


def step_record(key: str, pos: int, value: Any = None) -> str:
    return Record(key, pos, Kind.STEP, State.OK, value=value).to_json()


async def start_and_claim(store: RedisStore, run_id: str, *, now: float = T0) -> Claim:
    """Create one run and claim it (the store must hold no other ready run)."""
    await store.create_run(new_run(run_id, created_at=now))
    claims = await store.claim(OWNER, None, 1, now, TTL)
    assert [c.run.record.run_id for c in claims] == [run_id]
    return claims[0]


async def status_of(store: RedisStore, run_id: str) -> RunStatus:
    stored = await store.get_run(run_id)
    assert stored is not None, f"run {run_id!r} vanished"
    return stored.record.status


async def journal_of(store: RedisStore, run_id: str) -> dict[str, str]:
    raw: dict[str, str] = await store.client.hgetall(store.keys.journal(run_id))
    return raw


def mailbox_key(store: RedisStore, run_id: str, mailbox: str) -> str:
    # Mirrors the Lua `mbk`: the run id is length-prefixed because it may hold ':'.
    return f"{store.keys.base_of(run_id)}{SUFFIX['mailbox']}{len(run_id)}:{run_id}:{mailbox}"


async def status_index(store: RedisStore) -> dict[str, set[str]]:
    """Every per-status index (partition 0): status -> run ids in it."""
    out: dict[str, set[str]] = {}
    for status in RunStatus:
        ids = await store.client.zrange(store.keys.status_index(0, status.value), 0, -1)
        out[status.value] = set(ids)
    return out


async def assert_indexed_once(store: RedisStore, run_id: str) -> None:
    """The run sits in exactly the status index of its current status."""
    expected = (await status_of(store, run_id)).value
    holding = {st for st, ids in (await status_index(store)).items() if run_id in ids}
    assert holding == {expected}


async def claim_ids(store: RedisStore, **kw: Any) -> list[str]:
    kw.setdefault("owner", OWNER)
    kw.setdefault("queues", None)
    kw.setdefault("limit", 100)
    kw.setdefault("now", T0)
    kw.setdefault("lease_ttl", TTL)
    return [c.run.record.run_id for c in await store.claim(**kw)]


def wait_prefix(key: str, pos: int) -> str:
    return Record(key, pos, Kind.WAIT, State.OK).splice_prefix()


def wait_timeout(key: str, pos: int, due: float) -> str:
    return Record(key, pos, Kind.WAIT, State.TIMEOUT, due=due).to_json()


async def consume(
    store: RedisStore, run_id: str, fence: int, *, key: str = "~wait:go#1",
    mailbox: str = "s:go", now: float = T0, deadline: float | None = None,
) -> tuple[int, str | None]:  # fmt: skip
    return await store.consume(
        run_id, fence, key, mailbox, now, deadline,
        wait_prefix(key, 0), wait_timeout(key, 0, deadline or 0.0),
    )  # fmt: skip


class FeedRecorder:
    """Subscribes to a store's live feed (Pub/Sub: only what is published after
    `start` is seen) and collects (type, data) per run."""

    def __init__(self, store: RedisStore, subscription: Any) -> None:
        self.store = store
        self.subscription = subscription
        self.seen: list[Any] = []

    @classmethod
    async def start(cls, store: RedisStore) -> FeedRecorder:
        _, sub = await store.follow(None, 0.01, 1)
        return cls(store, sub)

    async def of(self, run_id: str) -> list[tuple[str, Any]]:
        while True:
            batch, self.subscription = await self.store.follow(self.subscription, 0.05, 1000)
            if not batch:
                break
            self.seen += batch
        return [
            (e.fields["type"], json.loads(e.fields["data"]) if "data" in e.fields else None)
            for e in self.seen
            if e.run_id == run_id
        ]

    async def close(self) -> None:
        await self.store.unfollow(self.subscription)


def count_sent(store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The first command of each round trip `store` makes from now on, as it goes
    over the wire (script calls and plain commands, on every connection)."""
    sent: list[str] = []
    classes = {c.connection_pool.connection_class for c in (store.client, store.blocking_client)}
    for cls in classes:
        send = cls.send_packed_command

        async def counting(self: Any, command: Any, *a: Any, _send: Any = send, **kw: Any) -> None:
            first = command if isinstance(command, bytes) else b"".join(command)
            sent.append(first.split(b"\r\n", 3)[2].decode().upper())
            await _send(self, command, *a, **kw)

        monkeypatch.setattr(cls, "send_packed_command", counting)
    return sent


async def key_content(store: RedisStore, key: str) -> Any:
    """What `key` holds, read by its type (None when it does not exist)."""
    c = store.client
    kind = await c.type(key)
    if kind == "hash":
        return await c.hgetall(key)
    if kind == "zset":
        return await c.zrange(key, 0, -1, withscores=True)
    if kind == "set":
        return await c.smembers(key)
    if kind == "list":
        return await c.lrange(key, 0, -1)
    if kind == "stream":
        return await c.xrange(key)
    if kind == "string":
        return await c.get(key)
    assert kind == "none", (key, kind)
    return None


async def snapshot(store: RedisStore) -> dict[str, Any]:
    """Type and content of every key of this store (the feed excepted)."""
    return {
        key: await key_content(store, key)
        async for key in store.client.scan_iter(match=store.keys.pattern())
        if key != store.keys.feed(0)
    }
