"""Temporal's side of `bench.peers`: workflows whose steps are activities or local activities.

A worker (default options, default workflow sandbox) and the client share the
benchmark's process; the server is the dev server `bench.peers` started.

    python -m bench._peers_temporal CONFIG_JSON round|crash-a|crash-b
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from bench._peers_common import (
        CRASH_STEPS,
        WAIT_S,
        child_main,
        crash_here,
        finished,
        one_round,
    )

__all__ = ["TemporalPeer"]


@activity.defn(name="peers.noop")
async def noop(i: int) -> int:
    return i


@activity.defn(name="peers.crashy")
async def crashy(i: int) -> int:
    crash_here(i)
    return i


async def _call(fn: Any, i: int, local: bool, timeout: float) -> int:
    """One step: an activity (scheduled through the server) or a local activity
    (run by the worker inside the workflow task, its result recorded with the task's
    completion). A retry after a timeout starts 0.1 s later (default: 1 s)."""
    retry = RetryPolicy(initial_interval=timedelta(seconds=0.1))
    limit = timedelta(seconds=timeout)
    if local:
        out: int = await workflow.execute_local_activity(
            fn, i, start_to_close_timeout=limit, retry_policy=retry
        )
    else:
        out = await workflow.execute_activity(
            fn, i, start_to_close_timeout=limit, retry_policy=retry
        )
    return out


@workflow.defn(name="peers.chain")
class Chain:
    @workflow.run
    async def run(self, n: int, local: bool) -> int:
        for i in range(n):
            await _call(noop, i, local, 10.0)
        return n


@workflow.defn(name="peers.waits")
class Waits:
    @workflow.run
    async def run(self, n: int, local: bool) -> int:
        for _ in range(n):
            await asyncio.sleep(WAIT_S)  # a durable timer on the server
        return n


@workflow.defn(name="peers.crash")
class Crash:
    @workflow.run
    async def run(self, n: int, local: bool, timeout: float) -> int:
        for i in range(n):
            await _call(crashy, i, local, timeout)
        return n


_WORKFLOWS: dict[str, Any] = {"chain": Chain.run, "waits": Waits.run}


class TemporalPeer:
    def __init__(self, client: Client, queue: str, local: bool) -> None:
        self.client, self.queue, self.local = client, queue, local
        self._n = 0

    async def run(self, flow: str, n: int) -> None:
        self._n += 1
        await self.client.execute_workflow(
            _WORKFLOWS[flow],
            args=[n, self.local],
            id=f"{self.queue}-{self._n}",
            task_queue=self.queue,
        )


@contextlib.asynccontextmanager
async def _worker(config: dict[str, Any], queue: str) -> AsyncIterator[Client]:
    client = await Client.connect(config["temporal"])
    sticky = timedelta(seconds=config["crash_timeout"])
    worker = Worker(
        client,
        task_queue=queue,
        workflows=[Chain, Waits, Crash],
        activities=[noop, crashy],
        sticky_queue_schedule_to_start_timeout=sticky,
    )
    async with worker:
        yield client


async def _round(config: dict[str, Any]) -> dict[str, Any]:
    queue = f"peers-{config['round']}-{os.getpid()}"
    async with _worker(config, queue) as client:
        return await one_round(TemporalPeer(client, queue, config["local"]), config["counts"])


def _crash_queue(config: dict[str, Any]) -> str:
    return f"crash-{config['run_id']}"


async def _crash_a(config: dict[str, Any]) -> None:
    async with _worker(config, _crash_queue(config)) as client:
        await client.execute_workflow(
            Crash.run,
            args=[CRASH_STEPS, config["local"], config["crash_timeout"]],
            id=config["run_id"],
            task_queue=_crash_queue(config),
            # a workflow task cut off by the crash (local activities) is retried after this
            task_timeout=timedelta(seconds=config["crash_timeout"]),
        )  # never returns: step CRASH_AT kills this process


async def _crash_b(config: dict[str, Any]) -> None:
    async with _worker(config, _crash_queue(config)) as client:
        await client.get_workflow_handle(config["run_id"]).result()
        finished()


if __name__ == "__main__":
    child_main("bench._peers_temporal", _round, _crash_a, _crash_b)
