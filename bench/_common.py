"""What every benchmark shares: options, a private key prefix, statistics, counters.

Benchmarks print figures; they never pass or fail. Each one runs against a
real Redis (default ``redis://127.0.0.1:6379/0``, ``--store`` to change it)
under a key prefix of its own, and deletes its keys when it ends.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from stores.redis import RedisStore
from testing._fakeconn import Fields

__all__ = [
    "DEFAULT_STORE",
    "TARGETS",
    "Counter",
    "bench_store",
    "counting",
    "emit",
    "machine",
    "machine_line",
    "new_prefix",
    "parser",
    "pct",
    "pinned_cpus",
    "private_redis",
    "summary",
    "table",
]

DEFAULT_STORE = os.environ.get("STEADYFLOW_BENCH_STORE", "redis://127.0.0.1:6379/0")

#: The targets of issue 2 (2-core machine) and issue 3: metric -> (comparison, value, unit).
TARGETS: dict[str, tuple[str, float, str]] = {
    "round_trips_per_step": ("<=", 1.0, "round trips"),
    "step_overhead_median_us": ("<=", 200.0, "µs"),
    "throughput_steps_per_s": (">=", 5000.0, "steps/s"),
    "replay_1000_ms": ("<=", 20.0, "ms"),
    "latency_median_ms": ("<=", 2.0, "ms"),
    # issue 3: median per-step overhead with events + checkpoints / without
    "events_overhead_ratio": ("<=", 1.10, "x"),
}


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--store",
        default=DEFAULT_STORE,
        help="Redis URL (default: $STEADYFLOW_BENCH_STORE or %(default)s)",
    )
    p.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    return p


def new_prefix(name: str) -> str:
    """A key prefix no other benchmark, test or deployment uses."""
    return f"sfbench-{name}-{uuid.uuid4().hex[:10]}"


@contextlib.asynccontextmanager
async def bench_store(
    url: str, prefix: str, *, cleanup: bool = True, **kwargs: Any
) -> AsyncIterator[RedisStore]:
    """A `RedisStore` under `prefix`; every key under the prefix is deleted at the end.

    Extra keyword arguments go to `redis.asyncio.Redis.from_url` (e.g. ``parser_class``).
    """
    store = RedisStore.from_url(url, prefix=prefix, **kwargs)
    try:
        yield store
    finally:
        if cleanup:
            await delete_prefix(store, prefix)
        await store.close()


async def delete_prefix(store: RedisStore, prefix: str) -> int:
    keys = [k async for k in store.client.scan_iter(match=f"{prefix}:*", count=1000)]
    for i in range(0, len(keys), 500):
        await store.client.delete(*keys[i : i + 500])
    return len(keys)


# -- the machine the figures come from ------------------------------------------------


def _cpu_check_ms() -> float:
    """Milliseconds of a fixed pure-Python loop (best of three): the CPU speed this
    process gets right now. On a quiet machine it is steady; another busy process
    (a test suite, a profiler) or a throttled VM makes it grow."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        x = 0
        for i in range(500_000):
            x += i & 7
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def machine() -> dict[str, Any]:
    """The CPUs, the load averages and the CPU check (`_cpu_check_ms`) as the
    benchmark starts: per-call figures on a shared machine are only comparable
    with figures taken in the same state, and these say which state it was."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {
        "cpus": os.cpu_count(),
        "load_1m": round(load[0], 2),
        "load_5m": round(load[1], 2),
        "cpu_check_ms": round(_cpu_check_ms(), 1),
    }


def machine_line(m: dict[str, Any]) -> str:
    """`machine`'s figures as one line."""
    return (
        f"machine: {m['cpus']} CPUs, load {m['load_1m']:.2f} (1 min) {m['load_5m']:.2f} (5 min), "
        f"CPU check {m['cpu_check_ms']:.1f} ms (a fixed Python loop: higher is slower or busier)"
    )


# -- statistics -------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), nearest-rank on sorted values."""
    s = sorted(values)
    if not s:
        return float("nan")
    k = max(0, min(len(s) - 1, round(q / 100 * len(s) + 0.5) - 1))
    return s[k]


def summary(values: Sequence[float], scale: float = 1.0) -> dict[str, float]:
    """median, p90, p99, mean, min, max of `values` times `scale`."""
    return {
        "median": statistics.median(values) * scale,
        "p90": pct(values, 90) * scale,
        "p99": pct(values, 99) * scale,
        "mean": statistics.fmean(values) * scale,
        "min": min(values) * scale,
        "max": max(values) * scale,
    }


def table(rows: Iterable[Sequence[Any]], header: Sequence[str]) -> str:
    """A plain-text table, right-aligned numbers."""
    cells = [[str(h) for h in header]] + [[_cell(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = []
    for n, r in enumerate(cells):
        parts = []
        for i, c in enumerate(r):
            parts.append(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]))
        lines.append("  ".join(parts))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}"
    return str(value)


def emit(name: str, figures: dict[str, Any], as_json: bool) -> None:
    if as_json:
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        print(json.dumps({"bench": name, "at": stamp, **figures}))
    sys.stdout.flush()


# -- counting what goes over the wire ----------------------------------------------


