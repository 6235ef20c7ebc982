"""The deployment's partition count, recorded by its first store and checked by every other.

Runs live in the partition their id hashes to among N; a process given another
N would put new runs, and look for existing ones, where the rest of the
deployment does not (before this check, silently: its runs were never claimed).
Pinned, on the real Redis and on memory://: the first store records its count;
one with another count is refused before its first script call writes anything,
naming the prefix and both counts; a worker stops on it (no retry mends it);
the CLI exits 2 with the message.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from sdk import Client, Worker, flow
from sdk.errors import CorruptRecord
from sdk.http import create_app
from sdk.store import CorruptData, PartitionsMismatch
from stores import open_store
from stores.redis import RedisStore
from tests.conftest import need_real_redis
from tests.crashflows import until

ROOT = Path(__file__).resolve().parent.parent

Opener = Callable[[int], RedisStore]


@flow(name="tests.layout.noop")
async def noop() -> int:
    return 1


@pytest_asyncio.fixture(name="opener", params=["memory", "redis"])
async def opener_fixture(request: pytest.FixtureRequest, key_prefix: str) -> AsyncIterator[Opener]:
    """Stores of one deployment (one prefix, one server), each with a partition count."""
    opened: list[RedisStore] = []
    server = open_store("memory://") if request.param == "memory" else None

    def open_with(partitions: int) -> RedisStore:
        if server is None:
            store = open_store(need_real_redis(), prefix=key_prefix, partitions=partitions)
        else:  # another store on the same in-process server
            store = RedisStore(server.client, prefix=key_prefix, partitions=partitions)
        assert isinstance(store, RedisStore)
        opened.append(store)
        return store

    try:
        yield open_with
    finally:
        first = opened[0] if opened else server
        if first is not None:
            keys = [k async for k in first.client.scan_iter(match=f"{key_prefix}:*")]
            if keys:
                await first.client.delete(*keys)
        for store in opened:
            await store.close()
        if server is not None:
            await server.close()


@contextlib.asynccontextmanager
async def api(client: Client) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on `create_app(client)`, every request as actor "ops"."""
    app = create_app(client, authenticate=lambda request: "ops")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sf") as http:
        yield http


async def keys_of(store: RedisStore) -> set[str]:
    return {k async for k in store.client.scan_iter(match=f"{store.keys.prefix}:*")}


async def test_the_first_store_records_its_partition_count(opener: Opener) -> None:
    store = opener(4)
    await Client(store).start(noop, run_id="r1")

    assert await store.client.hget(store.keys.layout(), "partitions") == "4"
    assert await Client(opener(4)).get("r1")  # the same count: served as before


async def test_another_count_is_refused_naming_both_and_writes_nothing(opener: Opener) -> None:
    first = opener(4)
    await Client(first).start(noop, run_id="r1")
    before = await keys_of(first)
    other = opener(1)

    with pytest.raises(PartitionsMismatch) as refused:
        await Client(other).start(noop, run_id="r2")

    text = str(refused.value)
    assert first.keys.prefix in text and "uses 4 partition(s)" in text
    assert "partitions=1" in text and "partitions=4" in text
    assert (refused.value.recorded, refused.value.given) == ("4", 1)
    assert isinstance(refused.value, ValueError)
    assert await keys_of(first) == before
    # and it stays refused: every later call asks again
    with pytest.raises(PartitionsMismatch):
        await Client(other).signal("r1", "go")


async def test_calls_made_together_before_the_count_is_known_agree(opener: Opener) -> None:
    await Client(opener(2)).start(noop, run_id="r1")
    other = Client(opener(3))

    results = await asyncio.gather(
        *(other.start(noop, run_id=f"x{i}") for i in range(8)), return_exceptions=True
    )

    assert all(isinstance(r, PartitionsMismatch) for r in results)


async def test_a_damaged_layout_is_reported_naming_its_key(opener: Opener) -> None:
    store = opener(1)
    await store.client.set(store.keys.layout(), "4")  # not a hash

    with pytest.raises(CorruptData) as damaged:  # the store's error
        await store.tick(1.0, 3, "recovered")
    with pytest.raises(CorruptRecord) as told:  # the SDK's, to a client
        await Client(store).start(noop, run_id="r1")

    assert damaged.value.key == store.keys.layout()
    assert "holds a string, not a hash" in str(damaged.value)
    assert store.keys.layout() in str(told.value)
    assert await store.client.get(store.keys.layout()) == "4"  # left as it was


async def test_a_worker_with_another_count_stops_on_it(opener: Opener) -> None:
    await Client(opener(4)).start(noop, run_id="r1")
    worker = Worker(opener(1), [noop])

    with pytest.raises(PartitionsMismatch):
        await asyncio.wait_for(worker.run(), timeout=20)


