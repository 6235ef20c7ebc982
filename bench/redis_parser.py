"""Does hiredis help? redis-py's C reply parser against its pure-Python one.

redis-py picks its C parser (``_AsyncHiredisParser``) by itself when the
``hiredis`` package is installed; passing ``parser_class`` to
``RedisStore.from_url`` (it reaches ``redis.asyncio.Redis.from_url``) forces
the pure-Python parser (``_AsyncRESP3Parser``; redis-py swaps it for the
RESP2 one on a RESP2 connection).

Two measurements:

- A/B per call (the precise one): two stores on the same keys, one per
  parser, called alternately call by call, so the machine's noise hits both
  alike: the step's write (``store.record``), a PING, and the read of a
  1,000-step journal (``HGETALL``, the bulk of a claim's reply);
- whole benchmarks: ``bench.step_overhead``, ``bench.throughput`` and
  ``bench.replay``'s journal load, per parser, alternating, ``--repeats``
  times; medians compared. Noisier: each takes a second or more.

    python -m bench.redis_parser [--calls 2000] [--repeats 3] [--store URL]
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from redis.asyncio.connection import _AsyncRESP3Parser  # type: ignore[attr-defined]
from redis.utils import HIREDIS_AVAILABLE

from bench import flows, replay, step_overhead, throughput
from bench._common import bench_store, emit, new_prefix, parser, table
from sdk import Client, Worker
from sdk._core._journal import Kind, Record, State

__all__ = ["main", "measure"]

VARIANTS: dict[str, dict[str, Any]] = {
    "hiredis": {},
    "python": {"parser_class": _AsyncRESP3Parser},
}


async def _ab_calls(url: str, calls: int) -> dict[str, dict[str, float]]:
    """Median µs per call for each parser, the two interleaved call by call."""
    prefix = new_prefix("parser")
    async with (
        bench_store(url, prefix) as hs,
        bench_store(url, prefix, cleanup=False, **VARIANTS["python"]) as ps,
    ):
        client = Client(hs)
        handle = await client.start(flows.replay_then_wait, 1000)
        await Worker(hs, [flows.replay_then_wait]).run_until_idle()
        await client.signal(handle.run_id, "go", 1)
        (claim,) = await hs.claim("bench-parser", None, 1, time.time(), 120.0)
        run_id, fence = handle.run_id, claim.run.fence
        rec = Record("ab#1", 1001, Kind.STEP, State.OK, value=1).to_json()
        jkey = hs.keys.journal(run_id)
        stores = {"hiredis": hs, "python": ps}
        ops: dict[str, Any] = {
            "record": lambda s: s.record(run_id, fence, "ab#1", rec),
            "ping": lambda s: s.client.ping(),
            "journal": lambda s: s.client.hgetall(jkey),
        }
        times: dict[str, dict[str, list[float]]] = {op: {v: [] for v in stores} for op in ops}
        for op, call in ops.items():
            n = calls if op != "journal" else max(calls // 10, 20)
            for i in range(n + 20):  # the first 20 warm up
                order = ("hiredis", "python") if i % 2 else ("python", "hiredis")
                for v in order:
                    t0 = time.perf_counter()
                    await call(stores[v])
                    if i >= 20:
                        times[op][v].append(time.perf_counter() - t0)
        await client.cancel(run_id, reason="benchmark done")
    return {
        op: {v: statistics.median(t) * 1e6 for v, t in per.items()} for op, per in times.items()
    }


async def measure(
    url: str, calls: int = 2000, repeats: int = 3, steps: int = 500, runs: int = 100,
    run_steps: int = 50,
) -> dict[str, Any]:  # fmt: skip
    if not HIREDIS_AVAILABLE:
        raise SystemExit("hiredis is not installed: pip install hiredis (or steadyflow[hiredis])")
    ab = await _ab_calls(url, calls)
    overhead: dict[str, list[float]] = {k: [] for k in VARIANTS}
    rate: dict[str, list[float]] = {k: [] for k in VARIANTS}
    load: dict[str, list[float]] = {k: [] for k in VARIANTS}
    for i in range(repeats):
        order = list(VARIANTS) if i % 2 == 0 else list(reversed(VARIANTS))
        for name in order:
            o = await step_overhead.measure(url, steps, 1, **VARIANTS[name])
            overhead[name].append(o["overhead_us"]["median"])
            t = await throughput.measure(url, runs, run_steps, 1, **VARIANTS[name])
            rate[name].append(t["steps_per_s"])
            j = await replay.measure(url, 1000, 3, **VARIANTS[name])
            load[name].append(j["load_ms"]["median"])
    whole = {
        name: {
            "overhead_median_us": statistics.median(overhead[name]),
            "steps_per_s": statistics.median(rate[name]),
            "journal_load_ms": statistics.median(load[name]),
        }
        for name in VARIANTS
    }
    return {
        "calls": calls,
        "repeats": repeats,
        "ab_us": ab,
        "whole": whole,
        "samples": {"overhead_us": overhead, "steps_per_s": rate, "journal_load_ms": load},
    }


def report(r: dict[str, Any]) -> str:
    ab, w = r["ab_us"], r["whole"]
    h, p = w["hiredis"], w["python"]
    rows1 = [
        (label, ab[op]["hiredis"], ab[op]["python"], ab[op]["python"] - ab[op]["hiredis"],
         _gain(ab[op]["python"] / ab[op]["hiredis"]))
        for op, label in (
            ("record", "store.record() (a step's write)"),
            ("ping", "PING"),
            ("journal", "HGETALL of a 1,000-step journal"),
        )
    ]  # fmt: skip
    rows2 = [
        ("median step overhead (µs)", h["overhead_median_us"], p["overhead_median_us"],
         _gain(p["overhead_median_us"] / h["overhead_median_us"])),
        ("throughput, 100 runs (steps/s)", h["steps_per_s"], p["steps_per_s"],
         _gain(h["steps_per_s"] / p["steps_per_s"])),
        ("1,000-step journal load (ms)", h["journal_load_ms"], p["journal_load_ms"],
         _gain(p["journal_load_ms"] / h["journal_load_ms"])),
    ]  # fmt: skip
    return (
        f"redis-py reply parser: A/B per call, interleaved, median of {r['calls']} calls\n"
        + table(rows1, ["µs per call", "hiredis", "pure Python", "saved", "with hiredis"])
        + f"\n\nwhole benchmarks, medians of {r['repeats']} alternating repeats (noisier)\n"
        + table(rows2, ["", "hiredis", "pure Python", "with hiredis"])
    )


def _gain(ratio: float) -> str:
    """`ratio` > 1: hiredis is better by that factor."""
    if ratio >= 1:
        return f"{ratio:.2f}x better"
    return f"{1 / ratio:.2f}x worse"


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=2000, help="A/B calls per operation")
    p.add_argument("--repeats", type=int, default=3, help="whole-benchmark repeats")
    a = p.parse_args()
    r = asyncio.run(measure(a.store, a.calls, a.repeats))
    print(report(r))
    emit("redis_parser", r, a.json)


if __name__ == "__main__":
    main()
