"""Poison stays local: one run's damaged data never hurts another (issue 8).

Each case damages one run's data in Redis by hand (a key of another type, a
field that is not a number, bytes that are not UTF-8, JSON that is not JSON,
an index entry pointing nowhere), with ten healthy runs beside it in the same
claim batch, and runs a worker for a bounded number of passes. Then:

- every healthy run has completed;
- the damaged run has ended ``failed`` with reason ``corrupt_record``, its
  error naming the key (or, when only an index entry was wrong, nothing else
  happened);
- ``list_runs()`` still works and lists the damaged run as damaged.

Both on memory:// (fakeredis's Lua) and on the real Redis. Then the scripts'
own guarantees: a script that finds bad arguments or damaged keys writes
nothing (Redis does not roll back), and the repair pass puts back a run that
no index reaches, with a ``run.repaired`` event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest
import redis.exceptions

from sdk import Client, RunHandle, RunStatus, Worker, flow, step, wait_for
from sdk.errors import CorruptRecord, RunFailed
from sdk.store import CorruptData, NewRun, TickResult
from stores import open_store
from stores._keys import SUFFIX
from stores.redis import RedisStore
from testing import FakeClock, FlowTestEnv

HEALTHY = 10
RECOVERY_ERROR = '{"type":"x:Y","message":"too many recoveries"}'


@step
async def add_one(x: int) -> int:
    return x + 1


@flow(name="tests.corruption.work")
async def work(x: int) -> int:
    return await add_one(await add_one(x))


@flow(name="tests.corruption.waits")
async def waits(x: int) -> int:
    got: int = await wait_for("go", timeout=60)
    return x + got


def key(store: RedisStore, suffix: str, run_id: str) -> str:
    return store.keys.base_of(run_id) + SUFFIX[suffix] + run_id


def mailbox(store: RedisStore, run_id: str, name: str) -> str:
    return f"{store.keys.base_of(run_id)}{SUFFIX['mailbox']}{len(run_id)}:{run_id}:s:{name}"


async def replace(store: RedisStore, name: str, value: str | bytes = "garbage") -> None:
    """Make `name` a string key (of the wrong type for everything a run has)."""
    await store.client.delete(name)
    await store.client.set(name, value)


# -- the damage, one case per key family ------------------------------------------------

Damage = Callable[[RedisStore, str], Awaitable[Any]]


async def _hset(store: RedisStore, run_id: str, field: str, value: str | bytes) -> None:
    await store.client.hset(key(store, "run", run_id), field, value)


RUN_HASH: dict[str, Damage] = {
    "missing flow": lambda s, r: s.client.hdel(key(s, "run", r), "flow"),
    "missing created_at": lambda s, r: s.client.hdel(key(s, "run", r), "created_at"),
    "priority not a number": lambda s, r: _hset(s, r, "priority", "high"),
    "created_at not a number": lambda s, r: _hset(s, r, "created_at", "yesterday"),
    "fence not a number": lambda s, r: _hset(s, r, "fence", "x"),
    "unknown status": lambda s, r: _hset(s, r, "status", "zombie"),
    "tenant_id not UTF-8": lambda s, r: _hset(s, r, "tenant_id", b"\xff"),
    "result_type not UTF-8": lambda s, r: _hset(s, r, "result_type", b"\xc3("),
    "args not JSON": lambda s, r: _hset(s, r, "args", "{nope"),
    "record of another type": lambda s, r: replace(s, key(s, "run", r)),
}

OTHER_KEYS: dict[str, Damage] = {
    "journal entry not JSON": lambda s, r: s.client.hset(key(s, "journal", r), "add_one#1", "{"),
    "journal entry not UTF-8": lambda s, r: s.client.hset(
        key(s, "journal", r), "add_one#1", b'{"key":"\xff"}'
    ),
    "journal of another type": lambda s, r: replace(s, key(s, "journal", r)),
    "lineage entry not JSON": lambda s, r: s.client.hset(key(s, "lineage", r), "add_one#1", "["),
    "lineage of another type": lambda s, r: replace(s, key(s, "lineage", r)),
    "mailbox names of another type": lambda s, r: replace(s, key(s, "mailboxes", r)),
    "mailbox of another type": lambda s, r: _mailbox_of_another_type(s, r),
    "event log of another type": lambda s, r: replace(s, key(s, "events", r)),
    "checkpoints of another type": lambda s, r: replace(s, key(s, "checkpoints", r)),
}


async def _mailbox_of_another_type(store: RedisStore, run_id: str) -> None:
    await store.client.sadd(key(store, "mailboxes", run_id), "s:go")
    await replace(store, mailbox(store, run_id, "go"))


async def start_batch(env: FlowTestEnv) -> tuple[list[RunHandle], RunHandle]:
    """Ten healthy runs and the one to damage, started in that order (one batch)."""
    healthy = [await env.start(work, i, run_id=f"healthy-{i}") for i in range(HEALTHY)]
    return healthy, await env.start(work, 100, run_id="damaged")


async def assert_healthy_completed(healthy: list[RunHandle]) -> None:
    for i, handle in enumerate(healthy):
        assert await handle.result(timeout=5) == i + 2


async def passes(env: FlowTestEnv, n: int = 3) -> None:
    """A bounded number of worker passes, each one lease TTL later."""
    for _ in range(n):
        await env.advance(env.worker.lease_ttl + 1)


async def assert_failed_as_corrupt(env: FlowTestEnv, run_id: str, named: str) -> None:
    rec = await env.client.get(run_id)
    assert rec.status is RunStatus.FAILED
    assert rec.reason == "corrupt_record"
    assert rec.error is not None
    assert rec.error.reason == "corrupt_record"
    assert rec.error.type == "sdk.errors:CorruptRecord"
    assert named in rec.error.message
    with pytest.raises(RunFailed) as info:
        await env.client.handle(run_id).result(timeout=5)
    assert info.value.error.reason == "corrupt_record"
    listed = {r.run_id: r for r in await env.client.list_runs()}
    assert len(listed) == HEALTHY + 1
    assert listed[run_id].reason == "corrupt_record"
    assert all(listed[f"healthy-{i}"].status is RunStatus.COMPLETED for i in range(HEALTHY))


@pytest.mark.parametrize("case", sorted(RUN_HASH))
async def test_a_damaged_run_record_fails_that_run_alone(store: RedisStore, case: str) -> None:
    async with FlowTestEnv(FakeClock(), store=store) as env:
        healthy, damaged = await start_batch(env)
        await RUN_HASH[case](store, damaged.run_id)

        await env.run_until_idle()
        await passes(env)

        await assert_healthy_completed(healthy)
        await assert_failed_as_corrupt(env, damaged.run_id, key(store, "run", damaged.run_id))
        # the record reads now, but for what failing the run rewrote (its status), or
        # what the engine, not the store, could not decode (its arguments)
        if case not in ("args not JSON", "unknown status"):
            listed = {r.run_id: r for r in await env.client.list_runs()}
            assert listed["damaged"].damage is not None
            assert key(store, "run", "damaged") in listed["damaged"].damage


@pytest.mark.parametrize("case", sorted(OTHER_KEYS))
async def test_a_damaged_journal_lineage_mailbox_or_log_fails_that_run_alone(
    store: RedisStore, case: str
) -> None:
    async with FlowTestEnv(FakeClock(), store=store) as env:
        healthy, damaged = await start_batch(env)
        await OTHER_KEYS[case](store, damaged.run_id)

        await env.run_until_idle()
        await passes(env)

        await assert_healthy_completed(healthy)
        family = case.split(" ")[0].replace("mailbox", "mailboxes").replace("event", "events")
        named = {
            "journal": key(store, "journal", "damaged"),
            "lineage": key(store, "lineage", "damaged"),
            "mailboxes": key(store, "mailboxes", "damaged"),
            "events": key(store, "events", "damaged"),
            "checkpoints": key(store, "checkpoints", "damaged"),
        }[family]
        if case == "mailbox of another type":
            named = mailbox(store, "damaged", "go")
        await assert_failed_as_corrupt(env, damaged.run_id, named)


async def test_a_raw_bytes_tenant_id_does_not_stop_other_runs(store: RedisStore) -> None:
    # issue 8, finding 1: `tenant_id=b"\xff"` stored raw made every poll of the
    # batch raise UnicodeDecodeError, and the healthy runs ended max_recoveries_exceeded
    async with FlowTestEnv(FakeClock(), store=store) as env:
        healthy, damaged = await start_batch(env)
        await store.client.hset(key(store, "run", damaged.run_id), "tenant_id", b"\xff")

        await env.run_until_idle()

        await assert_healthy_completed(healthy)
        rec = await env.client.get(damaged.run_id)
        assert (rec.status, rec.reason) == (RunStatus.FAILED, "corrupt_record")
        assert rec.error is not None and "tenant_id" in rec.error.message
        assert all(r.recoveries == 0 for r in await env.client.list_runs())


# -- index entries -------------------------------------------------------------------------

#: Partition-wide indexes (key suffix after the partition base).
INDEXES = {
    "queue entry": "q:default",
    "status index entry": "idx:pending",
    "timer": "timers",
    "lease": "leases",
}


@pytest.mark.parametrize("case", sorted(INDEXES))
async def test_an_index_entry_of_a_missing_run_is_dropped(store: RedisStore, case: str) -> None:
    async with FlowTestEnv(FakeClock(), store=store) as env:
        healthy = [await env.start(work, i, run_id=f"healthy-{i}") for i in range(HEALTHY)]
        await store.client.zadd(store.keys.base(0) + INDEXES[case], {"ghost": 0})

        await env.run_until_idle()
        await passes(env)

        await assert_healthy_completed(healthy)
        assert [r.run_id for r in await env.client.list_runs(status="pending")] == []
        assert len(await env.client.list_runs()) == HEALTHY
        for index in INDEXES.values():
            assert await store.client.zscore(store.keys.base(0) + index, "ghost") is None


async def test_a_run_whose_flow_name_is_not_utf8_is_listed_as_damaged_and_blocks_no_one(
    store: RedisStore,
) -> None:
    # No worker serves a flow of that name, so none claims the run (as for any
    # flow nobody serves): it stays pending, listed as damaged.
    async with FlowTestEnv(FakeClock(), store=store) as env:
        healthy, damaged = await start_batch(env)
        await _hset(store, damaged.run_id, "flow", b"tests.corruption.work\xc3")

        await env.run_until_idle()
        await passes(env)

        await assert_healthy_completed(healthy)
        rec = await env.client.get(damaged.run_id)
        assert rec.status is RunStatus.PENDING
        assert (
            rec.damage is not None and "field 'flow' holds bytes that are not UTF-8" in rec.damage
        )
        assert len(await env.client.list_runs()) == HEALTHY + 1


async def test_a_due_timer_of_a_damaged_waiting_run_fails_it_alone(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(), store=store) as env:
        waiting = await env.start(waits, 1, run_id="waiting")
        await env.run_until_idle()
        assert await waiting.status() is RunStatus.WAITING_FOR_SIGNAL
        healthy = [await env.start(work, i, run_id=f"healthy-{i}") for i in range(HEALTHY)]
        await store.client.hset(key(store, "run", "waiting"), "priority", "high")

        await env.advance(61)  # its wait's deadline: the timer fires on a damaged run

        await assert_healthy_completed(healthy)
        rec = await env.client.get("waiting")
        assert (rec.status, rec.reason) == (RunStatus.FAILED, "corrupt_record")
        assert rec.error is not None and "priority" in rec.error.message
        assert await store.client.zscore(store.keys.base(0) + "timers", "waiting") is None


async def test_an_expired_lease_of_a_damaged_run_fails_it_alone(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(), store=store) as env:
        held = await env.start(work, 0, run_id="held")
        # a worker that died holding it
        (claim,) = await store.claim("dead-worker", None, 1, env.clock.time(), 30.0)
        assert claim.run.run_id == "held"
        healthy = [await env.start(work, i, run_id=f"healthy-{i}") for i in range(HEALTHY)]
        await store.client.hset(key(store, "run", "held"), "created_at", "yesterday")

        await env.run_until_idle()
        await passes(env)

        await assert_healthy_completed(healthy)
        rec = await env.client.get(held.run_id)
        assert (rec.status, rec.reason) == (RunStatus.FAILED, "corrupt_record")


async def test_a_garbage_signal_payload_fails_the_run_within_bounded_passes(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(FakeClock(), store=store) as env:
        waiting = await env.start(waits, 1, run_id="waiting")
        await env.run_until_idle()
        healthy = [await env.start(work, i, run_id=f"healthy-{i}") for i in range(HEALTHY)]
        await store.client.rpush(mailbox(store, "waiting", "go"), "not json")
        await store.client.sadd(key(store, "mailboxes", "waiting"), "s:go")
        await env.client.signal("waiting", "go", 2)  # wakes it: it takes the garbage first

        await env.run_until_idle()
        await passes(env)

        await assert_healthy_completed(healthy)
        rec = await env.client.get(waiting.run_id)
        assert (rec.status, rec.reason) == (RunStatus.FAILED, "corrupt_record")
        assert rec.error is not None and key(store, "journal", "waiting") in rec.error.message


async def test_a_signal_payload_that_is_not_utf8_fails_the_run_at_once(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(), store=store) as env:
        await env.start(waits, 1, run_id="waiting")
        await env.run_until_idle()
        await store.client.rpush(mailbox(store, "waiting", "go"), b'"\xff"')
        await store.client.sadd(key(store, "mailboxes", "waiting"), "s:go")
        await env.client.signal("waiting", "go", 2)

        await env.run_until_idle()

        rec = await env.client.get("waiting")
        assert (rec.status, rec.reason) == (RunStatus.FAILED, "corrupt_record")
        assert rec.error is not None and "not UTF-8" in rec.error.message


# -- read paths ------------------------------------------------------------------------


async def test_list_runs_and_get_report_a_damaged_run_instead_of_raising(
    store: RedisStore,
) -> None:
    client = Client(store)
    for i in range(3):
        await client.start(work, i, run_id=f"r{i}")
    await store.client.hset(key(store, "run", "r1"), "created_at", "yesterday")
    await replace(store, key(store, "run", "r2"))

    listed = {r.run_id: r for r in await client.list_runs()}

    assert listed["r0"].damage is None and listed["r0"].status is RunStatus.PENDING
    assert listed["r1"].status is RunStatus.PENDING  # readable: as stored
    assert listed["r1"].damage is not None and "'created_at' is not a number" in listed["r1"].damage
    assert listed["r2"].status is RunStatus.FAILED  # nothing readable: failed, and says why
    assert listed["r2"].reason == "corrupt_record"
    assert listed["r2"].damage == f"{key(store, 'run', 'r2')}: holds a string, not a hash"
    assert (await client.get("r2")).damage == listed["r2"].damage
    # listed wherever an index lists it
    assert {r.run_id for r in await client.list_runs(status="pending")} == {"r0", "r1", "r2"}


async def test_json_fields_that_cannot_be_read_are_named_and_a_failed_run_says_why(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(FakeClock(), store=store) as env:
        handle = await env.start(work, 1, run_id="r1")
        await env.run_until_idle()
        await store.client.hset(
            key(store, "run", "r1"), mapping={"status": "failed", "error": "{", "versions": "[1"}
        )

        (rec,) = await env.client.list_runs()

        assert rec.damage is not None
        assert "field 'error' cannot be read" in rec.damage
        assert "field 'versions' cannot be read" in rec.damage
        assert rec.error is not None and rec.error.reason == "corrupt_record"
        with pytest.raises(RunFailed) as info:
            await handle.result(timeout=5)
        assert info.value.error.type == "sdk.errors:CorruptRecord"


async def test_events_and_checkpoints_of_a_damaged_log_raise_corrupt_record(
    store: RedisStore,
) -> None:
    client = Client(store)
    await client.start(work, 0, run_id="r1")
    await store.client.xadd(key(store, "events", "r1"), {"type": "run.started"})  # no `at`
    await store.client.xadd(key(store, "events", "r1"), {"type": "run.resumed", "at": "1.0"})

    with pytest.raises(CorruptRecord) as info:
        await client.events("r1")
    assert info.value.run_id == "r1" and info.value.key == key(store, "events", "r1")
    entries: Any = await store.client.xrange(key(store, "events", "r1"))
    first: str = entries[1][0]
    assert first in info.value.detail
    # the page after the damaged entry reads
    assert [e.type for e in await client.events("r1", cursor=first)] == ["run.resumed"]

    await replace(store, key(store, "checkpoints", "r1"))
    with pytest.raises(CorruptRecord) as cps:
        await client.checkpoints("r1")
    assert cps.value.key == key(store, "checkpoints", "r1")
    assert "holds a string, not a stream" in str(cps.value)


async def test_client_operations_on_a_damaged_run_raise_corrupt_record_and_write_nothing(
    store: RedisStore,
) -> None:
    # issue 8, finding 6: `signal` raised WRONGTYPE after storing the payload
    async with FlowTestEnv(FakeClock(), store=store) as env:
        await env.start(waits, 1, run_id="waiting")
        await env.run_until_idle()
        await replace(store, key(store, "waits", "waiting"))
        before = await store.client.xlen(key(store, "events", "waiting"))

        with pytest.raises(CorruptRecord) as info:
            await env.client.signal("waiting", "go", 2, dedup_id="d1")
        assert info.value.key == key(store, "waits", "waiting")
        assert await store.client.llen(mailbox(store, "waiting", "go")) == 0
        assert await store.client.exists(key(store, "dedup", "waiting")) == 0
        assert await store.client.xlen(key(store, "events", "waiting")) == before

        await store.client.hset(key(store, "run", "waiting"), "priority", "high")
        with pytest.raises(CorruptRecord, match="'priority'"):
            await env.client.cancel("waiting", reason="no")
        assert await env.client.handle("waiting").status() is RunStatus.WAITING_FOR_SIGNAL


async def test_a_damaged_run_can_be_deleted(store: RedisStore) -> None:
    client = Client(store)
    await client.start(work, 0, run_id="r1")
    await replace(store, key(store, "run", "r1"))

    await client.delete("r1")

    assert [k async for k in store.client.scan_iter(match=store.keys.pattern()) if "r1" in k] == []


# -- no half-done writes --------------------------------------------------------------------


async def test_a_script_given_bad_arguments_writes_nothing(store: RedisStore) -> None:
    new = NewRun("r1", "f", None, "[]", "h", "default", 99_999, None, 1.0)
    with pytest.raises(ValueError, match="priority"):
        await store.create_run(new)
    nan = NewRun("r2", "f", None, "[]", "h", "default", 0, None, float("nan"))
    with pytest.raises(ValueError, match="created_at"):
        await store.create_run(nan)
    with pytest.raises(ValueError, match="now"):
        await store.tick(float("inf"), 10, RECOVERY_ERROR)
    # (but the layout: the partition count the store's first script call records)
    assert [k async for k in store.client.scan_iter(match=store.keys.pattern())] == [
        store.keys.layout()
    ]


async def test_a_write_that_finds_damaged_keys_leaves_its_run_as_it_was(
    store: RedisStore,
) -> None:
    # a release whose priority cannot be computed with used to take the run off
    # its lease and then fail to queue it: running, with no lease and no queue entry
    client = Client(store)
    await client.start(work, 0, run_id="r1")
    (claim,) = await store.claim("w", None, 1, 100.0, 30.0)
    await store.client.hset(key(store, "run", "r1"), "priority", "high")
    leases = store.keys.base(0) + SUFFIX["leases"]

    with pytest.raises(CorruptData, match="priority"):
        await store.release("r1", claim.run.fence)

    assert await store.client.zscore(leases, "r1") == 130.0
    assert await store.client.hget(key(store, "run", "r1"), "fence") == str(claim.run.fence)

    await replace(store, key(store, "jseq", "r1"))
    journal = await store.client.hgetall(key(store, "journal", "r1"))
    with pytest.raises(CorruptData) as info:
        await store.record("r1", claim.run.fence, "add_one#1", '{"key":"add_one#1"}', now=101.0)
    assert info.value.key == key(store, "jseq", "r1")
    assert await store.client.hgetall(key(store, "journal", "r1")) == journal


# -- the repair pass ------------------------------------------------------------------------


async def repaired_events(client: Client, run_id: str) -> list[Any]:
    return [e.data for e in await client.events(run_id) if e.type == "run.repaired"]


async def test_the_repair_pass_queues_again_runs_that_no_index_reaches(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(FakeClock(), store=store) as env:
        claimed = await env.start(work, 1, run_id="claimed")
        queued = await env.start(work, 2, run_id="queued")
        (claim,) = await store.claim("w", None, 1, env.clock.time(), 30.0)
        assert claim.run.run_id == "claimed"
        # what half-done writes left: off every index that would run or wake them
        await store.client.zrem(store.keys.base(0) + SUFFIX["leases"], "claimed")
        await store.client.zrem(store.keys.base(0) + "q:default", "queued")

        result = await store.tick(env.clock.time(), 10, RECOVERY_ERROR)

        assert result.repaired == 2
        assert await repaired_events(env.client, "claimed") == [
            {"found": "running without a lease or a queue entry"}
        ]
        assert await repaired_events(env.client, "queued") == [
            {"found": "pending without a queue entry"}
        ]
        await env.run_until_idle()
        assert await claimed.result(timeout=5) == 3
        assert await queued.result(timeout=5) == 4


async def test_the_repair_pass_wakes_a_waiting_run_with_nothing_to_wake_it(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(FakeClock(), store=store) as env:
        waiting = await env.start(waits, 1, run_id="waiting")
        await env.run_until_idle()
        await store.client.zrem(store.keys.base(0) + SUFFIX["timers"], "waiting")
        await store.client.delete(key(store, "waits", "waiting"))

        await env.advance(1)  # the next pass

        assert await repaired_events(env.client, "waiting") == [
            {"found": "waiting_for_signal without a timer or a wait"}
        ]
        assert await waiting.status() is RunStatus.WAITING_FOR_SIGNAL  # parked again, properly
        await env.client.signal("waiting", "go", 2)
        await env.run_until_idle()
        assert await waiting.result(timeout=5) == 3


async def test_the_repair_pass_is_bounded_and_walks_every_run_over_passes(
    store: RedisStore,
) -> None:
    client = Client(store)
    for i in range(25):
        await client.start(work, i, run_id=f"r{i:02}")
    await store.client.delete(store.keys.base(0) + "q:default")  # all 25 stranded

    seen = []
    for second in range(4):
        seen.append((await store.tick(100.0 + second, 10, RECOVERY_ERROR, limit=10)).repaired)
    # at most `limit` runs a pass, once a second (a pass in the same second does nothing)
    assert (await store.tick(103.5, 10, RECOVERY_ERROR, limit=10)).repaired == 0
    assert seen == [10, 10, 5, 0]
    assert await store.client.zcard(store.keys.base(0) + "q:default") == 25


async def test_the_repair_pass_reports_damaged_runs_instead_of_moving_them(
    store: RedisStore,
) -> None:
    client = Client(store)
    await client.start(work, 0, run_id="r1")
    await store.client.delete(store.keys.base(0) + "q:default")
    await store.client.hset(key(store, "run", "r1"), "priority", "high")

    result = await store.tick(100.0, 10, RECOVERY_ERROR)

    assert result.repaired == 0
    (damaged,) = result.damaged
    assert (damaged.run_id, damaged.key, damaged.fence) == ("r1", key(store, "run", "r1"), None)
    assert "priority" in damaged.detail
    assert await store.quarantine("r1", None, 101.0, RECOVERY_ERROR)
    rec = await client.get("r1")
    assert (rec.status, rec.reason) == (RunStatus.FAILED, "corrupt_record")
    assert not await store.quarantine("r1", None, 102.0, RECOVERY_ERROR)  # once


# -- the worker loop -------------------------------------------------------------------------


async def test_the_worker_tells_a_store_outage_from_other_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="steadyflow.worker")
    store = open_store("memory://")
    errors: list[Exception] = [
        redis.exceptions.ConnectionError("simulated outage"),
        ValueError("simulated bug"),
    ]
    real_poll = store.poll
    polled = asyncio.Event()

    async def poll(*args: Any, **kwargs: Any) -> tuple[list[Any], TickResult]:
        if errors:
            raise errors.pop(0)
        polled.set()
        return await real_poll(*args, **kwargs)

    store.poll = poll  # type: ignore[method-assign]
    worker = Worker(store, [work])
    try:
        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(polled.wait(), 10)
        await worker.stop()
        await task
    finally:
        await store.close()

    messages = [r.getMessage() for r in caplog.records if r.name == "steadyflow.worker"]
    assert any(m.startswith("store unavailable") for m in messages)
    assert any("ValueError, not a store outage" in m for m in messages)


async def test_an_idle_worker_looks_at_leases_at_least_once_a_lease_ttl() -> None:
    # issue 8, finding 9: an idle worker blocked up to 5 s without looking, so a
    # dead worker's run was recovered up to 5 s after its lease expired
    store = open_store("memory://")
    timeouts: list[float] = []
    real_wait = store.wait_ready
    worker = Worker(store, [work], lease_ttl=2.0)

    async def wait_ready(queues: Any, timeout: float, **kwargs: Any) -> bool:
        timeouts.append(timeout)
        if len(timeouts) >= 3:
            await worker.stop()
        return await real_wait(queues, 0.01)

    store.wait_ready = wait_ready  # type: ignore[method-assign]
    try:
        await asyncio.wait_for(worker.run(), 30)
    finally:
        await store.close()

    assert len(timeouts) >= 3 and all(t <= 2.0 for t in timeouts)


# -- what a client sees of a damaged run ------------------------------------------------


async def test_the_result_of_a_completed_run_whose_result_is_damaged_names_the_key(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(FakeClock(), store=store) as env:
        handle = await env.start(work, 1, run_id="done")
        await env.run_until_idle()
        assert await handle.result() == 3
        await _hset(store, "done", "result", "{not json")
        with pytest.raises(CorruptRecord) as info:
            await handle.result(timeout=5)
        assert info.value.key == key(store, "run", "done")
        assert "field 'result' cannot be read" in info.value.detail
        assert (await env.client.get("done")).damage is not None  # read, and flagged


async def test_starting_an_id_taken_by_a_damaged_run_names_the_key(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(), store=store) as env:
        await replace(store, key(store, "run", "taken"))
        with pytest.raises(CorruptRecord) as info:
            await env.start(work, 1, run_id="taken")
        assert info.value.key == key(store, "run", "taken")
        assert await store.client.get(key(store, "run", "taken")) == "garbage"  # left as found


async def test_the_outbox_loop_tells_an_outage_from_another_fault(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from sdk.worker._dispatch import Dispatcher

    async with FlowTestEnv(FakeClock()) as env:
        dispatcher = Dispatcher(env.store, env.clock, lambda: {"mail": None}, concurrency=1,  # type: ignore[dict-item]
                                lease_ttl=30.0)  # fmt: skip
        stop = asyncio.Event()
        calls = 0

        async def poll() -> tuple[int, float | None]:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise ValueError("a bug, not an outage")
            if calls == 2:
                raise redis.exceptions.ConnectionError("refused")
            stop.set()
            return 0, None

        dispatcher.poll = poll  # type: ignore[method-assign]
        with caplog.at_level(logging.ERROR, "steadyflow"):
            await asyncio.wait_for(dispatcher.serve(stop), 10)
    messages = [r.getMessage() for r in caplog.records]
    assert any("outbox pass failed (ValueError, not a store outage)" in m for m in messages)
    assert any("outbox: store unavailable" in m for m in messages)


@step
async def notify(x: int) -> int:
    from sdk import emit

    emit("tests.corruption.mail", {"x": x})
    return x


@flow(name="tests.corruption.notifies")
async def notifies(x: int) -> int:
    return await notify(x)


@pytest.mark.parametrize("damage", ["intent field missing", "intent of another type", "ids"])
async def test_a_damaged_intent_names_its_key_to_the_reader(store: RedisStore, damage: str) -> None:
    async with FlowTestEnv(FakeClock(), store=store, channels=[]) as env:
        handle = await env.start(notifies, 1, run_id="mailer")
        await env.run_until_idle()
        assert await handle.result() == 1
        assert len(await env.client.intents("mailer")) == 1
        ids = key(store, "intents", "mailer")
        (iid,) = cast("set[str]", await store.client.smembers(ids))
        one = store.keys.intent(store.keys.partition("mailer"), iid)
        if damage == "intent field missing":
            await store.client.hdel(one, "channel")
        elif damage == "intent of another type":
            await replace(store, one)
        else:
            await store.client.sadd(ids, "not-a-number")
        with pytest.raises(CorruptRecord) as info:
            await env.client.intents("mailer")
        assert info.value.key == (ids if damage == "ids" else one)
        assert await handle.result() == 1  # the run itself still reads
