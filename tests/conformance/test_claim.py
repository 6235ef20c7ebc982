"""Claiming: priority order, FIFO, queue filters, journals, no double claim."""

from __future__ import annotations

import asyncio

from sdk._types import RunStatus
from stores.redis import RedisStore
from tests.conformance._support import (
    OWNER,
    T0,
    TTL,
    claim_ids,
    new_run,
    start_and_claim,
    status_of,
    step_record,
)


async def test_claim_of_empty_store_returns_nothing(store: RedisStore) -> None:
    assert await store.claim(OWNER, None, 10, T0, TTL) == []
    assert await store.claim(OWNER, ["default"], 10, T0, TTL) == []


async def test_claim_takes_lower_priority_number_first(store: RedisStore) -> None:
    for run_id, prio in [("p5", 5), ("p-4095", -4095), ("p0", 0), ("p4095", 4095), ("p-1", -1)]:
        await store.create_run(new_run(run_id, priority=prio))

    assert await claim_ids(store) == ["p-4095", "p-1", "p0", "p5", "p4095"]


async def test_claim_is_fifo_within_a_priority_across_queues(store: RedisStore) -> None:
    # Interleave three queues and two priorities; within a priority, creation order wins.
    plan = [("a1", "qa", 1), ("b1", "qb", 0), ("c1", "qc", 1), ("a2", "qa", 0),
            ("b2", "qb", 1), ("c2", "qc", 0), ("a3", "qa", 0)]  # fmt: skip
    for i, (run_id, queue, prio) in enumerate(plan):
        await store.create_run(new_run(run_id, queue=queue, priority=prio, created_at=T0 + i))

    assert await claim_ids(store) == ["b1", "a2", "c2", "a3", "a1", "c1", "b2"]


async def test_claim_one_at_a_time_keeps_the_order(store: RedisStore) -> None:
    for i in range(4):
        await store.create_run(new_run(f"r{i}", queue=f"q{i % 2}"))

    taken = [await claim_ids(store, limit=1) for _ in range(5)]

    assert taken == [["r0"], ["r1"], ["r2"], ["r3"], []]


async def test_claim_with_queue_filter_takes_only_those_queues(store: RedisStore) -> None:
    await store.create_run(new_run("a1", queue="qa"))
    await store.create_run(new_run("b1", queue="qb"))
    await store.create_run(new_run("c1", queue="qc"))
    await store.create_run(new_run("b2", queue="qb", priority=-1))

    assert await claim_ids(store, queues=["qb"]) == ["b2", "b1"]
    assert await claim_ids(store, queues=["qx"]) == []
    assert await claim_ids(store, queues=["qc", "qa"]) == ["a1", "c1"]


async def test_claim_respects_the_limit(store: RedisStore) -> None:
    for i in range(5):
        await store.create_run(new_run(f"r{i}"))

    assert await claim_ids(store, limit=2) == ["r0", "r1"]
    assert await claim_ids(store, limit=2) == ["r2", "r3"]
    assert await claim_ids(store, limit=2) == ["r4"]


async def test_claim_sets_lease_fence_and_start_time(store: RedisStore) -> None:
    await store.create_run(new_run("r1"))

    (claim,) = await store.claim(OWNER, None, 1, T0 + 3, TTL)

    rec = claim.run.record
    assert rec.status is RunStatus.RUNNING
    assert rec.started_at is not None and rec.started_at.timestamp() == T0 + 3
    assert claim.run.fence == 1
    assert claim.journal == {}
    raw = await store.client.hgetall(store.keys.run("r1"))
    assert raw["lease_owner"] == OWNER
    assert float(raw["lease_exp"]) == T0 + 3 + TTL


async def test_claim_returns_the_whole_journal(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")
    records = {f"s#{i}": step_record(f"s#{i}", i - 1, {"i": i}) for i in range(1, 51)}
    for key, rec in records.items():
        await store.record("r1", claim.run.fence, key, rec)
    await store.release("r1", claim.run.fence)

    (again,) = await store.claim("worker-b", None, 1, T0 + 1, TTL)

    assert again.run.record.run_id == "r1"
    assert again.journal == records
    assert again.run.fence > claim.run.fence


async def test_claim_takes_no_run_twice(store: RedisStore) -> None:
    for i in range(20):
        await store.create_run(new_run(f"r{i:02}"))

    batches = await asyncio.gather(*(claim_ids(store, owner=f"w{n}", limit=7) for n in range(4)))

    taken = [run_id for batch in batches for run_id in batch]
    assert sorted(taken) == [f"r{i:02}" for i in range(20)]
    assert await claim_ids(store) == []


async def test_claimed_run_is_not_claimable_while_leased(store: RedisStore) -> None:
    await start_and_claim(store, "r1")

    assert await claim_ids(store, now=T0 + TTL - 1) == []
    assert await status_of(store, "r1") is RunStatus.RUNNING


async def test_claim_skips_a_run_canceled_while_queued(store: RedisStore) -> None:
    await store.create_run(new_run("r1"))
    await store.create_run(new_run("r2"))
    await store.cancel("r1", "changed my mind", T0)

    assert await claim_ids(store) == ["r2"]
    assert await status_of(store, "r1") is RunStatus.CANCELED


async def test_claim_names_the_mailboxes_that_hold_signals(store: RedisStore) -> None:
    await store.create_run(new_run("with-mail", created_at=T0))
    await store.create_run(new_run("no-mail", created_at=T0 + 1))
    await store.signal("with-mail", "s:go", '"x"', None)
    await store.signal("with-mail", "h:ok", '"y"', None)
    claims = {c.run.record.run_id: c for c in await store.claim(OWNER, None, 2, T0, TTL)}
    assert claims["with-mail"].mail == {"s:go", "h:ok"}
    assert claims["no-mail"].mail == frozenset()


async def test_claim_with_flows_takes_only_runs_of_those_flows(store: RedisStore) -> None:
    await store.create_run(new_run("other-first", flow="tests.other", priority=-5, created_at=T0))
    await store.create_run(new_run("mine", flow="tests.mine", priority=0, created_at=T0 + 1))
    claims = await store.claim(OWNER, None, 10, T0, TTL, flows=["tests.mine"])
    assert [c.run.record.run_id for c in claims] == ["mine"]
    # the other flow's run is still queued, first in line for a worker that serves it
    claims = await store.claim(OWNER, None, 10, T0, TTL, flows=["tests.other", "tests.mine"])
    assert [c.run.record.run_id for c in claims] == ["other-first"]


async def test_claim_without_flows_takes_any_flow(store: RedisStore) -> None:
    await store.create_run(new_run("a", flow="tests.a", created_at=T0))
    await store.create_run(new_run("b", flow="tests.b", created_at=T0 + 1))
    assert await claim_ids(store) == ["a", "b"]
