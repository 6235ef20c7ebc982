"""Live event streams of ``steadyflow serve``: the server's Redis connections and
``/healthz`` latency with N streams open (issue 30).

For each N: a private ``redis-server``, a real ``steadyflow serve bench.streams``
process on it, `--runs` runs (started through the API, waiting for a signal no
worker will ever take: their logs grow only by the signals sent), N SSE
streams over them (one token per `--per-token` streams, so no token is over its
limit), then for `--seconds` seconds signals at up to `--rate` a second (each
appends an event every stream of that run receives) while ``/healthz`` is
probed 20 times a second from a process of its own (each probe on a new
connection, timeout 1 s, as a Kubernetes probe). Printed per N: streams open
(and refused), the Redis connections the server holds (``CLIENT LIST`` less
the bench's own) with no stream, with the streams open and at the peak of the
events, how many the streams added, ``/healthz`` median, p95, max and
failures, and how many streams got every event of their run, in order.

    python -m bench.streams [--streams 200,600,1800] [--runs 20] [--rate 20]
        [--seconds 10] [--per-token 50] [--json]

A server with stream limits (``--max-streams``) is given limits above N.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import redis

from bench._common import emit, machine, machine_line, pct, private_redis, table
from sdk import flow, wait_for

__all__ = ["main", "waiter"]

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "sfbench-streams"


@flow(name="bench.streams.waiter")
async def waiter() -> Any:
    """Waits for a signal (no worker runs it: its log grows by the signals sent)."""
    return await wait_for("never")


def _token(n: int) -> str:
    return f"bench-streams-token-{n:06d}"


@contextlib.contextmanager
def serving(url: str, tokens: int, streams: int) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``steadyflow serve bench.streams`` on `url`; its base URL and process."""
    with contextlib.closing(__import__("socket").socket()) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    helped = subprocess.run(
        [sys.executable, "-m", "sdk.cli", "serve", "--help"], capture_output=True, text=True,
        check=True, cwd=ROOT,
    ).stdout  # fmt: skip
    limits = []
    if "--max-streams" in helped:  # a server with stream limits: above what we open
        limits = ["--max-streams", str(streams + 100), "--max-streams-per-actor", "100000"]
    env = {
        **os.environ,
        "STEADYFLOW_API_TOKENS": ",".join(f"{_token(n)}=bench{n}:operator" for n in range(tokens)),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "sdk.cli", "serve", "bench.streams", "--store", url,
         "--prefix", PREFIX, "--port", str(port), "--log-level", "warning", *limits],
        cwd=ROOT, env=env,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            if proc.poll() is not None:
                raise SystemExit("steadyflow serve exited")
            try:
                httpx.get(f"{base}/healthz", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        yield base, proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def connections(admin: redis.Redis) -> int:
    """Clients connected to the private Redis, less `admin`'s own one."""
    return len(admin.client_list()) - 1


class Follower:
    """One SSE stream: the event ids it received, in order."""

    def __init__(self, http: httpx.AsyncClient, run_id: str, token: str) -> None:
        self.http = http
        self.run_id = run_id
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
        self.ids: list[str] = []
        self.status = 0
        self.opened = asyncio.Event()

    async def run(self) -> None:
        try:
            async with self.http.stream(
                "GET", f"/v1/runs/{self.run_id}/events", headers=self.headers
            ) as answer:
                self.status = answer.status_code
                if answer.status_code != 200:
                    return
                async for line in answer.aiter_lines():
                    if line.startswith("id: "):
                        self.ids.append(line[4:])
                        self.opened.set()
        except httpx.HTTPError:
            self.status = self.status or -1
        finally:
            self.opened.set()


def probe(base: str, seconds: float) -> tuple[list[float], int]:
    """``GET /healthz`` 20 times a second, each on a new connection with a 1 s timeout:
    latencies in ms and failures. Run in a process of its own (`probing`), so the
    bench's own streams do not slow the prober down."""
    times: list[float] = []
    failed = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        began = time.perf_counter()
        try:
            with httpx.Client(timeout=1.0) as http:
                answer = http.get(f"{base}/healthz")
            if answer.status_code != 200:
                failed += 1
            else:
                times.append((time.perf_counter() - began) * 1000)
        except httpx.HTTPError:
            failed += 1
        time.sleep(max(0.05 - (time.perf_counter() - began), 0.0))
    return times, failed


async def probing(base: str, seconds: float) -> tuple[list[float], int]:
    with concurrent.futures.ProcessPoolExecutor(1) as pool:
        return await asyncio.get_running_loop().run_in_executor(pool, probe, base, seconds)


async def one(
    url: str, n: int, runs: int, rate: float, seconds: float, per_token: int
) -> dict[str, Any]:
    tokens = max(1, -(-n // per_token))
    admin = redis.Redis.from_url(url, decode_responses=True)
    admin.flushall()
    with serving(url, tokens, n) as (base, _proc):
        limits = httpx.Limits(max_connections=n + 50, max_keepalive_connections=n + 50)
        auth = {"Authorization": f"Bearer {_token(0)}"}
        async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as http:
            ids = [f"bench-stream-{r:04d}" for r in range(runs)]
            for run_id in ids:
                started = await http.post(
                    "/v1/runs", json={"flow": "bench.streams.waiter", "run_id": run_id},
                    headers=auth,
                )  # fmt: skip
                assert started.status_code == 201, started.text
            idle = connections(admin)
            followers = [Follower(http, ids[i % runs], _token(i // per_token)) for i in range(n)]
            began = time.monotonic()
            tasks = [asyncio.create_task(f.run()) for f in followers]
            await asyncio.gather(*(asyncio.wait_for(f.opened.wait(), 120) for f in followers))
            open_s = time.monotonic() - began
            await asyncio.sleep(1.0)
            held = connections(admin)

            async def signals() -> int:
                sent, k = 0, 0
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    answer = await http.post(
                        f"/v1/runs/{ids[k % runs]}/signals/go", json={"payload": k}, headers=auth
                    )
                    sent += answer.status_code == 200
                    k += 1
                    await asyncio.sleep(1 / rate)
                return sent

            (times, failed), sent = await asyncio.gather(probing(base, seconds), signals())
            peak = connections(admin)
            await asyncio.sleep(3.0)  # the last events reach every stream
            logs = {}
            for run_id in ids:
                page = await http.get(f"/v1/runs/{run_id}/events?limit=1000", headers=auth)
                logs[run_id] = [e["event_id"] for e in page.json()["events"]]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    admin.close()
    opened = [f for f in followers if f.status == 200]
    complete = sum(f.ids == logs[f.run_id] for f in opened)
    return {
        "streams": n,
        "open": len(opened),
        "refused": sum(f.status == 429 for f in followers),
        "open_s": round(open_s, 1),
        "redis_idle": idle,
        "redis_streams": held,
        "redis_peak": peak,
        "added": max(held, peak) - idle,
        "signals": sent,
        "healthz_median_ms": statistics.median(times) if times else float("nan"),
        "healthz_p95_ms": pct(times, 95),
        "healthz_max_ms": max(times, default=float("nan")),
        "healthz_failed": failed,
        "probes": len(times) + failed,
        "complete_in_order": complete,
    }


async def measure(url: str, counts: list[int], runs: int, rate: float, seconds: float,
                  per_token: int) -> dict[str, Any]:  # fmt: skip
    rows = []
    for n in counts:
        rows.append(await one(url, n, runs, rate, seconds, per_token))
    return {"rows": rows, "machine": machine()}


def report(figures: dict[str, Any]) -> str:
    header = [
        "streams", "open", "429", "Redis conns (none / open / peak)", "added",
        "healthz p50 ms", "p95 ms", "max ms", "failed/probes", "events in order",
    ]  # fmt: skip
    rows = [
        [r["streams"], r["open"], r["refused"],
         f"{r['redis_idle']} / {r['redis_streams']} / {r['redis_peak']}", r["added"],
         r["healthz_median_ms"], r["healthz_p95_ms"], r["healthz_max_ms"],
         f"{r['healthz_failed']}/{r['probes']}", f"{r['complete_in_order']}/{r['open']}"]
        for r in figures["rows"]
    ]  # fmt: skip
    return table(rows, header) + "\n" + machine_line(figures["machine"])


def main() -> None:
    p = argparse.ArgumentParser(description="Live event streams: Redis connections, /healthz")
    p.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    p.add_argument("--streams", default="200,600,1800", help="comma-separated stream counts")
    p.add_argument("--runs", type=int, default=20, help="runs the streams follow")
    p.add_argument("--rate", type=float, default=20.0, help="signals (events) a second")
    p.add_argument("--seconds", type=float, default=10.0, help="seconds of events and probes")
    p.add_argument("--per-token", type=int, default=50, help="streams per token")
    a = p.parse_args()
    counts = [int(c) for c in a.streams.split(",")]
    with private_redis() as url:
        figures = asyncio.run(measure(url, counts, a.runs, a.rate, a.seconds, a.per_token))
    print(report(figures))
    emit("streams", figures, a.json)


if __name__ == "__main__":
    main()
