"""Firing due schedule ticks: wall time and round trips for one worker to fire 10,000.

Two cases, each leaving 10,000 ticks due to one worker's schedule pass
(`sdk.worker._ticker.Ticker.fire`, the part of a worker's pass that starts ticks' runs):

- ``many``: 10,000 hourly schedules, each one tick behind (a worker that was
  down for an hour);
- ``catchup``: one schedule ticking every second, 10,000 s behind, with a
  catch-up window that covers them all (overlap "allow").

Measured: the pass that fires them (each tick's run created with the schedule
advanced, atomically; runs are not executed), its round trips and scripts.

    python -m bench.schedule_ticks [--ticks 10000] [--store URL]
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench._common import bench_store, counting, emit, new_prefix, parser, table
from sdk import Client, Worker, flow

__all__ = ["main", "measure"]

T0 = 1_780_000_000.0  # 2026-05-28T20:26:40Z; schedules start just after the hour


@flow(name="bench.on_tick")
async def on_tick(tick: datetime) -> None:
    return None


class _Clock:
    """A clock the benchmark sets: schedules are made at one time, fired at another."""

    def __init__(self, at: float) -> None:
        self.at = at

    def time(self) -> float:
        return self.at

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.at, UTC)


def _hour(t: float) -> float:
    return t - t % 3600


async def measure(url: str, ticks: int, case: str) -> dict[str, Any]:
    prefix = new_prefix(f"ticks-{case}")
    start = _hour(T0) + 60
    clock = _Clock(start)
    async with bench_store(url, prefix) as store:
        client = Client(store, clock=clock)
        if case == "many":
            for i in range(0, ticks, 500):
                await asyncio.gather(*(
                    client.create_schedule(f"s{n}", on_tick, cron="0 * * * *")
                    for n in range(i, min(i + 500, ticks))
                ))  # fmt: skip
            clock.at = start + 3600  # every schedule's next tick is due
        else:
            await client.create_schedule(
                "every-second", on_tick, cron="* * * * * *", overlap="allow",
                catchup=timedelta(seconds=ticks + 10),
            )  # fmt: skip
            clock.at = start + ticks  # ticks start+1 .. start+ticks are due
        # the worker's own store, counted from its first command
        async with bench_store(url, prefix, cleanup=False) as wstore:
            count = counting(wstore)
            worker = Worker(wstore, [on_tick], clock=clock)
            began = time.perf_counter()
            await worker._ticker.fire(["bench.on_tick"])
            wall = time.perf_counter() - began
            spent = count.since((0, type(count.commands)(), type(count.scripts)()))
        created = await store.client.zcard(store.keys.all_runs(0))
    assert created == ticks, (created, ticks)
    return {
        "case": case,
        "ticks": ticks,
        "wall_s": round(wall, 3),
        "ticks_per_s": round(ticks / wall),
        "round_trips": spent["round_trips"],
        "scripts": spent["scripts"],
    }


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--ticks", type=int, default=10_000)
    a = p.parse_args()
    results = [asyncio.run(measure(a.store, a.ticks, case)) for case in ("many", "catchup")]
    rows = [
        (r["case"], r["ticks"], r["wall_s"], r["ticks_per_s"], r["round_trips"],
         ", ".join(f"{k} {v}" for k, v in sorted(r["scripts"].items())))
        for r in results
    ]  # fmt: skip
    print(table(rows, ["case", "ticks", "wall s", "ticks/s", "round trips", "scripts"]))
    for r in results:
        emit("schedule_ticks", r, a.json)


if __name__ == "__main__":
    main()
