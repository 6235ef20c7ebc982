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
VM whose speed moves by the minute. (Redis's figure is its cost at this
load: a busier server spends less per call, so it is no hard ceiling.)

After each round, the store alone: as many runs, claimed directly, each
writing as many step records (with the ``step.completed`` event a step's
write carries) through the same store from a coroutine of its own, with no
engine (no flow, no worker): what this process, this client and this Redis
do without the engine's Python. Printed: its records/s, the round's
steps/s as a share of it (a ratio measured in one run, which the VM's drift
moves less than either figure), and its CPU per record, so the worker's CPU
per step splits into the store's path and the engine's own.

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
from bench.step_overhead import STEP_COMPLETED
from sdk import Client, RunStatus, Worker
from sdk._core._journal import Kind, Record, State
from stores.redis import RedisStore

__all__ = ["main", "measure", "store_alone"]


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
    # the store alone, per round: records/s, CPU µs per record of this process, of Redis
    alone: list[tuple[float, float, float | None]] = []
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
                alone.append(await store_alone(store, client, runs, steps))
    alone_server = [a[2] for a in alone if a[2] is not None]
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
        "store_alone_records_per_s": statistics.median(a[0] for a in alone),
        "store_alone_records_per_s_all": [a[0] for a in alone],
        "store_alone_cpu_us_per_record": statistics.median(a[1] for a in alone),
        "store_alone_redis_cpu_us_per_record": statistics.median(alone_server)
        if alone_server
        else None,
        # each round's steps/s over its own store-alone records/s
        "share_of_store_alone": statistics.median(
            r / a[0] for r, a in zip(rates, alone, strict=True)
        ),
        "runs_not_completed": failed,
        "machine": host,
        "pool_max_connections": store_kwargs.get("max_connections", "store default"),
    }


async def store_alone(
    store: RedisStore, client: Client, runs: int, steps: int
) -> tuple[float, float, float | None]:
    """The store with no engine: `runs` runs claimed here, each writing `steps` step
    records from a coroutine of its own, all at once (as `runs` activations of one
    worker write them). Returns records/s and the CPU µs per record of this
    process and of Redis (None on a cluster)."""
    for _ in range(runs):
        await client.start(flows.wait_once)  # a flow no worker serves here
    claims = await store.claim("bench-store-alone", None, runs, time.time(), 600.0)
    texts = [
        (f"noop#{i}", Record(f"noop#{i}", i, Kind.STEP, State.OK, value=i, r=i).to_json())
        for i in range(1, steps + 1)
    ]

    async def one(run_id: str, fence: int) -> None:
        for key, text in texts:
            if not await store.record(run_id, fence, key, text, now=time.time(),
                                      event=STEP_COMPLETED):  # fmt: skip
                raise RuntimeError(f"bench: run {run_id!r}: step record {key!r} refused")

    server0 = await _server_cpu(store)
    c0 = time.process_time()
    t0 = time.perf_counter()
    await asyncio.gather(*(one(c.run.run_id, c.run.fence) for c in claims))
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    server1 = await _server_cpu(store)
    n = len(claims) * steps
    server = None if server0 is None or server1 is None else (server1 - server0) / n * 1e6
    return n / wall, cpu / n * 1e6, server


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
            ("  ceiling at this load: 10^6 / that", 1e6 / server if server else float("nan")),
        ]
    store_cpu = r["store_alone_cpu_us_per_record"]
    rows += [
        ("store alone (no engine), records/s", r["store_alone_records_per_s"]),
        ("  steps/s / that, per round", r["share_of_store_alone"]),
        ("store alone: CPU per record, µs", store_cpu),
        ("engine's own CPU per step, µs (worker - that)", cpu - store_cpu),
    ]
    if r["store_alone_redis_cpu_us_per_record"] is not None:
        rows.append(("store alone: Redis CPU per record, µs",
                     r["store_alone_redis_cpu_us_per_record"]))  # fmt: skip
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
