"""examples/orders.py: children per line, a payment webhook routed by order id."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from examples import orders as orders_example
from examples.orders import Line, OrderOutcome, on_payment_webhook, order, warehouse
from sdk import RunStatus, Worker
from sdk.errors import RunCanceled
from stores.redis import RedisStore
from testing import FlowTestEnv

STOCK = {"apple": 10, "pear": 5, "plum": 0}


@pytest.fixture(autouse=True, name="_stock")
def stock_fixture() -> Iterator[None]:
    warehouse.reset(STOCK)
    yield
    warehouse.reset(STOCK)


async def place(env: FlowTestEnv, order_id: str, *lines: Line) -> str:
    handle = await env.start(order, order_id, list(lines), run_id=f"order-{order_id}")
    await env.run_until_idle()  # children reserved; the order waits for its payment
    return handle.run_id


async def test_a_paid_order_ships_and_a_retried_webhook_counts_once(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        run_id = await place(env, "A-1", Line("apple", 2), Line("pear", 1))
        assert await env.client.handle(run_id).status() is RunStatus.WAITING_FOR_SIGNAL
        assert warehouse.stock == {"apple": 8, "pear": 4, "plum": 0}
        kids = await env.client.list_runs(parent_run_id=run_id)
        assert len(kids) == 2 and {k.flow for k in kids} == {"examples.orders.reserve_line"}

        body = {"order_id": "A-1", "cents": 4200}
        assert await on_payment_webhook(env.client, body, "dlv-1") == [run_id]
        assert await on_payment_webhook(env.client, body, "dlv-1") == []  # provider retry
        # another order's payment reaches nobody here
        assert await on_payment_webhook(env.client, {"order_id": "Z-9", "cents": 1}, "d2") == []
        await env.run_until_idle()
        outcome = await env.client.handle(run_id).result()
        assert outcome == OrderOutcome(
            "A-1", "shipped", ["hold-1", "hold-2"], tracking="TRACK-A-1", note="paid 4200"
        )
        assert warehouse.shipped == ["A-1"] and warehouse.released == []


async def test_a_line_out_of_stock_rejects_the_order_and_releases_the_rest(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store) as env:
        run_id = await place(env, "B-2", Line("apple", 3), Line("plum", 1))
        outcome = await env.client.handle(run_id).result()
        assert outcome.status == "rejected"
        assert outcome.note == "plum: 0 left, 1 asked"
        assert warehouse.released == ["hold-1"] and warehouse.stock == STOCK


async def test_no_payment_in_time_releases_the_reservations(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        run_id = await place(env, "C-3", Line("pear", 5))
        assert warehouse.stock["pear"] == 0
        await env.advance(3600)
        outcome = await env.client.handle(run_id).result()
        assert outcome.status == "payment_timed_out"
        assert warehouse.stock == STOCK


async def test_canceling_a_waiting_order_releases_its_reservations(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        run_id = await place(env, "D-4", Line("apple", 1))
        await env.client.cancel(run_id, reason="customer changed their mind")
        await env.run_until_idle()
        with pytest.raises(RunCanceled):
            await env.client.handle(run_id).result()
        assert warehouse.released == ["hold-1"] and warehouse.stock == STOCK


@pytest.mark.redis
async def test_the_command_line_places_pays_and_prints_the_outcome(
    redis_url: str, key_prefix: str, real_store: RedisStore, capsys: pytest.CaptureFixture[str]
) -> None:
    worker = Worker(real_store, [order, orders_example.reserve_line])
    serving = asyncio.create_task(worker.run())
    try:
        code = await orders_example.main(
            ["--store", redis_url, "--prefix", key_prefix, "--order", "CLI-7",
             "--items", "apple:2,pear:1", "--pay", "--timeout", "30"]
        )  # fmt: skip
    finally:
        await worker.stop()
        await serving
    assert code == 0
    out = capsys.readouterr().out
    assert "status='shipped'" in out and "tracking='TRACK-CLI-7'" in out
