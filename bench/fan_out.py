"""A 1,000-child fan-out: round trips and wall time.

A parent flow runs ``asyncio.gather(*(run_child(child, i) for i in range(N)))``
(default N = 1,000; each child runs one step). Measured on one store:

1. **The start.** A worker that serves only the parent claims it and runs it
   until it parks: its children are started in one batch (one pipeline of
   starts, one of journal records), so the round trips do not grow with N.
2. **The whole fan-out.** Workers that serve both flows run everything to the
   end (children, their ends reaching the parent, the parent's wake-ups):
   wall time, round trips, and how many activations the parent took.

    python -m bench.fan_out [--children 1000] [--partitions 1,4] [--workers 2] [--store URL]
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench._common import bench_store, counting, emit, new_prefix, parser, table
from sdk import Client, Worker, flow, run_child, step

__all__ = ["main", "measure"]


@step(name="bench.fan.work")
async def work(i: int) -> int:
    return i * 2


@flow(name="bench.fan.child")
async def child(i: int) -> int:
    return await work(i)


@flow(name="bench.fan.parent")
async def parent(n: int) -> int:
    return sum(await asyncio.gather(*(run_child(child, i) for i in range(n))))


async def measure(url: str, children: int, partitions: int, workers: int) -> dict[str, Any]:
    prefix = new_prefix("fan-out")
    async with bench_store(url, prefix, partitions=partitions) as store:
        count = counting(store)
        client = Client(store)
        await client.start(child, -1, run_id="warm-up")  # connections made, scripts loaded
        await Worker(store, flows=[child]).run_until_idle()

        # 1. the parent's first activation: start every child, park
        handle = await client.start(parent, children, run_id="fan")
        snap = count.snapshot()
        t0 = time.perf_counter()
        await Worker(store, flows=[parent], concurrency=1).run_until_idle()
        start_ms = (time.perf_counter() - t0) * 1000
        start = count.since(snap)
        started = len(await client.list_runs(parent_run_id="fan", limit=children + 1))
        assert started == children, started

        # 2. everything to the end: children, their ends, the parent's wake-ups
        snap = count.snapshot()
        t0 = time.perf_counter()
        pool = [Worker(store, concurrency=64) for _ in range(workers)]
        tasks = [asyncio.create_task(w.run()) for w in pool]
        result = await handle.result(timeout=600)
        total_s = time.perf_counter() - t0
        for w in pool:
            await w.stop()
        await asyncio.gather(*tasks)
        rest = count.since(snap)
        assert result == sum(2 * i for i in range(children)), result
        events = await client.events("fan", limit=100_000)
        # each activation but the last parks (its run.waiting_for_signal event)
        activations = 1 + sum(1 for e in events if e.type == "run.waiting_for_signal")
    return {
        "children": children,
        "partitions": partitions,
        "workers": workers,
        "start": {
            "round_trips": start["round_trips"],
            "scripts": dict(start["scripts"]),
            "ms": round(start_ms, 1),
        },
        "total": {
            "s": round(total_s, 2),
            "round_trips": rest["round_trips"],
            "round_trips_per_child": round(rest["round_trips"] / children, 1),
            "parent_activations": activations,
        },
    }


HEADER = [
    "children",
    "partitions",
    "start: round trips",
    "start ms",
    "all: s",
    "all: round trips / child",
    "parent activations",
]


def report(results: list[dict[str, Any]]) -> str:
    rows = [
        (
            r["children"], r["partitions"], r["start"]["round_trips"], r["start"]["ms"],
            r["total"]["s"], r["total"]["round_trips_per_child"],
            r["total"]["parent_activations"],
        )
        for r in results
    ]  # fmt: skip
    return table(rows, HEADER)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--children", type=int, default=1000)
    p.add_argument("--partitions", default="1,4", help="comma-separated partition counts")
    p.add_argument("--workers", type=int, default=2, help="workers for the whole fan-out")
    a = p.parse_args()
    results = [
        asyncio.run(measure(a.store, a.children, int(n), a.workers))
        for n in a.partitions.split(",")
    ]
    print(report(results))
    for r in results:
        print("start scripts:", r["start"]["scripts"])
        emit("fan_out", r, a.json)


if __name__ == "__main__":
    main()
