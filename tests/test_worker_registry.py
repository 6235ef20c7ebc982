"""Workers register themselves on the store; clients see who serves what.

Real worker processes on the real Redis: a serving worker is listed with what
it serves, a stopped one drops out at once, a killed one when its registration
expires. In-process: `RunHandle.result` says when no live worker serves a
pending run, instead of only timing out.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

import sdk.client._handle
from sdk import Client, Worker, WorkerInfo, flow
from sdk.model._registry import Registry
from stores.redis import RedisStore
from tests.crashflows import Workers, one_step, until

STARTUP = 15.0
ONE_STEP = f"{one_step.__module__}.{one_step.__qualname__}"  # its flow name


async def listed(client: Client, pid: int) -> WorkerInfo | None:
    return next((w for w in await client.workers() if w.pid == pid), None)


@pytest.mark.redis
@pytest.mark.slow
async def test_a_worker_process_is_listed_while_it_serves_and_drops_out_when_it_stops(
    workers: Workers, client: Client
) -> None:
    worker = workers.spawn("--queues", "default,bulk")

    info = await until(lambda: listed(client, worker.pid), STARTUP, "registration", worker)

    assert info.host == socket.gethostname()
    assert info.queues == ("default", "bulk")
    assert info.concurrency == 4
    assert ONE_STEP in info.flows
    assert info.serves(ONE_STEP, "bulk") and not info.serves(ONE_STEP, "other")
    assert info.started_at <= info.last_beat
    worker.send(signal.SIGTERM)
    assert await worker.exited(STARTUP) == 0
    assert await listed(client, worker.pid) is None  # it said goodbye


@pytest.mark.redis
@pytest.mark.slow
async def test_a_killed_worker_stays_listed_until_its_registration_expires(
    workers: Workers, client: Client
) -> None:
    worker = workers.spawn()  # a 1 s lease
    first = await until(lambda: listed(client, worker.pid), STARTUP, "registration", worker)
    renewed = await until(
        lambda: _beat_after(client, worker.pid, first), STARTUP, "a renewal", worker
    )
    assert renewed.last_beat > first.last_beat

    worker.kill()
    assert await listed(client, worker.pid) is not None  # nobody knows yet

    async def gone() -> bool:
        return await listed(client, worker.pid) is None

    await until(gone, 5.0, "the registration to expire")


async def _beat_after(client: Client, pid: int, before: WorkerInfo) -> WorkerInfo | None:
    info = await listed(client, pid)
    return info if info is not None and info.last_beat > before.last_beat else None


# -- in process: what a client says about a pending run nobody serves ----------------


registry = Registry()


@flow(registry=registry)
async def greet(name: str) -> str:
    return f"hi {name}"


GREET = f"{__name__}.greet"


@pytest_asyncio.fixture(name="store")
async def store_fixture(memory_store: RedisStore) -> AsyncIterator[RedisStore]:
    yield memory_store


async def test_result_timeout_says_no_live_worker_serves_the_pending_run(
    store: RedisStore,
) -> None:
    client = Client(store, registry=registry)
    handle = await client.start(greet, "ada")

    with pytest.raises(TimeoutError) as caught:
        await handle.result(timeout=0.05)

    message = str(caught.value)
    assert f"run {handle.run_id!r} is still pending" in message
    assert f"no live worker serves flow {GREET!r} on queue 'default'" in message
    assert "0 live worker(s)" in message


async def test_a_worker_on_other_queues_does_not_count_and_one_on_its_queue_runs_it(
    store: RedisStore,
) -> None:
    client = Client(store, registry=registry)
    handle = await client.start(greet, "ada")
    elsewhere = Worker(store, registry=registry, queues=["bulk"], lease_ttl=1.0)
    serving = asyncio.create_task(elsewhere.run())
    try:
        await until(client.workers, 5.0, "the worker to register")
        with pytest.raises(TimeoutError, match="1 live worker"):
            await handle.result(timeout=0.05)
        (info,) = await client.workers()
        assert (info.pid, info.queues, info.flows) == (os.getpid(), ("bulk",), (GREET,))
    finally:
        await elsewhere.stop()
        await serving
    assert await client.workers() == []

    here = Worker(store, registry=registry, lease_ttl=1.0)
    serving = asyncio.create_task(here.run())
    try:
        assert await handle.result(timeout=5.0) == "hi ada"
    finally:
        await here.stop()
        await serving


async def test_result_warns_once_when_a_run_stays_pending_with_nobody_to_serve_it(
    store: RedisStore, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sdk.client._handle, "PENDING_HINT_AFTER", 0.0)
    client = Client(store, registry=registry)
    handle = await client.start(greet, "ada")

    with caplog.at_level(logging.WARNING, logger="steadyflow.client"), pytest.raises(TimeoutError):
        await handle.result(timeout=0.3)

    warnings = [r.getMessage() for r in caplog.records if r.name == "steadyflow.client"]
    assert len(warnings) == 1
    assert f"run {handle.run_id} is still pending: no live worker serves flow" in warnings[0]


async def test_a_finished_or_running_run_gets_no_hint(store: RedisStore) -> None:
    client = Client(store, registry=registry)
    handle = await client.start(greet, "ada")
    stored = await store.get_run(handle.run_id)
    assert stored is not None
    assert await client._core.unserved(stored) is not None
    await client.cancel(handle.run_id, reason="not needed")
    stored = await store.get_run(handle.run_id)
    assert stored is not None
    assert await client._core.unserved(stored) is None