class Counter:
    """Round trips and commands one store's connections sent.

    A round trip is one ``send_packed_command`` (a pipeline is one round trip
    carrying many commands). ``EVALSHA``/``EVAL`` calls are also counted per
    script name.
    """

    def __init__(self) -> None:
        self.round_trips = 0
        self.commands: collections.Counter[str] = collections.Counter()
        self.scripts: collections.Counter[str] = collections.Counter()
        self.sha_names: dict[str, str] = {}

    def snapshot(self) -> tuple[int, collections.Counter[str], collections.Counter[str]]:
        return self.round_trips, self.commands.copy(), self.scripts.copy()

    def since(
        self, snap: tuple[int, collections.Counter[str], collections.Counter[str]]
    ) -> dict[str, Any]:
        rt, cmds, scripts = snap
        return {
            "round_trips": self.round_trips - rt,
            "commands": sum((self.commands - cmds).values()),
            "by_command": dict(self.commands - cmds),
            "scripts": dict(self.scripts - scripts),
        }


def counting(store: RedisStore) -> Counter:
    """Count what `store` sends from now on (call before its first command).

    Both of the store's clients are counted: commands and blocking reads.
    """
    counter = Counter()
    counter.sha_names = {script.sha: name for name, script in store._scripts.items()}
    pools = {
        id(c.connection_pool): c.connection_pool for c in (store.client, store.blocking_client)
    }
    for pool in pools.values():
        pool.connection_class = _counting_class(pool.connection_class, counter)
    return counter


def _resp_commands(raw: bytes) -> list[tuple[bytes, bytes | None]]:
    """The (name, first argument) of each RESP command packed in `raw`."""
    out: list[tuple[bytes, bytes | None]] = []
    at = 0
    while at < len(raw):
        end = raw.index(b"\r\n", at)
        n = int(raw[at + 1 : end])  # "*N"
        at = end + 2
        args: list[bytes] = []
        for _ in range(n):
            end = raw.index(b"\r\n", at)
            size = int(raw[at + 1 : end])  # "$n"
            args.append(raw[end + 2 : end + 2 + size])
            at = end + 2 + size + 2
        out.append((args[0], args[1] if len(args) > 1 else None))
    return out


def _counting_class(base: type, counter: Counter) -> type:
    def count(name_arg: Any, sha_arg: Any) -> None:
        name = name_arg.decode() if isinstance(name_arg, bytes) else str(name_arg)
        name = name.split()[0].upper()
        counter.commands[name] += 1
        if name in ("EVALSHA", "EVAL") and sha_arg is not None:
            sha = sha_arg.decode() if isinstance(sha_arg, bytes) else str(sha_arg)
            counter.scripts[counter.sha_names.get(sha, "eval:" + sha[:8])] += 1

    class CountingConnection(base):  # type: ignore[misc]
        _packed_here = False

        def pack_command(self, *args: Any) -> Any:
            self._packed_here = True
            count(args[0], args[1] if len(args) > 1 else None)
            return super().pack_command(*args)

        async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            counter.round_trips += 1
            if isinstance(command, Fields):  # a memory:// command, not RESP (testing._fakelua)
                count(command[0], command[1] if len(command) > 1 else None)
            elif not self._packed_here:
                # packed without pack_command: the store's script lane (one
                # command, or a pipelined batch of them, each "*N", "$n", name, ...)
                raw = command if isinstance(command, bytes) else b"".join(command)
                for name, sha in _resp_commands(raw):
                    count(name, sha)
            self._packed_here = False
            await super().send_packed_command(command, check_health)

    return CountingConnection


async def commandstats(store: RedisStore, field: str = "calls") -> dict[str, int]:
    """Server-side ``calls`` (or ``usec``) per command (includes commands run inside scripts)."""
    info: Any = await store.client.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v[field]) for k, v in info.items()}


def stats_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    out = {k: after[k] - before.get(k, 0) for k in after}
    out["info"] = out.get("info", 0) - 1  # the INFO that took `after`
    return {k: v for k, v in out.items() if v}


# -- profiling -----------------------------------------------------------------------


@contextlib.contextmanager
def profiled(enabled: bool, limit: int = 30) -> Any:
    """cProfile the block and print the functions with the most own time."""
    if not enabled:
        yield
        return
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    try:
        yield
    finally:
        prof.disable()
        print("\nprofile (cProfile, sorted by own time; cProfile inflates small calls):")
        st = pstats.Stats(prof, stream=sys.stdout)
        st.sort_stats("tottime").print_stats(limit)
        st.sort_stats("cumulative").print_stats(limit)


# -- a Redis of our own ------------------------------------------------------------


def pinned_cpus() -> tuple[int, int] | None:
    """(a CPU for a private redis-server, another for the clients), so that
    processes compared with each other all see the same placement; None with
    fewer than two CPUs to run on."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return (cpus[0], cpus[1]) if len(cpus) >= 2 else None


@contextlib.contextmanager
def private_redis(cpu: int | None = None) -> Iterator[str]:
    """A redis-server of our own on a free loopback port (for clean server-side
    counts), pinned to `cpu` when given (see `pinned_cpus`)."""
    import shutil
    import socket
    import subprocess

    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("--private-redis needs redis-server on PATH")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    if cpu is not None:
        os.sched_setaffinity(proc.pid, {cpu})
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
                    c.sendall(b"PING\r\n")
                    if c.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("the private redis-server did not start")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
