"""What `testing.check_crash_everywhere` costs on ``memory://``: points, seconds, round trips.

The flow is issue 11's yardstick: 20 steps, a signal between the tenth and
the eleventh, then a sleep. The check runs it once clean and once per crash
point (44: before and after each step, the wait and the sleep). One check is
counted: what its store sends (client side, as `bench.roundtrips` counts:
round trips per named script, in total and per run of the flow) and every
Redis command its scripts run (``redis.call``, and how many of them the
``memory://`` read and write lanes answered: `testing._fakelua`). The others are timed,
uncounted. The figure to read is CPU seconds (the check is one busy thread):
on a shared machine the wall clock also counts the other processes' turns.
``--no-read-lane`` times the check with every command going through
fakeredis's own command layer (no read or write lane), for comparison on the
same machine.

    python bench/crash_check.py [--repeat 3] [--no-read-lane] [--json]
    python -m bench.crash_check
"""

from __future__ import annotations

import asyncio
import collections
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: the repository root is not on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import Counter, counting, emit
from sdk import flow, sleep, step, wait_for
from stores.redis import RedisStore
from testing import FlowTestEnv, _fakelua, check_crash_everywhere
from testing._crashcheck import _Shared

__all__ = ["add", "drive", "main", "measure", "timed", "twenty"]


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


async def timed() -> dict[str, Any]:
    """One check of `twenty`, uncounted: its points, wall and CPU seconds."""
    started, cpu = time.perf_counter(), time.process_time()
    report = await check_crash_everywhere(twenty, drive=drive)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"points": report.tried, "seconds": round(elapsed, 3), "cpu_seconds": round(cpu, 3)}


async def measure() -> dict[str, Any]:
    """One check of `twenty`, what its store sends and every command its scripts run counted."""
    counters: list[Counter] = []
    calls = {"in_script": 0, "slow": 0}  # every redis.call; those fakeredis's layer answered
    runs = 0  # the check empties its store once per run of the flow
    opener, lane, emptied = _fakelua.memory_store, _fakelua._Server._lanes, _Shared.store

    def counted_store(*args: Any, **kwargs: Any) -> RedisStore:
        store = opener(*args, **kwargs)
        counters.append(counting(store))
        return store

    async def counted_run(shared: _Shared) -> RedisStore:
        nonlocal runs
        runs += 1
        return await emptied(shared)

    def counted_lane(server: Any, slow: Callable[..., Any], **how: Any) -> Callable[..., Any]:
        def counted_slow(*args: Any) -> Any:
            calls["slow"] += 1
            return slow(*args)

        call = lane(server, counted_slow, **how)

        def counted(*args: Any) -> Any:
            calls["in_script"] += 1
            return call(*args)

        return counted

    _fakelua.memory_store = counted_store  # the check opens its store with it
    _fakelua._Server._lanes = counted_lane  # type: ignore[method-assign,assignment]
    _Shared.store = counted_run  # type: ignore[method-assign,assignment]
    try:
        figures = await timed()
    finally:
        _fakelua.memory_store = opener
        _fakelua._Server._lanes = lane  # type: ignore[method-assign]
        _Shared.store = emptied  # type: ignore[method-assign]
    scripts: collections.Counter[str] = collections.Counter()
    for c in counters:
        scripts.update(c.scripts)
    trips = sum(c.round_trips for c in counters)
    return {
        **figures,
        "runs": runs,
        "round_trips": trips,
        "round_trips_per_run": round(trips / runs, 1),
        "scripts_per_run": {k: round(v / runs, 1) for k, v in sorted(scripts.items())},
        "in_script_commands": calls["in_script"],
        "in_script_commands_per_run": round(calls["in_script"] / runs, 1),
        "read_lane_share": round(1 - calls["slow"] / max(calls["in_script"], 1), 3),
    }


async def main() -> None:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3, help="timed checks to run (the best is shown)")
    p.add_argument(
        "--no-read-lane", action="store_true",
        help="time the checks with memory://'s read lane off (every command through fakeredis)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    a = p.parse_args()
    lane = _fakelua._READS
    if a.no_read_lane:
        _fakelua._READS = None  # servers made from now on answer every command the usual way
    try:
        counted = await measure()
        results = [await timed() for _ in range(a.repeat)]
    finally:
        _fakelua._READS = lane
    best = {**counted, **min(results, key=lambda r: r["cpu_seconds"])}
    best["seconds_all"] = [r["seconds"] for r in results]
    best["cpu_seconds_all"] = [r["cpu_seconds"] for r in results]
    best["read_lane"] = not a.no_read_lane
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
    lane_state = "off" if a.no_read_lane else "on"
    print(f"commands in scripts: {best['in_script_commands']} "
          f"({best['in_script_commands_per_run']} per run; lanes {lane_state}: "
          f"{best['read_lane_share']:.0%} of them)")  # fmt: skip
    print("round trips per run, by script:")
    for name, n in best["scripts_per_run"].items():
        print(f"  {name:<16} {n}")


if __name__ == "__main__":
    asyncio.run(main())
