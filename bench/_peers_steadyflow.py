"""Steadyflow's side of `bench.peers`: the flows, and a worker in the process that starts them.

python -m bench._peers_steadyflow CONFIG_JSON round|crash-a|crash-b
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from bench._common import bench_store
from bench._peers_common import CRASH_STEPS, WAIT_S, child_main, crash_here, finished, one_round
from sdk import Client, Worker, flow, sleep, step

__all__ = ["SteadyflowPeer"]


@step(name="peers.noop")
async def noop(i: int) -> int:
    return i


@step(name="peers.crashy")
async def crashy_step(i: int) -> int:
    crash_here(i)
    return i


@flow(name="peers.chain")
async def chain(n: int) -> int:
    for i in range(n):
        await noop(i)
    return n


@flow(name="peers.waits")
async def waits(n: int) -> int:
    for _ in range(n):
        await sleep(WAIT_S)
    return n


@flow(name="peers.crash")
async def crash(n: int) -> int:
    for i in range(n):
        await crashy_step(i)
    return n


_FLOWS = {"chain": chain, "waits": waits}


class SteadyflowPeer:
    """A client and a worker (``Worker.run()``) sharing one event loop and store."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def run(self, flow: str, n: int) -> None:
        handle = await self.client.start(_FLOWS[flow], n)
        await handle.result(timeout=120)


@contextlib.asynccontextmanager
async def _worker(
    config: dict[str, Any], *flows: Any, cleanup: bool = True
) -> AsyncIterator[Client]:
    """A client, and a worker serving `flows`; the keys are deleted at the end (`cleanup`)."""
    async with bench_store(config["store"], config["prefix"], cleanup=cleanup) as store:
        worker = Worker(store, list(flows), concurrency=100, lease_ttl=config["crash_timeout"])
        task = asyncio.create_task(worker.run())
        try:
            yield Client(store)
        finally:
            await worker.stop()
            await task


async def _round(config: dict[str, Any]) -> dict[str, Any]:
    async with _worker(config, chain, waits) as client:
        return await one_round(SteadyflowPeer(client), config["counts"])


async def _crash_a(config: dict[str, Any]) -> None:
    async with _worker(config, crash, cleanup=False) as client:
        handle = await client.start(crash, CRASH_STEPS, run_id=config["run_id"])
        await handle.result(timeout=60)  # never returns: step CRASH_AT kills this process


async def _crash_b(config: dict[str, Any]) -> None:
    async with _worker(config, crash) as client:
        await client.handle(config["run_id"]).result(timeout=120)
        finished()


if __name__ == "__main__":
    child_main("bench._peers_steadyflow", _round, _crash_a, _crash_b)
