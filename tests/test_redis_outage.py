"""Redis going away and coming back, on a redis-server owned by the test.

Decisions pinned here:
- a worker survives a Redis restart: it logs "store unavailable", retries with
  a capped backoff, and serves runs again once Redis answers;
- a `RunHandle.result` call waiting while Redis is down does not hang until its
  timeout: it raises redis-py's ``ConnectionError`` once the store's connection
  retries are spent, and calling it again after Redis is back works;
- with data kept across the restart (here: ``SAVE`` before the stop), runs
  that were waiting continue.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
import redis.exceptions

from sdk import Client, RunHandle, RunStatus, Worker, flow, sleep, step, wait_for
from stores.redis import RedisStore
from tests.conftest import PrivateRedis
from tests.crashflows import until

pytestmark = pytest.mark.slow

OUTAGE_NOTICED = 20.0  # the worker's retry backoff is capped at 5 s
FINISH = 15.0


@step
async def double(x: int) -> int:
    return 2 * x


@flow(name="tests.redis_outage.double_it")
async def double_it(x: int) -> int:
    return await double(x)


@flow(name="tests.redis_outage.wait_then_double")
async def wait_then_double(x: int) -> int:
    extra = await wait_for("go")
    return await double(x + int(extra))


@flow(name="tests.redis_outage.nap_then_double")
async def nap_then_double(x: int) -> int:
    await sleep(1.0)
    return await double(x)


class Service:
    """An in-process worker and a client (own connection pools) on one Redis."""

    def __init__(self, url: str) -> None:
        self.worker_store = RedisStore.from_url(url, prefix="outage")
        self.client_store = RedisStore.from_url(url, prefix="outage")
        # inline_backoff_max=0: every sleep parks (these tests need the timer in Redis)
        self.worker = Worker(
            self.worker_store, lease_ttl=1, name="outage-worker", inline_backoff_max=0
        )
        self.client = Client(self.client_store)
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.task = asyncio.create_task(self.worker.run())

    async def close(self) -> None:
        await self.worker.stop()
        if self.task is not None:
            await asyncio.wait_for(self.task, FINISH)
        await self.worker_store.close()
        await self.client_store.close()


@pytest_asyncio.fixture(name="service")
async def service_fixture(private_redis: PrivateRedis) -> AsyncIterator[Service]:
    service = Service(private_redis.url)
    await service.start()
    try:
        yield service
    finally:
        await service.close()


def outage_logged(caplog: pytest.LogCaptureFixture) -> bool:
    return any(
        r.name == "steadyflow.worker" and "store unavailable" in r.getMessage()
        for r in caplog.records
    )


async def restart(
    private_redis: PrivateRedis, caplog: pytest.LogCaptureFixture, *, keep_data: bool
) -> None:
    """Stop Redis, wait until the worker has noticed, start it again on the same port."""
    if keep_data:
        saver = RedisStore.from_url(private_redis.url, prefix="outage")
        await saver.client.save()  # redis-server loads dump.rdb from its dir at start
        await saver.close()
    private_redis.stop()
    await until(lambda: outage_logged(caplog), OUTAGE_NOTICED, "the worker to log the outage")
    private_redis.start()


async def parked_across_a_restart(
    service: Service,
    private_redis: PrivateRedis,
    caplog: pytest.LogCaptureFixture,
    handle: RunHandle,
) -> RunHandle:
    """`handle`'s run, once it has parked, through a restart that kept the data."""
    caplog.set_level(logging.INFO, logger="steadyflow.worker")

    async def parked() -> bool:
        return (await handle.status()) is RunStatus.WAITING_FOR_SIGNAL

    await until(parked, FINISH, "the run to park")
    await restart(private_redis, caplog, keep_data=True)
    return handle


async def test_worker_survives_a_redis_restart_and_serves_runs_started_after_it(
    private_redis: PrivateRedis, service: Service, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="steadyflow.worker")
    before = await service.client.start(double_it, 1)
    assert await before.result(timeout=FINISH) == 2

    await restart(private_redis, caplog, keep_data=False)

    after = await service.client.start(double_it, 21)
    assert await after.result(timeout=FINISH) == 42
    assert service.task is not None and not service.task.done()

    # Redis came back empty: the worker's next beat records the partition count
    # again, so a process with another count is refused as before the restart.
    store = service.worker_store

    async def recorded() -> bool:
        return await store.client.hget(store.keys.layout(), "partitions") == "1"

    await until(recorded, FINISH, "the worker to record the partition count again")


async def test_a_timer_due_during_an_outage_fires_once_redis_is_back(
    private_redis: PrivateRedis, service: Service, caplog: pytest.LogCaptureFixture
) -> None:
    # The worker waits for the timer (a BLPOP it ends itself at the deadline,
    # stores._storecore) when Redis goes; the deadline passes during the outage.
    handle = await parked_across_a_restart(
        service, private_redis, caplog, await service.client.start(nap_then_double, 20)
    )

    assert await handle.result(timeout=FINISH) == 40


async def test_waiting_run_continues_after_a_restart_that_kept_the_data(
    private_redis: PrivateRedis, service: Service, caplog: pytest.LogCaptureFixture
) -> None:
    handle = await parked_across_a_restart(
        service, private_redis, caplog, await service.client.start(wait_then_double, 20)
    )

    assert await handle.status() is RunStatus.WAITING_FOR_SIGNAL
    await service.client.signal(handle.run_id, "go", 1)
    assert await handle.result(timeout=FINISH) == 42


async def test_result_waiting_through_an_outage_raises_then_works_once_redis_is_back(
    private_redis: PrivateRedis, service: Service, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="steadyflow.worker")
    handle = await service.client.start(wait_then_double, 1, run_id="result-across-restart")
    waiting = asyncio.create_task(handle.result(timeout=60))

    async def parked() -> bool:
        return (await handle.status()) is RunStatus.WAITING_FOR_SIGNAL

    await until(parked, FINISH, "the run to wait for its signal")
    saver = RedisStore.from_url(private_redis.url, prefix="outage")
    await saver.client.save()
    await saver.close()
    private_redis.stop()

    # Well before its own 60 s timeout: the outage is reported, not waited out.
    with pytest.raises(redis.exceptions.ConnectionError):
        await asyncio.wait_for(waiting, FINISH)

    private_redis.start()
    again = asyncio.create_task(handle.result(timeout=FINISH))
    await service.client.signal(handle.run_id, "go", 2)
    assert await again == 6
