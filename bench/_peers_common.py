"""What `bench.peers` runs on every system: the workloads, one round of them, the crash test.

A peer is an object with ``run(flow, n)``: start the flow ``flow``
(``"chain"``: `n` sequential trivial steps; ``"waits"``: `n` durable sleeps of
`WAIT_S`) and wait for its result, from the same process that executes it.
`one_round` times the workloads on it. The crash test runs in separate
processes: a worker that starts a 20-step run and kills itself (SIGKILL) in
step `CRASH_AT`, then a fresh worker launched to finish it, which prints
``finished <epoch seconds>`` when it sees the result.

Each peer module runs as ``python -m bench._peers_<peer> CONFIG_JSON
[round|crash-a|crash-b]`` and prints its figures as one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

__all__ = [
    "CRASH_AT",
    "CRASH_STEPS",
    "WAIT_S",
    "Peer",
    "child_main",
    "crash_here",
    "crash_recovery",
    "one_round",
]

#: Each wait of the ``waits`` flow is a durable sleep this long.
WAIT_S = 0.001
#: The crash test's run: this many steps, the worker killed inside step CRASH_AT.
CRASH_STEPS = 20
CRASH_AT = 10
_CRASH_ENV = "SFBENCH_PEERS_CRASH_AT"


class Peer(Protocol):
    async def run(self, flow: str, n: int) -> None:
        """Start `flow` with argument `n` and wait for its result."""
        ...


def crash_here(i: int) -> None:
    """Called by the crash flow's step `i`: the crashing worker kills itself (kill -9)."""
    if os.environ.get(_CRASH_ENV) == str(i):
        os.kill(os.getpid(), signal.SIGKILL)


async def _timed(call: Callable[[], Awaitable[None]]) -> float:
    t0 = time.perf_counter()
    await call()
    return time.perf_counter() - t0


async def one_round(peer: Peer, counts: dict[str, int]) -> dict[str, Any]:
    """The workloads once, on a warmed-up peer. Times in seconds."""
    for _ in range(3):  # warm up: connections, caches, first-use imports
        await peer.run("chain", 2)
        await peer.run("chain", 0)
    empty = [await _timed(lambda: peer.run("chain", 0)) for _ in range(counts["empty"])]
    long_n = counts["long_steps"]
    long = [await _timed(lambda: peer.run("chain", long_n)) for _ in range(counts["long"])]
    t0 = time.perf_counter()
    for _ in range(counts["seq20"]):
        await peer.run("chain", 20)
    seq20 = time.perf_counter() - t0
    conc = counts["concurrent"]
    t0 = time.perf_counter()
    await asyncio.gather(*(peer.run("chain", 20) for _ in range(conc)))
    conc_wall = time.perf_counter() - t0
    waits_n = counts["waits"]
    waits = await _timed(lambda: peer.run("waits", waits_n))
    empty_med = statistics.median(empty)
    return {
        "empty_latency_s": empty_med,
        "step_overhead_s": (statistics.median(long) - empty_med) / long_n,
        "seq20_flows_per_s": counts["seq20"] / seq20,
        "concurrent_wall_s": conc_wall,
        "concurrent_steps_per_s": conc * 20 / conc_wall,
        "wake_up_s": (waits - empty_med) / waits_n - WAIT_S,
    }


def crash_recovery(module: str, config: dict[str, Any], run_id: str) -> float:
    """Seconds from launching a fresh worker to the end of a run whose worker was killed.

    Worker A starts run `run_id` and kills itself in step `CRASH_AT`; then
    worker B is launched and the clock runs until B sees the run finished
    (B prints the wall time of that moment). B is stopped by its pid.
    """
    cfg = json.dumps({**config, "run_id": run_id})
    cmd = [sys.executable, "-m", module, cfg]
    a = subprocess.run(
        [*cmd, "crash-a"],
        env={**os.environ, _CRASH_ENV: str(CRASH_AT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    if a.returncode != -signal.SIGKILL:
        raise RuntimeError(f"{module} crash-a was not killed in its step:\n{a.stdout}{a.stderr}")
    launched = time.time()
    b = subprocess.Popen([*cmd, "crash-b"], stdout=subprocess.PIPE, text=True)
    watchdog = threading.Timer(300, b.kill)  # a B that never finishes ends the round
    watchdog.start()
    try:
        assert b.stdout is not None
        for line in b.stdout:
            if line.startswith("finished "):
                return float(line.split()[1]) - launched
        raise RuntimeError(f"{module} crash-b ended without finishing the run")
    finally:
        watchdog.cancel()
        b.terminate()
        try:
            b.wait(timeout=20)
        except subprocess.TimeoutExpired:
            b.kill()
            b.wait()


def finished() -> None:
    """What worker B prints when it has seen the crashed run finish."""
    print(f"finished {time.time():.6f}", flush=True)


def child_main(
    module: str,
    round_: Callable[[dict[str, Any]], Coroutine[Any, Any, dict[str, Any]]],
    crash_a: Callable[[dict[str, Any]], Coroutine[Any, Any, None]],
    crash_b: Callable[[dict[str, Any]], Coroutine[Any, Any, None]],
) -> None:
    """``python -m bench._peers_X CONFIG_JSON round|crash-a|crash-b``."""
    config: dict[str, Any] = json.loads(sys.argv[1])
    what = sys.argv[2]
    if what == "crash-a":
        asyncio.run(crash_a(config))
        return
    if what == "crash-b":
        asyncio.run(crash_b(config))
        return
    figures = asyncio.run(round_(config))
    run_id = f"peers-crash-{config['round']}-{os.getpid()}"
    figures["crash_recovery_s"] = crash_recovery(module, config, run_id)
    print(json.dumps(figures), flush=True)