async def test_the_cli_and_the_worker_command_exit_2_with_the_message(
    real_store: RedisStore, redis_url: str
) -> None:
    # (real_store: its teardown deletes every key under the prefix)
    prefix = real_store.keys.prefix
    store = open_store(redis_url, prefix=prefix, partitions=4)
    try:
        await Client(store).start(noop, run_id="r1")
    finally:
        await store.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    common = ["--store", redis_url, "--prefix", prefix, "--partitions", "2"]
    for argv in (
        ["-m", "sdk.cli", "signal", "r1", "go", *common],
        ["-m", "sdk.cli", "runs", "list", *common],  # a read: checked with HMGET
        ["-m", "sdk.worker", *common, "examples.hello"],
    ):
        done = await asyncio.to_thread(
            subprocess.run, [sys.executable, *argv], capture_output=True, text=True,
            timeout=60, env=env, cwd=ROOT,
        )  # fmt: skip
        assert done.returncode == 2, (argv, done.stderr)
        assert "uses 4 partition(s)" in done.stderr and "--partitions 4" in done.stderr


async def test_the_http_api_answers_a_500_naming_the_error_and_writes_nothing(
    opener: Opener, caplog: pytest.LogCaptureFixture
) -> None:
    first = opener(4)
    await Client(first).start(noop, run_id="r1")
    before = await keys_of(first)
    async with api(Client(opener(1))) as http:
        answer = await http.post("/v1/runs", json={"flow": "tests.layout.noop", "run_id": "r2"})

    assert answer.status_code == 500, answer.text
    body = answer.json()
    assert body["code"] == "internal_error" and "PartitionsMismatch" in body["detail"]
    assert "uses 4 partition(s)" in caplog.text  # the operator's log has the message
    assert await keys_of(first) == before


async def test_a_worker_records_the_count_again_at_its_next_beat_after_data_loss(
    opener: Opener,
) -> None:
    store = opener(4)
    worker = Worker(store, [noop], lease_ttl=0.3)  # a beat every 0.1 s
    serving = asyncio.create_task(worker.run())
    try:
        await until(lambda: store.client.exists(store.keys.layout()), 10, "the first record")
        await store.client.delete(store.keys.layout())  # as a Redis restarted empty

        async def recorded() -> bool:
            return await store.client.hget(store.keys.layout(), "partitions") == "4"

        await until(recorded, 10, "the count recorded again")
        assert not serving.done()
    finally:
        await worker.stop()
        await asyncio.wait_for(serving, timeout=20)


async def test_a_worker_stops_when_a_beat_finds_another_count_recorded_meanwhile(
    opener: Opener, caplog: pytest.LogCaptureFixture
) -> None:
    store = opener(4)
    worker = Worker(store, [noop], lease_ttl=0.3)
    serving = asyncio.create_task(worker.run())
    try:
        await until(lambda: store.client.exists(store.keys.layout()), 10, "the first record")
        # the data lost, and a process with another count first to come back
        await store.client.delete(store.keys.layout())
        await Client(opener(2)).start(noop, run_id="r1")

        with pytest.raises(PartitionsMismatch) as stopped:
            await asyncio.wait_for(serving, timeout=20)
    finally:
        if not serving.done():
            await worker.stop()
            await asyncio.wait_for(serving, timeout=20)

    assert (stopped.value.recorded, stopped.value.given) == ("2", 4)
    assert f"worker {worker.owner} stops" in caplog.text and "uses 2 partition(s)" in caplog.text


async def test_a_reader_with_another_count_is_refused_before_it_reads(opener: Opener) -> None:
    first = opener(4)
    await Client(first).start(noop, run_id="r1")
    before = await keys_of(first)
    reader = Client(opener(1))

    # Without the check these would answer "no such run" and an empty list.
    for read in (lambda: reader.get("r1"), lambda: reader.list_runs(), lambda: reader.events("r1")):
        with pytest.raises(PartitionsMismatch) as refused:
            await read()
        assert (refused.value.recorded, refused.value.given) == ("4", 1)
    assert await keys_of(first) == before


async def test_reads_before_any_count_is_recorded_record_nothing_and_ask_again(
    opener: Opener,
) -> None:
    store = opener(4)
    client = Client(store)

    assert await client.list_runs() == []
    assert not await store.client.exists(store.keys.layout())  # a read records nothing
    await Client(opener(2)).start(noop, run_id="r1")  # another count comes first

    with pytest.raises(PartitionsMismatch):  # and the same reader finds it at its next read
        await client.list_runs()


async def test_a_damaged_layout_is_reported_to_a_reader_naming_its_key(opener: Opener) -> None:
    store = opener(1)
    await store.client.set(store.keys.layout(), "4")  # not a hash

    with pytest.raises(CorruptData) as damaged:
        await store.get_run("r1")

    assert damaged.value.key == store.keys.layout()
    assert "holds a string, not a hash" in str(damaged.value)


async def test_the_http_readiness_probe_fails_on_another_count(opener: Opener) -> None:
    await Client(opener(4)).start(noop, run_id="r1")
    async with api(Client(opener(1))) as http:
        answer = await http.get("/readyz")

    assert answer.status_code == 500, answer.text
    assert "PartitionsMismatch" in answer.json()["detail"]
