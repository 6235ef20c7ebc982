"""Creating, reading and listing runs; the per-status indexes."""

from __future__ import annotations

import pytest

from sdk._types import RunStatus
from sdk.errors import IdempotencyConflict
from stores.redis import RedisStore
from tests.conformance._support import (
    OWNER,
    T0,
    TTL,
    assert_indexed_once,
    claim_ids,
    new_run,
    status_index,
    status_of,
    step_record,
)


async def test_create_run_creates_a_pending_run(store: RedisStore) -> None:
    outcome = await store.create_run(new_run("r1", tenant_id="acme", priority=7, queue="mail"))

    assert outcome.created is True
    assert outcome.status is RunStatus.PENDING
    stored = await store.get_run("r1")
    assert stored is not None
    rec = stored.record
    assert (rec.run_id, rec.flow, rec.status) == ("r1", "tests.flow", RunStatus.PENDING)
    assert (rec.queue, rec.priority, rec.tenant_id) == ("mail", 7, "acme")
    assert rec.created_at.timestamp() == T0
    assert rec.started_at is None and rec.finished_at is None
    assert stored.fence == 0


async def test_create_run_again_with_same_args_does_not_create(store: RedisStore) -> None:
    await store.create_run(new_run("r1"))
    await claim_ids(store)  # now running: the second create must report, not reset

    outcome = await store.create_run(new_run("r1", created_at=T0 + 5))

    assert outcome.created is False
    assert outcome.status is RunStatus.RUNNING
    stored = await store.get_run("r1")
    assert stored is not None and stored.record.created_at.timestamp() == T0
    assert await claim_ids(store) == []  # not queued a second time


async def test_create_run_with_other_args_raises_idempotency_conflict(store: RedisStore) -> None:
    await store.create_run(new_run("r1", args='{"args":[1],"kwargs":{},"types":{}}'))

    with pytest.raises(IdempotencyConflict):
        await store.create_run(new_run("r1", args='{"args":[2],"kwargs":{},"types":{}}'))

    stored = await store.get_run("r1")
    assert stored is not None and stored.args == '{"args":[1],"kwargs":{},"types":{}}'


async def test_create_run_with_other_flow_raises_idempotency_conflict(store: RedisStore) -> None:
    await store.create_run(new_run("r1", flow="a.flow"))

    with pytest.raises(IdempotencyConflict):
        await store.create_run(new_run("r1", flow="b.flow"))


async def test_get_run_of_unknown_id_is_none(store: RedisStore) -> None:
    assert await store.get_run("nope") is None


async def test_args_are_stored_verbatim(store: RedisStore) -> None:
    args = (
        '{"args":[12345678901234567890,0.30000000000000004,[],{}],"kwargs":{"x":null},"types":{}}'
    )
    await store.create_run(new_run("r1", args=args))

    stored = await store.get_run("r1")
    assert stored is not None and stored.args == args


async def test_list_runs_is_newest_first(store: RedisStore) -> None:
    for i in range(5):
        await store.create_run(new_run(f"r{i}", created_at=T0 + i))

    listed = await store.list_runs(None, None, 100)

    assert [s.record.run_id for s in listed] == ["r4", "r3", "r2", "r1", "r0"]
    assert [s.record.run_id for s in await store.list_runs(None, None, 2)] == ["r4", "r3"]


async def test_list_runs_filters_by_flow_and_status(store: RedisStore) -> None:
    await store.create_run(new_run("a1", flow="flow.a", created_at=T0))
    await store.create_run(new_run("b1", flow="flow.b", created_at=T0 + 1))
    await store.create_run(new_run("a2", flow="flow.a", created_at=T0 + 2))
    claims = await store.claim(OWNER, None, 1, T0, TTL)  # takes a1 (FIFO)
    assert claims[0].run.record.run_id == "a1"

    by_flow = await store.list_runs(None, "flow.a", 100)
    pending = await store.list_runs(RunStatus.PENDING, None, 100)
    pending_a = await store.list_runs(RunStatus.PENDING, "flow.a", 100)
    running = await store.list_runs(RunStatus.RUNNING, None, 100)

    assert [s.record.run_id for s in by_flow] == ["a2", "a1"]
    assert [s.record.run_id for s in pending] == ["a2", "b1"]
    assert [s.record.run_id for s in pending_a] == ["a2"]
    assert [s.record.run_id for s in running] == ["a1"]
    assert await store.list_runs(RunStatus.COMPLETED, None, 100) == []


async def test_list_runs_pages_past_one_hundred(store: RedisStore) -> None:
    for i in range(130):
        await store.create_run(new_run(f"r{i:03}", created_at=T0 + i))

    listed = await store.list_runs(None, None, 120)

    assert [s.record.run_id for s in listed] == [f"r{i:03}" for i in range(129, 9, -1)]


async def test_status_index_follows_every_transition(store: RedisStore) -> None:
    run_id = "r1"
    await store.create_run(new_run(run_id))
    await assert_indexed_once(store, run_id)  # pending

    (claim,) = await store.claim(OWNER, None, 1, T0, TTL)
    await assert_indexed_once(store, run_id)  # running

    assert await store.suspend(
        run_id, claim.run.fence, T0, None, RunStatus.WAITING_FOR_HUMAN, [], ["h:ok"]
    )
    assert await status_of(store, run_id) is RunStatus.WAITING_FOR_HUMAN
    await assert_indexed_once(store, run_id)

    assert await store.signal(run_id, "h:ok", "true", None)
    assert await status_of(store, run_id) is RunStatus.RUNNING
    await assert_indexed_once(store, run_id)

    (claim,) = await store.claim(OWNER, None, 1, T0 + 1, TTL)
    await store.tick(T0 + 1 + TTL, 10, "{}")  # lease expired: replaying
    assert await status_of(store, run_id) is RunStatus.REPLAYING
    await assert_indexed_once(store, run_id)

    (claim,) = await store.claim(OWNER, None, 1, T0 + 20, TTL)
    await store.record(run_id, claim.run.fence, "a#1", step_record("a#1", 0, 1))
    await store.finish(run_id, claim.run.fence, RunStatus.FAILED, T0 + 21, {"reason": "x"})
    assert await status_of(store, run_id) is RunStatus.FAILED
    await assert_indexed_once(store, run_id)

    await store.resume(run_id, "a#1")
    assert await status_of(store, run_id) is RunStatus.RUNNING
    await assert_indexed_once(store, run_id)

    await store.cancel(run_id, "enough", T0 + 30)
    assert await status_of(store, run_id) is RunStatus.CANCELED
    await assert_indexed_once(store, run_id)


async def test_status_index_holds_every_run_of_many_once(store: RedisStore) -> None:
    for i in range(6):
        await store.create_run(new_run(f"r{i}", created_at=T0 + i))
    claims = await store.claim(OWNER, None, 4, T0, TTL)  # r0..r3 running
    await store.finish("r0", claims[0].run.fence, RunStatus.COMPLETED, T0, {"result": "1"})
    await store.cancel("r4", "no", T0)

    index = await status_index(store)

    assert index["pending"] == {"r5"}
    assert index["running"] == {"r1", "r2", "r3"}
    assert index["completed"] == {"r0"}
    assert index["canceled"] == {"r4"}
    assert sum(len(ids) for ids in index.values()) == 6
