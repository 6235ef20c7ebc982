"""DBOS's side of `bench.peers`: async workflows and steps, in the process that starts them.

The system database is SQLite (a file `bench.peers` chose) or the Postgres
URL given to it. DBOS runs in-process by design: there is no server.

    python -m bench._peers_dbos CONFIG_JSON round|crash-a|crash-b
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from dbos import DBOS, SetWorkflowID, WorkflowHandleAsync

from bench._peers_common import CRASH_STEPS, WAIT_S, child_main, crash_here, finished, one_round

__all__ = ["DbosPeer"]


@DBOS.step(name="peers.noop")
async def noop(i: int) -> int:
    return i


@DBOS.step(name="peers.crashy")
async def crashy(i: int) -> int:
    crash_here(i)
    return i


@DBOS.workflow(name="peers.chain")
async def chain(n: int) -> int:
    for i in range(n):
        await noop(i)
    return n


@DBOS.workflow(name="peers.waits")
async def waits(n: int) -> int:
    for _ in range(n):
        await DBOS.sleep_async(WAIT_S)
    return n


@DBOS.workflow(name="peers.crash")
async def crash(n: int) -> int:
    for i in range(n):
        await crashy(i)
    return n


_WORKFLOWS: dict[str, Any] = {"chain": chain, "waits": waits}


class DbosPeer:
    async def run(self, flow: str, n: int) -> None:
        handle = await DBOS.start_workflow_async(_WORKFLOWS[flow], n)
        await handle.get_result()


@contextlib.contextmanager
def _launched(config: dict[str, Any]) -> Iterator[None]:
    """DBOS launched on the configured system database (launching recovers this
    executor's unfinished workflows)."""
    DBOS(
        config={
            "name": "sfbench-peers",
            "system_database_url": config["dbos_url"],
            "log_level": "WARNING",
        }
    )
    DBOS.launch()
    try:
        yield
    finally:
        DBOS.destroy()


async def _round(config: dict[str, Any]) -> dict[str, Any]:
    with _launched(config):
        return await one_round(DbosPeer(), config["counts"])


async def _crash_a(config: dict[str, Any]) -> None:
    with _launched(config):
        with SetWorkflowID(config["run_id"]):
            handle = await DBOS.start_workflow_async(crash, CRASH_STEPS)
        await handle.get_result()  # never returns: step CRASH_AT kills this process


async def _crash_b(config: dict[str, Any]) -> None:
    with _launched(config):
        handle: WorkflowHandleAsync[int] = await DBOS.retrieve_workflow_async(config["run_id"])
        await handle.get_result()
        finished()


if __name__ == "__main__":
    child_main("bench._peers_dbos", _round, _crash_a, _crash_b)
