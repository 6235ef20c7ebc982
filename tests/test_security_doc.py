"""The Redis users docs/security.md documents can do what it says, and no more."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
import redis.asyncio as aioredis
import redis.exceptions

from sdk import Client, Intent, RunStatus, Worker, channel, emit, flow, sleep, step, wait_for
from sdk.store import PartitionsMismatch
from stores import open_store
from stores.redis import RedisStore
from testing import FakeClock, FlowTestEnv
from tests.conftest import PrivateRedis

SECURITY = Path(__file__).resolve().parent.parent / "docs" / "security.md"
PASSWORD = "doc-s3cret"


def documented_users() -> dict[str, list[str]]:
    """The page's `user NAME RULE...` lines (ACL file syntax), as ACL SETUSER arguments."""
    users = {}
    for line in SECURITY.read_text().splitlines():
        if m := re.fullmatch(r"user (sf-\w+) (.+)", line.strip()):
            users[m.group(1)] = m.group(2).replace("PASSWORD", PASSWORD).split()
    return users


DELIVERED: list[str] = []


@channel("tests.secdoc.mail")
async def deliver(intent: Intent) -> None:
    DELIVERED.append(intent.idempotency_key)


@step(name="tests.secdoc.work")
async def work(x: int) -> int:
    emit("tests.secdoc.mail", {"x": x})  # the outbox's scripts and dispatcher run too
    return x + 1


@flow(name="tests.secdoc.gated", retention=60)
async def gated(x: int) -> int:
    y = await work(x)
    await wait_for("ok", human=True, approvers=["ada"])
    await sleep(5)
    return y


@flow(name="tests.secdoc.relay")
async def relay() -> int:
    return int(await wait_for("go"))


@pytest_asyncio.fixture(name="acl_server")
async def acl_server_fixture(private_redis: PrivateRedis) -> AsyncIterator[str]:
    """The private server with the documented users; yields its host:port."""
    users = documented_users()
    assert set(users) == {"sf-app", "sf-read"}
    admin = aioredis.Redis.from_url(private_redis.url)
    try:
        for name, rules in users.items():
            await admin.execute_command("ACL", "SETUSER", name, *rules)  # type: ignore[no-untyped-call]
        yield f"127.0.0.1:{private_redis.port}"
    finally:
        await admin.aclose()


def url(user: str, server: str) -> str:
    return f"redis://{user}:{PASSWORD}@{server}/0"


async def test_the_app_user_runs_every_operation_and_the_read_user_reads(
    acl_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    DELIVERED.clear()
    app = open_store(url("sf-app", acl_server))
    read = open_store(url("sf-read", acl_server))
    assert isinstance(app, RedisStore) and isinstance(read, RedisStore)
    try:
        async with FlowTestEnv(FakeClock(), store=app) as env:
            reader = Client(read, clock=env.clock)
            seen: list[str] = []

            async def follow() -> None:
                async for event in reader.follow(poll_timeout=0.2):
                    seen.append(event.type)
                    if event.type == "run.deleted":
                        return

            follower = asyncio.create_task(follow())
            await asyncio.sleep(0.3)  # the follower starts reading from "now"

            run = await env.start(gated, 1, run_id="sd-1")
            await env.run_until_idle()
            await env.client.signal("sd-1", "noise", 1, dedup_id="n1")
            await env.client.approve("sd-1", "ok", actor="ada")
            await env.run_until_idle()
            await env.advance(5)
            assert await run.result(timeout=5) == 2
            assert DELIVERED == ["sd-1:tests.secdoc.work#1:1"]

            # the read-only user reads everything...
            assert (await reader.get("sd-1")).status is RunStatus.COMPLETED
            assert [r.run_id for r in await reader.list_runs()] == ["sd-1"]
            assert (await reader.events("sd-1"))[-1].type == "run.completed"
            assert (await reader.checkpoints("sd-1"))[-1].kind == "run_finished"
            assert await reader.handle("sd-1").result(timeout=1) == 2
            assert [i.status for i in await reader.intents("sd-1")] == ["sent"]
            # ...and changes nothing
            with pytest.raises(redis.exceptions.NoPermissionError):
                await reader.signal("sd-1", "noise", 2)
            with pytest.raises(redis.exceptions.NoPermissionError):
                await reader.delete("sd-1")

            copy = await env.client.replay("sd-1", actor="ops")
            await env.run_until_idle()
            forked = await env.client.fork("sd-1", actor="ops", priority=3)
            await env.client.cancel(forked.run_id, reason="not needed", actor="ops", grace=0)
            await env.client.resume(forked.run_id, actor="ops")
            await env.client.cancel(forked.run_id, reason="still not", actor="ops", grace=0)
            await env.client.delete(forked.run_id, actor="ops")
            await env.client.cancel(copy.run_id, reason="enough", actor="ops", grace=0)
            await env.client.delete(copy.run_id, actor="ops")
            await env.advance(61)  # the retention sweep deletes sd-1

            await asyncio.wait_for(follower, timeout=10)
            assert "run.replayed" in seen and "run.forked" in seen
            assert [r.run_id for r in await reader.list_runs()] == []

            # A worker process's loop (blocking wake-ups) and a waiting result().
            assert await app.wait_ready(None, 0.01) in (True, False)  # BLPOP is allowed
            worker = Worker(app, [relay], clock=env.clock)
            serving = asyncio.create_task(worker.run())
            try:
                handle = await env.client.start(relay, run_id="sd-2")
                waiting = asyncio.create_task(handle.result(timeout=10))
                # the run cannot end before the signal: result() blocks on its done notice
                await asyncio.sleep(0.1)
                await env.client.signal("sd-2", "go", 7)
                assert await waiting == 7
                # the read-only user lists the workers (the worker's beats prune them)
                assert [w.worker_id for w in await reader.workers()] == [worker.owner]
            finally:
                await worker.stop()
                await serving
        # A refused command inside the worker is logged as a store error, not raised.
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    finally:
        await read.close()
        await app.close()


async def test_the_read_user_is_refused_with_another_partition_count(acl_server: str) -> None:
    # Reads make no script call, and this user may run none: its store checks
    # the recorded count with HMGET, which the documented rule grants.
    app = open_store(url("sf-app", acl_server), partitions=4)
    right = open_store(url("sf-read", acl_server), partitions=4)
    wrong = open_store(url("sf-read", acl_server), partitions=1)
    try:
        async with FlowTestEnv(FakeClock(), store=app) as env:
            await env.start(relay, run_id="sd-3")
            assert (await Client(right).get("sd-3")).status is RunStatus.PENDING
            with pytest.raises(PartitionsMismatch) as refused:
                await Client(wrong).get("sd-3")
            assert (refused.value.recorded, refused.value.given) == ("4", 1)
    finally:
        for store in (wrong, right, app):
            await store.close()
