"""Aggregate steps/s with 1, 2 and 4 worker processes, on one Redis and on a
3-master Redis Cluster, and the Redis server CPU each step costs there.

Both servers are the bench's own (redis-server on free loopback ports; the
cluster made with ``redis-cli --cluster create``), stopped by pid at the end,
so their CPU counters see this bench alone. Per configuration: `runs` runs of
a flow of `steps` trivial steps are queued, the worker processes start and
connect, then all are told to go at once; steps/s = runs * steps / the time
from "go" to the last run finished. Server CPU per step is the growth of
``used_cpu_sys + used_cpu_user`` (``INFO cpu``, every master) over that time,
divided by the steps. ``INFO commandstats`` adds the script calls per step
(``EVALSHA``/``EVAL``: every store operation is one) and the time spent in
them (wall time inside the call, so a busy machine inflates it: the commands
a script runs are also counted on their own lines, which are left out); the
rest of the CPU is network I/O and the event loop. ``1 core / CPU per step``
is the ceiling of one node (Redis runs commands on one thread). It also
counts the connections a waiting worker holds on the cluster with 8 and 64
partitions (one subscribed per master, whatever the partitions:
``stores._wakeups``).

    python -m bench.scaling [--runs 200] [--steps 50] [--processes 1,2,4]
                            [--partitions 16] [--masters 3] [--concurrency 50] [--json]

It prints figures; it asserts nothing. On a machine with fewer cores than
worker processes + servers, the processes compete for CPU: the server CPU per
step stays meaningful, the aggregate steps/s then measures the machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import redis

from bench import flows
from bench._common import emit, new_prefix, parser, private_redis, table
from bench._localcluster import LocalCluster, cluster_tools
from sdk import Client, RunStatus, Worker
from stores import open_store

__all__ = ["main", "measure"]


# -- a worker process --------------------------------------------------------------


async def serve(url: str, prefix: str, partitions: int, concurrency: int) -> None:
    """One worker process: connect, say "ready", wait for "go" on stdin, serve until SIGTERM."""
    store = open_store(url, prefix=prefix, partitions=partitions)
    worker = Worker(store, [flows.chain], concurrency=concurrency)
    await store.list_runs(None, None, 1)  # connected (and the cluster's slot map read)
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.readline)
    stopping: set[asyncio.Task[None]] = set()
    loop.add_signal_handler(signal.SIGTERM, lambda: stopping.add(loop.create_task(worker.stop())))
    try:
        await worker.run()
    finally:
        await store.close()


# -- the servers ---------------------------------------------------------------------


def server_cpu(nodes: Sequence[tuple[str, int]]) -> tuple[float, float, int]:
    """(CPU seconds, seconds in script calls, script calls) of the servers so far."""
    cpu = in_scripts = 0.0
    calls = 0
    for host, port in nodes:
        with redis.Redis(host=host, port=port) as r:
            info: Any = r.info("cpu")
            cpu += float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
            stats: Any = r.info("commandstats")
            for name in ("cmdstat_evalsha", "cmdstat_eval"):
                in_scripts += float(stats.get(name, {}).get("usec", 0)) / 1e6
                calls += int(stats.get(name, {}).get("calls", 0))
    return cpu, in_scripts, calls


def masters_of(cluster: LocalCluster) -> list[tuple[str, int]]:
    return [("127.0.0.1", p) for p in cluster.master_ports()]


def delete_prefix(nodes: Sequence[tuple[str, int]], prefix: str) -> None:
    for host, port in nodes:
        # one key per UNLINK: on a cluster node one command's keys share a slot
        with redis.Redis(host=host, port=port) as r, r.pipeline(transaction=False) as pipe:
            for key in r.scan_iter(match=f"{prefix}:*", count=1000):
                pipe.unlink(key)
            pipe.execute()


@contextlib.contextmanager
def one_node() -> Iterator[tuple[str, list[tuple[str, int]]]]:
    with private_redis() as url:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        yield url, [("127.0.0.1", port)]


@contextlib.contextmanager
def cluster_of(masters: int) -> Iterator[LocalCluster]:
    if cluster_tools() is None:
        raise SystemExit("the cluster half needs redis-server and redis-cli on PATH")
    with tempfile.TemporaryDirectory(prefix="sf-scaling-") as d:
        cluster = LocalCluster(Path(d), masters=masters)
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()


# -- one configuration ----------------------------------------------------------------


async def measure(
    url: str,
    nodes: Sequence[tuple[str, int]],
    processes: int,
    *,
    partitions: int,
    runs: int,
    steps: int,
    concurrency: int,
) -> dict[str, Any]:
    prefix = new_prefix("scaling")
    store = open_store(url, prefix=prefix, partitions=partitions)
    procs: list[asyncio.subprocess.Process] = []
    try:
        await store.list_runs(None, None, 1)  # connected (and the cluster's slot map read)
        client = Client(store)
        handles = [await client.start(flows.chain, steps) for _ in range(runs)]
        for _ in range(processes):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.scaling", "--serve", url, prefix,
                str(partitions), str(concurrency),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            )  # fmt: skip
            procs.append(proc)
        for proc in procs:
            assert proc.stdout is not None
            if (await proc.stdout.readline()).strip() != b"ready":
                raise SystemExit("a worker process did not start")
        cpu0, in0, calls0 = server_cpu(nodes)
        t0 = time.perf_counter()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
        for h in handles:
            while not await store.wait_finished(h.run_id, 5.0):
                pass
        wall = time.perf_counter() - t0
        cpu1, in1, calls1 = server_cpu(nodes)
        done = 0
        for h in handles:
            done += (await client.get(h.run_id)).status is RunStatus.COMPLETED
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)  # by pid: these processes are ours
        for proc in procs:
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        await store.close()
        delete_prefix(nodes, prefix)
    total = runs * steps
    return {
        "processes": processes,
        "steps_per_s": total / wall,
        "server_cpu_us_per_step": (cpu1 - cpu0) / total * 1e6,
        "script_calls_per_step": (calls1 - calls0) / total,
        "in_scripts_us_per_step": (in1 - in0) / total * 1e6,
        "server_cpu_share": (cpu1 - cpu0) / wall,  # cores busy, all masters together
        "runs_not_completed": runs - done,
    }


async def waiting_connections(url: str, nodes: Sequence[tuple[str, int]], partitions: int) -> int:
    """New server connections while one store waits for runs and for intents."""

    def clients() -> set[tuple[int, str]]:
        out: set[tuple[int, str]] = set()
        for host, port in nodes:
            with redis.Redis(host=host, port=port, decode_responses=True) as r:
                out |= {(port, c["id"]) for c in r.client_list() if c["cmd"] != "client|list"}
        return out

    store = open_store(url, prefix=new_prefix("scaling-conns"), partitions=partitions)
    try:
        await store.list_runs(None, None, 1)  # connected
        before = clients()
        waits = [
            asyncio.create_task(store.wait_ready(None, 5.0)),
            asyncio.create_task(store.wait_intents(["email"], 5.0)),
        ]
        await asyncio.sleep(1.0)
        held = len(clients() - before)
        for t in waits:
            t.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
    finally:
        await store.close()
    return held


# -- the bench ------------------------------------------------------------------------------


async def run_all(args: Any) -> dict[str, Any]:
    counts = [int(n) for n in args.processes.split(",")]
    sizes = {"runs": args.runs, "steps": args.steps, "concurrency": args.concurrency}
    figures: dict[str, Any] = {"runs": args.runs, "steps_per_run": args.steps,
                               "concurrency": args.concurrency, "cpus": os.cpu_count()}  # fmt: skip
    with one_node() as (url, nodes):
        figures["one_node"] = [await measure(url, nodes, n, partitions=1, **sizes) for n in counts]
    with cluster_of(args.masters) as cluster:
        url = "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in cluster.ports)
        masters = masters_of(cluster)
        figures["cluster"] = [
            await measure(url, masters, n, partitions=args.partitions, **sizes) for n in counts
        ]
        figures["cluster_masters"] = len(masters)
        figures["cluster_partitions"] = args.partitions
        figures["waiting_worker_connections"] = {
            n: await waiting_connections(url, masters, n) for n in (8, 64)
        }
    return figures


def report(figures: dict[str, Any]) -> None:
    rows = []
    for label, key in (
        ("1 node", "one_node"),
        (f"{figures['cluster_masters']} masters", "cluster"),
    ):
        for r in figures[key]:
            rows.append([
                label, r["processes"], f"{r['steps_per_s']:.0f}",
                f"{r['server_cpu_us_per_step']:.1f}", f"{r['script_calls_per_step']:.2f}",
                f"{r['in_scripts_us_per_step']:.1f}",
                f"{r['server_cpu_share']:.2f}", r["runs_not_completed"],
            ])  # fmt: skip
    print(
        f"{figures['runs']} runs x {figures['steps_per_run']} steps, worker concurrency "
        f"{figures['concurrency']}, {figures['cpus']} CPUs; cluster: "
        f"{figures['cluster_partitions']} partitions"
    )
    header = ["store", "worker procs", "steps/s", "server CPU µs/step", "script calls/step",
              "in scripts µs/step", "server cores busy", "not completed"]  # fmt: skip
    print(table(rows, header))
    best = min(r["server_cpu_us_per_step"] for r in figures["one_node"])
    print(f"one node's ceiling (1 core / {best:.1f} µs per step): {1e6 / best:.0f} steps/s")
    held = figures["waiting_worker_connections"]
    print(
        "connections a waiting worker (runs + outbox) holds on the cluster: "
        + ", ".join(f"{n} partitions: {c}" for n, c in held.items())
    )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        url, prefix, partitions, concurrency = sys.argv[2:6]
        asyncio.run(serve(url, prefix, int(partitions), int(concurrency)))
        return
    p = parser(__doc__.split("\n\n", 1)[0] if __doc__ else "scaling")
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--processes", default="1,2,4", help="worker process counts (default 1,2,4)")
    p.add_argument("--partitions", type=int, default=16, help="of the cluster store")
    p.add_argument("--masters", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=50, help="of each worker process")
    args = p.parse_args()
    figures = asyncio.run(run_all(args))
    report(figures)
    emit("scaling", figures, args.json)


if __name__ == "__main__":
    main()
