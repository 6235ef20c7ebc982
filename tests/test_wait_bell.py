"""A blocking wait ends at its due time, whenever Redis would end it (`StoreCore.blpop_until`).

Redis ends a BLPOP's timeout at its next cron tick: with the default ``hz 10``
up to 100 ms late, and a worker waiting for a timer (a sleep, a retry's
backoff, an outbox retry) would fire it that late. The store ends the wait
itself, with a token on a list of the wait's own (its bell). Pinned here with
Redis's own timeout made a minute long: a wait, and a flow's sleep, still end
on time (the bounds below are seconds, against that minute), a token that came
meanwhile still counts, and no bell is left behind.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sdk import Client, Worker, flow, sleep
from stores import _storecore
from stores.redis import RedisStore


@pytest.fixture(autouse=True)
def redis_times_out_late(monkeypatch: pytest.MonkeyPatch) -> None:
    """Redis's own timeout of every blocking wait: a minute, whatever was asked."""
    monkeypatch.setattr(_storecore, "block_seconds", lambda timeout: 60.0)


async def bells(store: RedisStore) -> list[Any]:
    return [k async for k in store.client.scan_iter(match=store.keys.bell("*"))]


async def test_a_wait_with_nothing_coming_ends_at_its_timeout(store: RedisStore) -> None:
    assert await asyncio.wait_for(store.wait_ready(None, 0.05), timeout=10) is False
    assert await asyncio.wait_for(store.wait_intents(["mail"], 0.05), timeout=10) is False
    assert await bells(store) == []


async def test_a_token_that_comes_first_is_taken(store: RedisStore) -> None:
    await store.client.rpush(store.keys.wake(0, None), "1")

    assert await asyncio.wait_for(store.wait_ready(None, 5.0), timeout=10) is True
    assert await store.client.llen(store.keys.wake(0, None)) == 0
    assert await bells(store) == []


async def test_a_token_that_comes_with_the_bell_wins_and_the_bell_is_deleted(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race: a wake-up token lands just before the bell rings. The wait
    # takes the token (True), and the bell's token, left in its list, is deleted.
    ring = store.client.lpush

    async def token_then_bell(key: str, *values: Any) -> Any:
        await store.client.rpush(store.keys.wake(0, None), "1")
        await asyncio.sleep(0.05)  # the blocked BLPOP takes it
        return await ring(key, *values)

    monkeypatch.setattr(store.client, "lpush", token_then_bell)

    assert await asyncio.wait_for(store.wait_ready(None, 0.05), timeout=10) is True
    assert await bells(store) == []


async def test_a_cancelled_wait_leaves_no_bell(store: RedisStore) -> None:
    waiting = asyncio.ensure_future(store.wait_ready(None, 5.0))
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting

    assert await bells(store) == []
    # and the store waits again as before
    assert await asyncio.wait_for(store.wait_ready(None, 0.01), timeout=10) is False


@flow(name="tests.bell.naps")
async def naps(n: int) -> int:
    for _ in range(n):
        await sleep(0.05)
    return n


async def test_a_flows_sleeps_end_on_time(store: RedisStore) -> None:
    worker = Worker(store, [naps])
    serving = asyncio.create_task(worker.run())
    try:
        handle = await Client(store).start(naps, 3)
        assert await handle.result(timeout=20) == 3  # each sleep waited a minute without the bell
    finally:
        await worker.stop()
        await asyncio.wait_for(serving, timeout=20)
    assert await bells(store) == []
