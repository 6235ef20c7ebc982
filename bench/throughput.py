"""Aggregate steps/s of one worker process executing 100 runs at once.

100 runs of a flow of N trivial steps are started (queued) first; then one
in-process `Worker(concurrency=100)` executes them all. Throughput = steps
completed / wall time from the worker starting to the last run finishing
(claims, step records and finishes included).

It also prints what each step cost the two processes involved, per round:
the worker process's CPU time (``time.process_time`` around the worker's
run) and the Redis server's (``INFO cpu``, the server's whole process, so
other clients of the same server count too), both per completed step. One
worker process uses at most one core and one Redis at most one, so 10^6 /
each is a ceiling on steps/s that holds on the machine it was measured on;
the lower one is what limits the figure, and comparing the per-step CPU of
two engines (or two machines) says more than comparing their steps/s on a
VM whose speed moves by the minute.

    python -m bench.throughput [--runs 100] [--steps 200] [--rounds 3] [--store URL] [--profile]
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from bench import flows
from bench._common import (
    bench_store,
    emit,
    machine,
    machine_line,
    new_prefix,
    parser,
    profiled,
    table,
)
from sdk import Client, RunStatus, Worker
from stores.redis import RedisStore

__all__ = ["main", "measure"]


async def measure(
    url: str,
    runs: int = 100,
    steps: int = 200,
    rounds: int = 3,
    concurrency: int | None = None,
    profile: bool = False,
    **store_kwargs: Any,
) -> dict[str, Any]:
    conc = concurrency or runs
    host = machine()  # before any work of ours
    rates: list[float] = []
    worker_cpu: list[float] = []  # µs of the worker process's CPU per step, per round
    redis_cpu: list[float] = []  # µs of the Redis server's CPU per step, per round
    failed = 0
    async with bench_store(url, new_prefix("throughput"), **store_kwargs) as store:
        client = Client(store)
        worker = Worker(store, [flows.chain], concurrency=conc)
        for n in range(rounds + 1):  # round 0 warms up (connections, scripts)
            handles = [await client.start(flows.chain, steps) for _ in range(runs)]
            server0 = await _server_cpu(store)
            c0 = time.process_time()
            t0 = time.perf_counter()
            with profiled(profile and n == 1):
                await worker.run_until_idle()
            wall = time.perf_counter() - t0
            cpu = time.process_time() - c0
            server1 = await _server_cpu(store)
            for h in handles:
                if (await client.get(h.run_id)).status is not RunStatus.COMPLETED:
                    failed += 1
            if n:
                rates.append(runs * steps / wall)
                worker_cpu.append(cpu / (runs * steps) * 1e6)
                if server0 is not None and server1 is not None:
                    redis_cpu.append((server1 - server0) / (runs * steps) * 1e6)
    return {
        "runs": runs,
        "steps_per_run": steps,
        "concurrency": conc,
        "rounds": rounds,
        "steps_per_s": statistics.median(rates),
        "steps_per_s_best": max(rates),
        "steps_per_s_all": rates,
        "worker_cpu_us_per_step": statistics.median(worker_cpu),
        "worker_cpu_us_per_step_all": worker_cpu,
        "redis_cpu_us_per_step": statistics.median(redis_cpu) if redis_cpu else None,
        "redis_cpu_us_per_step_all": redis_cpu,
        "runs_not_completed": failed,
        "machine": host,
        "pool_max_connections": store_kwargs.get("max_connections", "store default"),
    }


async def _server_cpu(store: RedisStore) -> float | None:
    """Seconds of CPU the Redis server has used (``INFO cpu``), or None on a cluster
    (no one server to ask)."""
    if store.cluster:
        return None
    info = await store.client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def report(r: dict[str, Any]) -> str:
    rows: list[tuple[str, Any]] = [
        ("median of rounds", r["steps_per_s"]),
        ("best round", r["steps_per_s_best"]),
    ]
    cpu = r["worker_cpu_us_per_step"]
    rows += [
        ("worker CPU per step, µs", cpu),
        ("  ceiling: 10^6 / that, steps/s", 1e6 / cpu if cpu else float("nan")),
    ]
    server = r["redis_cpu_us_per_step"]
    if server is not None:
        rows += [
            ("Redis CPU per step, µs", server),
            ("  ceiling: 10^6 / that, steps/s", 1e6 / server if server else float("nan")),
        ]
    text = (
        f"throughput: {r['runs']} runs x {r['steps_per_run']} steps, "
        f"Worker(concurrency={r['concurrency']}), {r['rounds']} rounds, "
        f"pool max_connections={r['pool_max_connections']}\n"
        + table(rows, ["per round, median of rounds", "figure"])
        + f"\n{machine_line(r['machine'])}"
    )
    if r["runs_not_completed"]:
        text += (
            f"\nWARNING: {r['runs_not_completed']} run(s) did not complete "
            "(see the worker's log above)"
        )
    return text


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=None, help="default: --runs")
    p.add_argument("--profile", action="store_true", help="cProfile the first measured round")
    p.add_argument(
        "--max-connections",
        type=int,
        default=None,
        help="size of the store's command pool (default: the store's own)",
    )
    a = p.parse_args()
    extra: dict[str, Any] = {"max_connections": a.max_connections} if a.max_connections else {}
    r = asyncio.run(measure(a.store, a.runs, a.steps, a.rounds, a.concurrency, a.profile, **extra))
    print(report(r))
    emit("throughput", r, a.json)


if __name__ == "__main__":
    main()
