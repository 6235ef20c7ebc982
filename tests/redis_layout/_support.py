"""Raw-key readers of the Redis store, and the kit's builders for these tests.

The builders (fixed times, `new_run`, records, `consume`...) are the
conformance kit's (`testing.conformance._support`), re-exported here for the
project's other store-level tests.
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from sdk.store import RunStatus
from stores._keys import SUFFIX
from stores.redis import RedisStore
from testing._fakeconn import Fields
from testing.conformance._support import (
    COMPLETED,
    GO,
    OK_BOX,
    OWNER,
    PAYLOADS,
    RECOVERY_ERROR,
    T0,
    TRICKY,
    TTL,
    FeedRecorder,
    claim_ids,
    consume,
    journal_of,
    new_run,
    pending_wait,
    recording,
    start_and_claim,
    status_of,
    step_record,
    wait_record,
    wait_timeout,
)

__all__ = [
    "COMPLETED",
    "GO",
    "OK_BOX",
    "OWNER",
    "PAYLOADS",
    "RECOVERY_ERROR",
    "T0",
    "TRICKY",
    "TTL",
    "FeedRecorder",
    "assert_indexed_once",
    "claim_ids",
    "consume",
    "count_sent",
    "indexed",
    "journal_of",
    "key_content",
    "keys_naming",
    "mailbox_key",
    "new_run",
    "pending_wait",
    "recording",
    "run_hash",
    "snapshot",
    "start_and_claim",
    "status_index",
    "status_of",
    "step_record",
    "wait_record",
    "wait_timeout",
]


def mailbox_key(store: RedisStore, run_id: str, mailbox: str) -> str:
    """A mailbox's list (`mailbox`: "s:name" or "h:name"), as the Lua `mbk` names it:
    the run id is length-prefixed because it may hold ':'."""
    return f"{store.keys.base_of(run_id)}{SUFFIX['mailbox']}{len(run_id)}:{run_id}:{mailbox}"


async def run_hash(store: RedisStore, run_id: str) -> dict[str, str]:
    raw = cast("dict[str, str]", await store.client.hgetall(store.keys.run(run_id)))
    return raw


async def status_index(store: RedisStore) -> dict[str, set[str]]:
    """Every per-status index (partition 0): status -> run ids in it."""
    out: dict[str, set[str]] = {}
    for status in RunStatus:
        ids = await store.client.zrange(store.keys.status_index(0, status.value), 0, -1)
        out[status.value] = set(cast("list[str]", ids))
    return out


async def assert_indexed_once(store: RedisStore, run_id: str) -> None:
    """The run sits in exactly the status index of its current status."""
    expected = (await status_of(store, run_id)).value
    holding = {st for st, ids in (await status_index(store)).items() if run_id in ids}
    assert holding == {expected}


async def indexed(store: RedisStore, run_id: str) -> set[str]:
    """The partition-wide indexes that still hold `run_id`."""
    k = store.keys
    holding = {st for st, ids in (await status_index(store)).items() if run_id in ids}
    for name, key in (
        ("runs", k.all_runs(0)),
        ("expiry", k.expiry(0)),
        ("timers", k.base(0) + SUFFIX["timers"]),
        ("leases", k.base(0) + SUFFIX["leases"]),
        ("deadlines", k.base(0) + SUFFIX["deadlines"]),
        ("queue", k.base(0) + SUFFIX["queue"] + "default"),
    ):
        if await store.client.zscore(key, run_id) is not None:
            holding.add(name)
    return holding


async def keys_naming(store: RedisStore, run_id: str) -> set[str]:
    """Every key of this store whose name contains `run_id`."""
    return {k async for k in store.client.scan_iter(match=store.keys.pattern()) if run_id in k}


def count_sent(store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The first command of each round trip `store` makes from now on, as it goes
    over the wire (script calls and plain commands, on every connection)."""
    sent: list[str] = []
    classes = {c.connection_pool.connection_class for c in (store.client, store.blocking_client)}
    for cls in classes:
        send = cls.send_packed_command

        async def counting(self: Any, command: Any, *a: Any, _send: Any = send, **kw: Any) -> None:
            if isinstance(command, Fields):  # memory://: the fields, not RESP
                sent.append(command[0].decode().upper())
            else:
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
    """Type and content of every key of this store, but the feed and the layout
    (the partition count the store's first script call records, once)."""
    skip = {store.keys.feed(0), store.keys.layout()}
    return {
        key: await key_content(store, key)
        async for key in store.client.scan_iter(match=store.keys.pattern())
        if key not in skip
    }
