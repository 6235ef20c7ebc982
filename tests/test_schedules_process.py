"""Two real worker processes serve a schedule that fires every second: exactly one
run per tick (counted from the flow's own ledger file, not the engine's counters)."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from sdk import Client, RunRecord, RunStatus
from tests.crashflows import Workers, until

pytestmark = [pytest.mark.redis, pytest.mark.slow]

STARTUP = 15.0


async def test_two_worker_processes_start_one_run_per_tick(
    workers: Workers, client: Client, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    first = workers.spawn(module="tests.scheduleflows")
    second = workers.spawn(module="tests.scheduleflows")
    await client.create_schedule(
        "every-second", "tests.scheduleflows.every_second", cron="* * * * * *",
        args=(str(ledger),), catchup=timedelta(seconds=30), overlap="allow",
    )  # fmt: skip

    def lines() -> list[str]:
        return ledger.read_text(encoding="utf-8").splitlines() if ledger.exists() else []

    await until(lambda: len(lines()) >= 4, STARTUP, "4 ticks", first, second)
    await client.pause_schedule("every-second")
    runs = await finished_runs(client)
    await asyncio.sleep(0.2)  # nothing more may come after the pause

    ticks = Counter(line.split()[1] for line in lines())
    assert set(ticks.values()) == {1}, ticks  # each tick's flow ran once
    assert len(ticks) == len(runs) >= 4
    assert {r.status for r in runs} == {RunStatus.COMPLETED}
    assert {f"every-second@{t}" for t in ticks} == {r.run_id for r in runs}
    times = sorted(datetime.fromisoformat(t).timestamp() for t in ticks)
    # consecutive seconds: no tick lost (a pass that comes late, on a loaded machine,
    # catches up the ticks it missed: catchup=30 s)
    assert times == [times[0] + i for i in range(len(times))]
    (info,) = await client.list_schedules()
    assert info.fired == len(runs)


async def finished_runs(client: Client) -> list[RunRecord]:
    """The schedule's runs, listed once each has finished: a listing taken while
    some still ran (a loaded machine) is awaited and taken again, until no new
    run comes (a tick fired just before the pause may start one meanwhile)."""
    seen: set[str] = set()
    while True:
        runs = await client.list_runs(flow="tests.scheduleflows.every_second", limit=1000)
        new = [r.run_id for r in runs if r.run_id not in seen]
        if not new:
            return runs
        for run_id in new:
            await client.handle(run_id).result(timeout=STARTUP)
        seen.update(new)
