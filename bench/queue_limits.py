"""Claim throughput with a queue concurrency limit against without, in the same run.

Two measures, each on a queue without limits and on a ``Queue(concurrency=...)``:

- *claim only*: `--runs` ready runs claimed one claim at a time (``Store.claim``
  with limit 1, the limit high enough never to hold a run back, so both sides
  claim the same runs): claims per second and round trips per claim. The limit
  is checked inside the claim script: it adds no round trip.
- *end to end*: a worker (``--worker-concurrency``) executes `--runs` one-step
  runs; the limited queue allows ``--limit`` at once (fewer than the worker's
  slots, so the limit binds): runs per second, worker polls and round trips per run.
  A run that ends frees its slot and wakes the worker, so a binding limit costs
  no polling either.

    python -m bench.queue_limits [--runs 5000] [--limit 8] [--worker-concurrency 16] [--store URL]
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench._common import bench_store, counting, emit, new_prefix, parser, table
from sdk import Client, Queue, Registry, Worker, flow, step
from sdk.store import QueueLimits

__all__ = ["main", "measure"]


@step(name="bench.queue_limits.work")
async def work(n: int) -> int:
    return n + 1


@flow(name="bench.queue_limits.free", queue="bench.free", registry=Registry())
async def free(n: int) -> int:
    return await work(n)


async def _start(client: Client, fn: Any, runs: int, queue: str) -> None:
    for start in range(0, runs, 500):
        ids = range(start, min(start + 500, runs))
        await asyncio.gather(*(client.start(fn, i, queue=queue) for i in ids))


async def claim_only(url: str, runs: int, limited: bool) -> dict[str, Any]:
    """Claim `runs` ready runs one at a time; with `limited`, under a (never binding) limit."""
    queue = "bench.limited" if limited else "bench.free"
    limits = [QueueLimits(queue, concurrency=runs + 1)] if limited else []
    async with bench_store(url, new_prefix("queue-limits")) as store:
        count = counting(store)
        await _start(Client(store, registry=Registry(free)), free, runs, queue)
        await store.claim("warm", [queue], 0, 0.0, 60.0, limits=limits)  # script loaded
        snap = count.snapshot()
        began = time.perf_counter()
        claimed = 0
        while True:
            got = await store.claim("bench", None, 1, time.time(), 60.0, limits=limits)
            if not got:
                break
            claimed += len(got)
        secs = time.perf_counter() - began
        used = count.since(snap)
    assert claimed == runs, (claimed, runs)
    return {
        "claims_per_s": round(claimed / secs),
        "round_trips_per_claim": round(used["round_trips"] / claimed, 3),
    }


async def end_to_end(url: str, runs: int, limit: int | None, slots: int) -> dict[str, Any]:
    """A worker with `slots` executes `runs` one-step runs of a queue allowing `limit` at once."""
    registry = Registry(free)
    queue = "bench.free"
    if limit is not None:
        queue = "bench.limited"
        registry.add(Queue(queue, concurrency=limit))
    async with bench_store(url, new_prefix("queue-limits")) as store:
        count = counting(store)
        await _start(Client(store, registry=registry), free, runs, queue)
        worker = Worker(store, concurrency=slots, registry=registry)
        snap = count.snapshot()
        began = time.perf_counter()
        await worker.run_until_idle()
        secs = time.perf_counter() - began
        used = count.since(snap)
    return {
        "runs_per_s": round(runs / secs),
        "polls_per_run": round(used["scripts"].get("poll", 0) / runs, 3),
        "round_trips_per_run": round(used["round_trips"] / runs, 3),
    }


async def measure(url: str, runs: int, limit: int, slots: int) -> dict[str, Any]:
    return {
        "runs": runs,
        "limit": limit,
        "worker_concurrency": slots,
        "claim_only": {
            "no_limit": await claim_only(url, runs, limited=False),
            "concurrency_limit": await claim_only(url, runs, limited=True),
        },
        "end_to_end": {
            "no_limit": await end_to_end(url, runs, None, slots),
            "concurrency_limit": await end_to_end(url, runs, limit, slots),
        },
    }


def report(r: dict[str, Any]) -> str:
    rows = []
    for case in ("no_limit", "concurrency_limit"):
        c, e = r["claim_only"][case], r["end_to_end"][case]
        rows.append(
            (
                case.replace("_", " "), c["claims_per_s"], c["round_trips_per_claim"],
                e["runs_per_s"], e["polls_per_run"], e["round_trips_per_run"],
            )
        )  # fmt: skip
    header = [
        "queue",
        "claims/s",
        "round trips/claim",
        f"runs/s (limit {r['limit']} of {r['worker_concurrency']} slots)",
        "polls/run",
        "round trips/run",
    ]
    return table(rows, header)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5000)
    p.add_argument("--limit", type=int, default=8)
    p.add_argument("--worker-concurrency", type=int, default=16)
    a = p.parse_args()
    result = asyncio.run(measure(a.store, a.runs, a.limit, a.worker_concurrency))
    print(report(result))
    emit("queue_limits", result, a.json)


if __name__ == "__main__":
    main()
