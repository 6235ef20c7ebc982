"""Wake-up cost with and without sticky activations (the worker's cache of parked runs).

Three workloads, each run with ``Worker(sticky_cache=1000)`` (kept: a wake-up
continues the parked flow) and ``sticky_cache=0`` (replayed: a wake-up re-runs
the flow from the top against its whole journal):

- **waits**: a flow that waits N times (``wait_for`` then one step, N = 10, 100,
  1000). Per wake-up: the time of ``Worker.run_until_idle`` after a signal (its
  polls included), averaged over all N, and over the last tenth of them.
- **journal**: a run with a 10-entry and one with a 1,000-entry journal (steps
  recorded before its waits), woken in turn 60 times each: median per-wake
  cost, and the ratio (measured side by side: the machine's load hits both).
- **polling**: the shape of a polling flow (check a step, sleep 10 minutes,
  again; driven by a manual clock): per-pass cost around passes 100, 400 and 800.

Also the memory a kept run holds (traced allocations, cache on minus off).
Round trips per wake-up are counted on the store's connections (polls, claim,
consume, step record, suspend, the idle pass's polls). Figures, not pass/fail.

    python -m bench.wakeups [--store URL] [--waits 10,100,1000] [--passes 800]
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
import tracemalloc
from datetime import UTC, datetime
from typing import Any

from bench._common import bench_store, counting, emit, new_prefix, parser, table
from sdk import Client, RunStatus, Worker, flow, sleep, step, wait_for

__all__ = ["main", "measure"]


@step(name="bench.wakeups.check")
async def check(i: int) -> int:
    return i


@flow(name="bench.wakeups.waits")
async def waits(n: int, steps_first: int = 0) -> int:
    """`steps_first` steps, then `n` times: wait for "go", one step."""
    for i in range(steps_first):
        await check(i)
    total = 0
    for i in range(n):
        total += await wait_for("go")
        await check(i)
    return total


@flow(name="bench.wakeups.polling")
async def polling(passes: int) -> int:
    """Check, sleep 10 minutes, check again: `passes` times."""
    for i in range(passes):
        await check(i)
        await sleep(600)
    return passes


class ManualClock:
    """A clock the benchmark moves (timers fire when it says so; no real waiting)."""

    def __init__(self) -> None:
        self.t = time.time()

    def time(self) -> float:
        return self.t

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.t, UTC)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


async def _waits(url: str, n: int, cache: int, steps_first: int = 0) -> dict[str, Any]:
    """Wake a run `n` times by signal; per-wake times (ms) and round trips."""
    async with bench_store(url, new_prefix("wakeups")) as store:
        counter = counting(store)
        clock = ManualClock()
        client = Client(store, clock=clock)
        worker = Worker(store, [waits, polling], clock=clock, sticky_cache=cache)
        handle = await client.start(waits, n, steps_first)
        await worker.run_until_idle()
        costs: list[float] = []
        snap = counter.snapshot()
        for _ in range(n):
            await client.signal(handle.run_id, "go", 1)
            t0 = time.perf_counter()
            await worker.run_until_idle()
            costs.append((time.perf_counter() - t0) * 1e3)
        trips = counter.since(snap)["round_trips"] - n  # minus the signals
        assert await handle.status() is RunStatus.COMPLETED
        return {"costs": costs, "round_trips": trips / n}


async def _journal(url: str, cache: int, wakes: int = 60) -> dict[str, Any]:
    """Runs with a 10- and a 1,000-entry journal woken in turn (same worker, same
    conditions): their per-wake times (ms) and round trips."""
    async with bench_store(url, new_prefix("wakeups")) as store:
        counter = counting(store)
        clock = ManualClock()
        client = Client(store, clock=clock)
        worker = Worker(store, [waits, polling], clock=clock, sticky_cache=cache)
        runs = {n: await client.start(waits, wakes, n) for n in (10, 1000)}
        await worker.run_until_idle()
        costs: dict[int, list[float]] = {n: [] for n in runs}
        snap = counter.snapshot()
        for _ in range(wakes):
            for n, handle in runs.items():
                await client.signal(handle.run_id, "go", 1)
                t0 = time.perf_counter()
                await worker.run_until_idle()
                costs[n].append((time.perf_counter() - t0) * 1e3)
        trips = counter.since(snap)["round_trips"] / (2 * wakes) - 1  # minus the signal
        return {"costs": costs, "round_trips": trips}


async def _polling(url: str, passes: int, cache: int) -> dict[str, Any]:
    async with bench_store(url, new_prefix("wakeups")) as store:
        counter = counting(store)
        clock = ManualClock()
        client = Client(store, clock=clock)
        worker = Worker(store, [waits, polling], clock=clock, sticky_cache=cache)
        handle = await client.start(polling, passes)
        await worker.run_until_idle()
        costs: list[float] = []
        snap = counter.snapshot()
        for _ in range(passes):
            clock.t += 600
            t0 = time.perf_counter()
            await worker.run_until_idle()
            costs.append((time.perf_counter() - t0) * 1e3)
        trips = counter.since(snap)["round_trips"]
        assert await handle.status() is RunStatus.COMPLETED
        return {"costs": costs, "round_trips": trips / passes}


async def _memory(url: str, entries: int, runs: int = 100) -> float:
    """Bytes a kept run holds (traced Python allocations with the cache on, minus
    with it off, after `runs` runs parked), for a journal of `entries` steps."""
    held = {}
    for cache in (1000, 0):
        async with bench_store(url, new_prefix("wakeups")) as store:
            clock = ManualClock()
            client = Client(store, clock=clock)
            worker = Worker(store, [waits, polling], clock=clock, sticky_cache=cache)
            for _ in range(runs):
                await client.start(waits, 1, entries)
            gc.collect()
            tracemalloc.start()
            await worker.run_until_idle()
            gc.collect()
            held[cache] = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
            sticky = worker._sticky
            if sticky is not None:
                assert len(sticky) == runs
                sticky.clear()
    return (held[1000] - held[0]) / runs


def _around(costs: list[float], at: int, width: int = 20) -> float:
    """Median cost of the `width` passes up to pass `at` (1-based)."""
    return _median(costs[max(at - width, 0) : at])


async def measure(url: str, sizes: list[int], passes: int) -> dict[str, Any]:
    out: dict[str, Any] = {"waits": [], "journal": [], "polling": []}
    for n in sizes:
        for cache in (1000, 0):
            r = await _waits(url, n, cache)
            costs = r["costs"]
            out["waits"].append({
                "n": n, "kept": bool(cache), "total_ms": sum(costs),
                "per_wake_ms": _mean(costs), "median_ms": _median(costs),
                "last_tenth_ms": _median(costs[-max(n // 10, 1):]),
                "round_trips": r["round_trips"],
            })  # fmt: skip
    for cache in (1000, 0):
        j = await _journal(url, cache)
        short, long = _median(j["costs"][10]), _median(j["costs"][1000])
        out["journal"].append({
            "kept": bool(cache), "wake_10_ms": short, "wake_1000_ms": long,
            "ratio": long / short, "round_trips": j["round_trips"],
        })  # fmt: skip
    marks = [m for m in (10, 100, 400, 800) if m <= passes]
    for cache in (1000, 0):
        r = await _polling(url, passes, cache)
        out["polling"].append({
            "kept": bool(cache), **{f"pass_{m}_ms": _around(r["costs"], m) for m in marks},
            "round_trips": r["round_trips"],
        })  # fmt: skip
    out["marks"] = marks
    out["memory"] = {f"kept_run_{n}_bytes": await _memory(url, n) for n in (10, 1000)}
    return out


def _mode(kept: bool) -> str:
    return "kept (sticky)" if kept else "replayed"


def report(r: dict[str, Any]) -> str:
    waits_t = table(
        [
            (
                f"{w['n']} waits, {_mode(w['kept'])}",
                w["total_ms"],
                w["per_wake_ms"],
                w["median_ms"],
                w["last_tenth_ms"],
                w["round_trips"],
            )
            for w in r["waits"]
        ],
        [
            "flow that waits N times",
            "total ms",
            "mean/wake ms",
            "median ms",
            "last 10% median",
            "trips/wake",
        ],
    )
    journal_t = table(
        [
            (_mode(j["kept"]), j["wake_10_ms"], j["wake_1000_ms"], j["ratio"], j["round_trips"])
            for j in r["journal"]
        ],
        ["wake-up of a run", "10 entries ms", "1,000 entries ms", "ratio", "trips/wake"],
    )
    marks = r["marks"]
    polling_t = table(
        [
            (_mode(p["kept"]), *(p[f"pass_{m}_ms"] for m in marks), p["round_trips"])
            for p in r["polling"]
        ],
        ["polling flow, per pass", *(f"pass {m} ms" for m in marks), "trips/pass"],
    )
    mem = r["memory"]
    memory = (
        f"memory per kept run: {mem['kept_run_10_bytes'] / 1024:.0f} KiB (10-entry journal), "
        f"{mem['kept_run_1000_bytes'] / 1024:.0f} KiB (1,000 entries)"
    )
    return f"{waits_t}\n\n{journal_t}\n\n{polling_t}\n\n{memory}"


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--waits", default="10,100,1000", help="comma-separated wait counts")
    p.add_argument("--passes", type=int, default=800)
    a = p.parse_args()
    sizes = [int(x) for x in a.waits.split(",") if x]
    r = asyncio.run(measure(a.store, sizes, a.passes))
    print(report(r))
    emit("wakeups", r, a.json)


if __name__ == "__main__":
    main()
