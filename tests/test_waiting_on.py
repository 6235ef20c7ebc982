"""`RunRecord.waiting_on`: what a waiting run waits for, as its flow wrote it, written
when it parks and dropped when it leaves the waiting status; the `list_runs` filter."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest

from sdk import (
    RetryPolicy,
    RunStatus,
    WaitingOn,
    WaitKind,
    flow,
    run_child,
    sleep,
    step,
    wait_for,
    wait_for_event,
)
from sdk._core._types import MAX_WAITING_ON
from sdk.errors import InvalidArgument
from stores.redis import RedisStore
from testing import FakeClock, FlowTestEnv

START = datetime(2030, 3, 1, 9, 0, tzinfo=UTC)
FAILS: list[int] = []


def at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


@flow(name="tests.waiting_on.kid")
async def kid(n: int) -> int:
    await wait_for("kid-go")
    return n


@step(retry=RetryPolicy(max_attempts=3, initial_interval=30.0))
async def flaky() -> str:
    FAILS.append(1)
    if len(FAILS) == 1:
        raise ConnectionError("down")
    return "ok"


@flow(name="tests.waiting_on.order")
async def order(order_id: str) -> str:
    await flaky()
    await wait_for("manager-approval", human=True, timeout=3600)
    pickup = asyncio.ensure_future(
        wait_for_event("carrier.pickup", match={"order_id": order_id}, timeout=600)
    )
    nap = asyncio.ensure_future(sleep(60))
    await asyncio.wait([pickup, nap], return_when=asyncio.FIRST_COMPLETED)
    await asyncio.gather(run_child(kid, 1), run_child(kid, 2))
    await wait_for("go")
    return order_id


@flow(name="tests.waiting_on.fan_out")
async def fan_out(n: int) -> int:
    await asyncio.gather(*(run_child(kid, i) for i in range(n)), wait_for("stop", timeout=5))
    return n


async def test_a_waiting_run_says_what_it_waits_for_as_the_flow_wrote_it(
    store: RedisStore,
) -> None:
    FAILS.clear()
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        await env.start(order, "o-1", run_id="order-1")
        await env.run_until_idle()
        get = env.client.get

        async def waiting() -> tuple[WaitingOn, ...]:
            return (await get("order-1")).waiting_on

        assert await waiting() == (WaitingOn(WaitKind.RETRY, "flaky#1", at(30)),)
        await env.advance(30)
        assert (await get("order-1")).status is RunStatus.WAITING_FOR_HUMAN
        assert await waiting() == (WaitingOn(WaitKind.HUMAN, "manager-approval", at(3630)),)

        await env.client.approve("order-1", "manager-approval", actor="maria")
        assert await waiting() == ()  # it left the waiting status: nothing is kept
        await env.run_until_idle()
        # two racing waits: both, with their deadlines and the event's match
        assert await waiting() == (
            WaitingOn(WaitKind.EVENT, "carrier.pickup", at(630), {"order_id": "o-1"}),
            WaitingOn(WaitKind.SLEEP, None, at(90)),
        )
        await env.advance(60)
        kids = sorted(r.run_id for r in await env.client.list_runs(parent_run_id="order-1"))
        assert await waiting() == tuple(WaitingOn(WaitKind.CHILD, k) for k in kids)
        for k in kids:
            await env.client.signal(k, "kid-go")
        await env.run_until_idle()
        assert await waiting() == (WaitingOn(WaitKind.SIGNAL, "go"),)
        export = json.loads(json.dumps(await env.client.export("order-1")))
        assert export["record"]["waiting_on"] == [{"kind": "signal", "name": "go"}]
        await env.client.signal("order-1", "go")
        await env.run_until_idle()
        assert (await get("order-1")).status is RunStatus.COMPLETED
        assert await waiting() == ()


async def test_list_runs_filters_by_what_runs_wait_on(store: RedisStore) -> None:
    FAILS.clear()
    FAILS.append(1)  # flaky succeeds at once
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        await env.start(order, "o-1", run_id="order-1")
        await env.start(order, "o-2", run_id="order-2")
        await env.run_until_idle()
        await env.client.approve("order-2", "manager-approval", actor="maria")
        await env.run_until_idle()
        client = env.client

        async def ids(**filters: object) -> list[str]:
            return sorted(r.run_id for r in await client.list_runs(**filters))  # type: ignore[arg-type]

        assert await ids(waiting_on="human") == ["order-1"]
        assert await ids(waiting_on=WaitKind.EVENT) == ["order-2"]
        assert await ids(waiting_on="sleep") == ["order-2"]
        assert await ids(waiting_on="sleep", status="waiting_for_human") == []
        assert await ids(waiting_on="child") == []
        assert await ids(waiting_on="human", flow=order, limit=1) == ["order-1"]
        with pytest.raises(InvalidArgument, match="waiting_on must be one of human, signal"):
            await client.list_runs(waiting_on="approval")


async def test_a_run_waiting_on_many_children_keeps_a_bounded_list_with_every_kind() -> None:
    n = MAX_WAITING_ON + 5
    async with FlowTestEnv(FakeClock(START)) as env:
        await env.start(fan_out, n, run_id="fan")
        await env.run_until_idle()
        rec = await env.client.get("fan")

    assert len(rec.waiting_on) == MAX_WAITING_ON
    assert {w.kind for w in rec.waiting_on} == {WaitKind.CHILD, WaitKind.SIGNAL}
    assert WaitingOn(WaitKind.SIGNAL, "stop", at(5)) in rec.waiting_on


def test_a_waiting_on_reads_as_a_person_would_say_it() -> None:
    assert WaitingOn(WaitKind.HUMAN, "refund", at(60)).describe() == (
        "human approval 'refund' until 2030-03-01T09:01:00Z"
    )
    assert WaitingOn(WaitKind.EVENT, "paid", None, {"order_id": "o-1"}).describe() == (
        "event 'paid' where order_id='o-1'"
    )
    assert WaitingOn(WaitKind.SLEEP, None, at(0)).describe() == "sleep at 2030-03-01T09:00:00Z"
    assert WaitingOn("update", "resize").describe() == "update 'resize'"  # a newer kind
