"""Sticky wake-ups across real worker processes: the worker keeping a run gets its
wake-up first; when that worker is dead, another one takes the run after the delay."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdk import Client, RunHandle, RunStatus
from tests.crashflows import Workers, await_payment, labelled, sleep_between_steps, until

pytestmark = [pytest.mark.redis, pytest.mark.slow]

STARTUP = 15.0
FINISH = 30.0
DELAY = 1.5  # the sticky delay both workers run with
SLEEP = 3.0  # each run's durable sleep: its wake-up comes from a timer


async def all_parked(handles: list[RunHandle]) -> bool:
    return all([await h.status() is RunStatus.WAITING_FOR_SIGNAL for h in handles])


async def test_the_worker_keeping_a_run_gets_its_wake_up(
    workers: Workers, client: Client, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    first = workers.spawn("--sticky-delay", str(DELAY))
    handles = [await client.start(await_payment, str(markers), f"b-{i}") for i in range(3)]
    await until(lambda: "started" in first.log(), STARTUP, "the first worker", first)
    await until(lambda: all_parked(handles), STARTUP, "the runs to park", first)
    second = workers.spawn("--sticky-delay", str(DELAY))
    await until(lambda: "started" in second.log(), STARTUP, "the second worker", second)

    for i in range(3):
        await client.send_event("crash.payment", {"batch": f"b-{i}"})
    for h in handles:
        assert await h.result(timeout=FINISH) is not None

    # the second worker was idle and saw every wake-up; the first one kept the runs
    assert {m.pid for m in labelled(markers, "paid")} == {first.pid}


async def test_a_dead_workers_kept_runs_go_to_another_worker_after_the_delay(
    workers: Workers, client: Client, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    first = workers.spawn("--sticky-delay", str(DELAY))
    handles = [
        await client.start(sleep_between_steps, str(markers), SLEEP + i) for i in range(3)
    ]  # fmt: skip
    await until(lambda: all_parked(handles), STARTUP, "the runs to park", first)
    started = {m.key.split(":")[0]: m for m in labelled(markers, "before")}

    first.kill()  # SIGKILL, holding the three parked runs in memory
    second = workers.spawn("--sticky-delay", str(DELAY))

    for h in handles:
        assert await h.result(timeout=FINISH) == "after"
    after = {m.key.split(":")[0]: m for m in labelled(markers, "after")}
    assert {m.pid for m in after.values()} == {second.pid}
    for i, h in enumerate(handles):
        # woken by its timer, left to the dead worker for the delay, then taken
        waited = after[h.run_id].at - started[h.run_id].at
        assert waited >= SLEEP + i + DELAY - 0.3, (h.run_id, waited)
