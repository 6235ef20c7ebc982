"""What `testing.check_crash_everywhere` costs on ``memory://``: points, seconds, round trips.

The flow is issue 11's yardstick: 20 steps, a signal between the tenth and
the eleventh, then a sleep. The check runs it once clean and once per crash
point (44: before and after each step, the wait and the sleep). Every store
the check opens is counted (client side, as `bench.roundtrips` counts): round
trips per named script, in total and per run of the flow. The figure to read
is CPU seconds (the check is one busy thread): on a shared machine the wall
clock also counts the other processes' turns.

    python bench/crash_check.py [--repeat 3] [--json]
    python -m bench.crash_check
"""

from __future__ import annotations

import asyncio
import collections
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: the repository root is not on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import Counter, counting, emit
from sdk import flow, sleep, step, wait_for
from stores import _fakelua
from stores.redis import RedisStore
from testing import FlowTestEnv, check_crash_everywhere

__all__ = ["add", "drive", "main", "measure", "twenty"]


@step  # key "add#n": tests/test_crash_everywhere.py checks this flow by its step keys
async def add(total: int, n: int) -> int:
    return total + n


@flow(name="bench.crash_check.twenty")
async def twenty() -> int:
    total = 0
    for n in range(10):
        total = await add(total, n)
    total += await wait_for("bonus")
    await sleep(60)
    for n in range(10, 20):
        total = await add(total, n)
    return total


async def drive(env: FlowTestEnv, run_id: str) -> None:
    await env.client.signal(run_id, "bonus", 1000)
    await env.run_until_idle()
    await env.advance(61)


async def measure() -> dict[str, Any]:
    """One check of `twenty`, every store it opens counted."""
    counters: list[Counter] = []
    opener = _fakelua.memory_store

    def counted_store(*args: Any, **kwargs: Any) -> RedisStore:
        store = opener(*args, **kwargs)
        counters.append(counting(store))
        return store

    _fakelua.memory_store = counted_store  # the check opens each run's store with it
    try:
        started, cpu = time.perf_counter(), time.process_time()
        report = await check_crash_everywhere(twenty, drive=drive)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        _fakelua.memory_store = opener
    scripts: collections.Counter[str] = collections.Counter()
    for c in counters:
        scripts.update(c.scripts)
    runs = len(counters)
    trips = sum(c.round_trips for c in counters)
    return {
        "points": report.tried,
        "seconds": round(elapsed, 3),
        "cpu_seconds": round(cpu, 3),
        "runs": runs,
        "round_trips": trips,
        "round_trips_per_run": round(trips / runs, 1),
        "scripts_per_run": {k: round(v / runs, 1) for k, v in sorted(scripts.items())},
    }


async def main() -> None:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3, help="checks to run (the best is shown)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    a = p.parse_args()
    results = [await measure() for _ in range(a.repeat)]
    best = min(results, key=lambda r: r["cpu_seconds"])
    best["seconds_all"] = [r["seconds"] for r in results]
    best["cpu_seconds_all"] = [r["cpu_seconds"] for r in results]
    if a.json:
        emit("crash_check", best, True)
        return
    print(f"points checked:      {best['points']}")
    print(
        f"CPU seconds (best of {a.repeat}): {best['cpu_seconds']}  (all: {best['cpu_seconds_all']})"
    )
    print(f"wall seconds, same runs: {best['seconds']}  (all: {best['seconds_all']})")
    print(f"runs of the flow:    {best['runs']} ({best['round_trips']} round trips, "
          f"{best['round_trips_per_run']} per run)")  # fmt: skip
    print("round trips per run, by script:")
    for name, n in best["scripts_per_run"].items():
        print(f"  {name:<16} {n}")


if __name__ == "__main__":
    asyncio.run(main())
