"""A worker under load and under store errors (found while benchmarking).

- a worker's concurrency is not bounded by redis-py's connection pool: with
  more activations than the pool has connections, every run completes;
- a store error while recording a step (a Redis blip) is not the flow's
  failure: like a crash, the run is recovered and the step runs again.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis.exceptions

from sdk import Client, RunStatus, Worker, flow, step
from stores.redis import RedisStore
from testing import FlowTestEnv

EXECUTED: list[int] = []


@step
async def add_one(x: int) -> int:
    EXECUTED.append(x)
    return x + 1


@flow(name="tests.worker_store_errors.three_steps")
async def three_steps(x: int) -> int:
    for _ in range(3):
        x = await add_one(x)
    return x


@pytest.mark.redis
async def test_worker_with_more_activations_than_redis_pool_connections_completes_every_run(
    real_store: RedisStore,
) -> None:
    runs = 120
    client = Client(real_store)
    worker = Worker(real_store, [three_steps], concurrency=runs)
    handles = [await client.start(three_steps, i) for i in range(runs)]

    await worker.run_until_idle()

    statuses = [(await client.get(h.run_id)).status for h in handles]
    assert statuses == [RunStatus.COMPLETED] * runs


async def test_store_error_while_recording_a_step_does_not_fail_the_run() -> None:
    EXECUTED.clear()
    async with FlowTestEnv() as env:
        real_record = env.store.record
        blips = [redis.exceptions.ConnectionError("simulated Redis blip")]

        async def flaky_record(*args: Any, **kwargs: Any) -> bool:
            if blips:
                raise blips.pop()
            return await real_record(*args, **kwargs)

        env.store.record = flaky_record  # type: ignore[method-assign]
        handle = await env.start(three_steps, 0)
        await env.run_until_idle()

        assert (await env.client.get(handle.run_id)).status is not RunStatus.FAILED
        await env.advance(env.worker.lease_ttl + 1)  # recovered like a crashed worker's run
        assert await handle.result(timeout=5) == 3
        assert EXECUTED == [0, 0, 1, 2]  # the unrecorded step ran again, nothing else did
