"""A run whose flow waits only for what ends by itself soon is waited for in place,
not parked (`sdk.engine._waits.holds`): a sleep, an asyncio timer or a step's retry time
due within the worker's ``inline_backoff_max``, on the real clock and on a fake one alike.

Parking writes a ``waiting_for_signal`` checkpoint; waiting in place writes none,
so the checkpoints tell the two apart. The process test (SIGKILL while a sleep
is waited in place) is in tests/test_crash.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sdk import Client, RunStatus, Worker, flow, sleep, step, wait_for
from sdk.errors import RunCanceled, WaitTimeout
from sdk.store import Store
from testing import FakeClock
from tests.crashflows import until

WAKE = 5.0  # generous bound on in-process hand-offs; nothing measures speed

DONE: list[str] = []  # the step bodies that ran, in order


@pytest.fixture(autouse=True)
def _fresh() -> None:
    DONE.clear()


@step(name="tests.holding.note")
async def note(label: str) -> str:
    DONE.append(label)
    return label


@flow(name="tests.holding.naps")
async def naps(seconds: float) -> str:
    await note("before")
    await sleep(seconds)
    return await note("after")


@flow(name="tests.holding.timer")
async def timer(seconds: float) -> str:
    await note("before")
    await asyncio.sleep(seconds)  # an asyncio timer: durable like `sleep`
    return await note("after")


@flow(name="tests.holding.waits")
async def waits(seconds: float) -> str:
    try:
        return str(await wait_for("go", timeout=seconds))
    except WaitTimeout:
        return "timed out"


async def kinds(client: Client, run_id: str) -> list[str]:
    return [c.kind.value for c in await client.checkpoints(run_id)]


@pytest.mark.parametrize("waiting", [naps, timer], ids=["sleep", "asyncio.sleep"])
async def test_a_short_sleep_is_waited_in_place(store: Store, waiting: Any) -> None:
    client = Client(store)
    handle = await client.start(waiting, 0.05, run_id="short")
    await Worker(store, name="w").run_until_idle()  # inline_backoff_max: 1 s
    assert await handle.result(timeout=WAKE) == "after"
    assert DONE == ["before", "after"]
    assert "waiting_for_signal" not in await kinds(client, "short")  # never parked


async def test_a_sleep_longer_than_inline_backoff_max_parks(store: Store) -> None:
    client = Client(store)
    handle = await client.start(naps, 0.05, run_id="long")
    worker = Worker(store, name="w", inline_backoff_max=0.01)
    await worker.run_until_idle()
    assert "waiting_for_signal" in await kinds(client, "long")
    await asyncio.sleep(0.06)
    await worker.run_until_idle()
    assert await handle.result(timeout=WAKE) == "after"


async def test_a_wait_for_a_signal_parks_however_soon_its_timeout(store: Store) -> None:
    # A signal can end it: only a parked run's mailboxes are looked at.
    client = Client(store)
    handle = await client.start(waits, 0.05, run_id="signal")
    worker = Worker(store, name="w")
    await worker.run_until_idle()
    assert "waiting_for_signal" in await kinds(client, "signal")
    await asyncio.sleep(0.06)
    await worker.run_until_idle()
    assert await handle.result(timeout=WAKE) == "timed out"


async def test_on_a_fake_clock_a_short_sleep_is_waited_in_place_until_the_test_moves_time(
    store: Store,
) -> None:
    # the production path (issue 29): the engine waits on the fake clock as on
    # the real one; only the fake time moves when the test moves it
    clock = FakeClock(1_000.0)
    client = Client(store, clock=clock)
    handle = await client.start(naps, 0.5, run_id="fake")
    worker = Worker(store, clock=clock, name="w")
    await worker.run_until_idle()  # returns: nothing would move the fake time
    assert await handle.status() is RunStatus.RUNNING
    clock.advance(0.5)
    await worker.run_until_idle()
    assert await handle.result(timeout=WAKE) == "after"


async def test_a_cancel_comes_through_while_a_sleep_is_waited_in_place(store: Store) -> None:
    client = Client(store)
    handle = await client.start(naps, 60.0, run_id="canceled")
    # waited in place for up to 60 s; the heartbeat brings the request every 0.1 s
    worker = Worker(store, name="w", lease_ttl=0.3, inline_backoff_max=120)
    task = asyncio.create_task(worker.run_until_idle())
    await until(lambda: DONE == ["before"], WAKE, "the step before the sleep")
    await client.cancel("canceled", reason="no need", grace=30)
    await asyncio.wait_for(task, WAKE)  # not 60 s later
    with pytest.raises(RunCanceled):
        await handle.result(timeout=WAKE)
    assert DONE == ["before"]
    assert "waiting_for_signal" not in await kinds(client, "canceled")


async def test_stop_lets_a_sleep_waited_in_place_end_and_the_run_finish(store: Store) -> None:
    client = Client(store)
    handle = await client.start(naps, 0.3, run_id="stopped")
    worker = Worker(store, name="w")
    task = asyncio.create_task(worker.run())
    await until(lambda: DONE == ["before"], WAKE, "the step before the sleep")
    assert await handle.status() is RunStatus.RUNNING
    await worker.stop()  # in-flight work finishes within the grace period (lease_ttl)
    await asyncio.wait_for(task, WAKE)
    assert await handle.result(timeout=WAKE) == "after"
    assert DONE == ["before", "after"]
