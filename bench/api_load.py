"""The HTTP API under load: starts and status reads per second, and the server's memory.

Starts a real `steadyflow serve` process (this checkout's) on a free loopback
port against a Redis prefix of its own, then, for `--seconds` each, keeps
`--concurrency` requests in flight: ``POST /v1/runs`` (a start), then
``GET /v1/runs/{id}`` (a status read) of the runs it started. It prints the
requests/s of each, their p50/p99 latency, and the server process's resident
memory (VmRSS and its peak, VmHWM) after each phase. No worker runs: the starts
stay pending, so this measures the API and the store, not the engine.

It uses the public HTTP API only, so an older checkout is measured with the
same file (its tokens are parsed as it parses them):

    python -m bench.api_load [--seconds 5] [--concurrency 16] [--store URL]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

TOKEN = "bench-api-load-token-0123456789"
FLOW_MODULE = "bench._api_flows"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _memory_kb(pid: int) -> tuple[int, int]:
    """The process's VmRSS and VmHWM, in kB (Linux)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields.get("VmRSS", 0), fields.get("VmHWM", 0)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def _phase(
    http: httpx.AsyncClient, seconds: float, concurrency: int, call: object
) -> tuple[int, list[float]]:
    done = 0
    latencies: list[float] = []
    stop = time.perf_counter() + seconds

    async def one() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            await call(http)  # type: ignore[operator]
            latencies.append(time.perf_counter() - t0)
            done += 1

    await asyncio.gather(*(one() for _ in range(concurrency)))
    return done, latencies


async def measure(args: argparse.Namespace, base: str, pid: int) -> None:
    started: list[str] = []
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}

    async def start(http: httpx.AsyncClient) -> None:
        reply = await http.post("/v1/runs", json={"flow": "bench.api.noop", "args": [1]})
        assert reply.status_code == 201, reply.text
        started.append(reply.json()["run_id"])

    async def read(http: httpx.AsyncClient) -> None:
        run_id = started[int(time.perf_counter() * 1e6) % len(started)]
        reply = await http.get(f"/v1/runs/{run_id}")
        assert reply.status_code == 200, reply.text

    limits = httpx.Limits(max_connections=args.concurrency)
    async with httpx.AsyncClient(base_url=base, headers=headers, limits=limits, timeout=30) as http:
        for name, call in (("starts", start), ("status reads", read)):
            done, lat = await _phase(http, args.seconds, args.concurrency, call)
            rss, hwm = _memory_kb(pid)
            p50, p99 = _pct(lat, 0.5) * 1e3, _pct(lat, 0.99) * 1e3
            print(
                f"{name:13s} {done / args.seconds:8.0f} requests/s   p50 {p50:6.2f} ms"
                f"   p99 {p99:6.2f} ms   server RSS {rss / 1024:6.1f} MB"
                f" (peak {hwm / 1024:.1f} MB)"
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--store", default="redis://127.0.0.1:6379/15")
    args = p.parse_args()
    port = _free_port()
    prefix = f"bench-api-{uuid.uuid4().hex[:8]}"
    log = tempfile.NamedTemporaryFile("w", suffix=".log", delete=False)  # noqa: SIM115
    env = {**os.environ, "STEADYFLOW_API_TOKENS": f"{TOKEN}=bench:operator"}
    serve = [sys.executable, "-m", "sdk.cli", "serve", FLOW_MODULE, "--store", args.store,
             "--prefix", prefix, "--host", "127.0.0.1", "--port", str(port), "--log-level",
             "warning"]  # fmt: skip
    proc = subprocess.Popen(serve, stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None:
                raise SystemExit(Path(log.name).read_text())
            time.sleep(0.05)
        asyncio.run(measure(args, base, proc.pid))
    finally:
        proc.terminate()
        proc.wait(10)
        os.unlink(log.name)


if __name__ == "__main__":
    main()
