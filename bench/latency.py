"""Start-to-result latency of a trivial flow, client and worker in separate processes.

The benchmark spawns ``python -m sdk.worker bench.flows`` (its own key prefix),
warms it up, then starts runs one after another from this process and awaits
each result: latency = ``Client.start`` called -> ``RunHandle.result()``
returned. Two flows: ``bench.trivial`` (no step) and ``bench.one_step``.

Each run's record also gives where the time went (wall clocks of both
processes, same machine): pickup (created, i.e. the client's clock read in
``start``, -> claimed by the worker: the start script, the wake-up and the
worker's poll), execute (claimed -> finished), notify (finished ->
``result()`` returned in the client). Pickup + execute + notify ~= the
total; ``start()`` returning (its round trip) overlaps with the pickup.

    python -m bench.latency [--runs 500] [--warmup 50] [--store URL]
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import flows
from bench._common import bench_store, emit, new_prefix, parser, summary, table
from sdk import Client
from sdk.model._registry import flow_def_of

__all__ = ["main", "measure"]

_ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def worker_process(
    url: str, prefix: str, concurrency: int = 16
) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m sdk.worker bench.flows`` in a child process, stopped by SIGTERM at the end."""
    log = tempfile.NamedTemporaryFile(prefix="sfbench-worker-", suffix=".log", delete=False)  # noqa: SIM115
    path = os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sdk.worker", "bench.flows", "--store", url, "--prefix", prefix,
         "--concurrency", str(concurrency), "--log-level", "WARNING"],
        cwd=_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        text = Path(log.name).read_text(errors="replace").strip()
        if text:
            print(f"worker log ({log.name}):\n{text[-2000:]}", file=sys.stderr)
        else:
            os.unlink(log.name)


async def _series(client: Client, fn: Any, runs: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {k: [] for k in ("total", "start", "pickup", "execute", "notify")}
    for _ in range(runs):
        t0 = time.perf_counter()
        handle = await client.start(fn)
        t1 = time.perf_counter()
        await handle.result(timeout=30)
        t2 = time.perf_counter()
        w2 = time.time()
        rec = await client.get(handle.run_id)
        assert rec.started_at is not None and rec.finished_at is not None
        created = rec.created_at.timestamp()
        started, finished = rec.started_at.timestamp(), rec.finished_at.timestamp()
        out["total"].append(t2 - t0)
        out["start"].append(t1 - t0)
        out["pickup"].append(started - created)
        out["execute"].append(finished - started)
        out["notify"].append(w2 - finished)
    return out


async def measure(url: str, runs: int = 500, warmup: int = 50) -> dict[str, Any]:
    prefix = new_prefix("latency")
    results: dict[str, Any] = {"runs": runs}
    async with bench_store(url, prefix) as store:
        client = Client(store)
        with worker_process(url, prefix) as proc:
            first = await client.start(flows.trivial)
            t0 = time.perf_counter()
            while True:  # the worker process is up once it answers
                try:
                    await first.result(timeout=1)
                    break
                except TimeoutError:
                    if proc.poll() is not None or time.perf_counter() - t0 > 60:
                        raise RuntimeError("the worker process did not start") from None
            for fn in (flows.trivial, flows.one_step):
                await _series(client, fn, warmup)
                series = await _series(client, fn, runs)
                fd = flow_def_of(fn)
                assert fd is not None
                name = fd.name
                results[name] = {k: summary(v, 1e3) for k, v in series.items()}
    results["latency_median_ms"] = results["bench.trivial"]["total"]["median"]
    return results


def report(r: dict[str, Any]) -> str:
    out = [f"start-to-result latency, worker in another process, {r['runs']} sequential runs"]
    for name in ("bench.trivial", "bench.one_step"):
        s = r[name]
        rows = [
            ("start -> result", s["total"]),
            ("  pickup (created -> claimed)", s["pickup"]),
            ("  execute (claimed -> finished)", s["execute"]),
            ("  notify (finished -> result)", s["notify"]),
            ("start() returned (overlaps pickup)", s["start"]),
        ]
        out.append(f"\n{name}")
        out.append(
            table([(n, q["median"], q["p90"], q["p99"]) for n, q in rows],
                  ["ms", "median", "p90", "p99"])
        )  # fmt: skip
    return "\n".join(out)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=500)
    p.add_argument("--warmup", type=int, default=50)
    a = p.parse_args()
    r = asyncio.run(measure(a.store, a.runs, a.warmup))
    print(report(r))
    emit("latency", r, a.json)


if __name__ == "__main__":
    main()
