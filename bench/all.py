"""Run every benchmark and print the figures next to the targets of issues 2 and 3.

    python -m bench.all [--store URL] [--skip redis_parser,latency] [--json]

Each benchmark also runs alone (``python -m bench.NAME``) with more options.
"""

from __future__ import annotations

import asyncio
import os
import platform
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from bench import (
    events_overhead,
    latency,
    redis_parser,
    replay,
    roundtrips,
    step_overhead,
    throughput,
)
from bench._common import TARGETS, emit, parser, table

__all__ = ["main"]

BENCHES: dict[str, tuple[Callable[..., Any], Callable[[dict[str, Any]], str]]] = {
    "roundtrips": (roundtrips.measure, roundtrips.report),
    "step_overhead": (step_overhead.measure, step_overhead.report),
    "throughput": (throughput.measure, throughput.report),
    "replay": (replay.measure, replay.report),
    "latency": (latency.measure, latency.report),
    "redis_parser": (redis_parser.measure, redis_parser.report),
    "events_overhead": (events_overhead.measure, events_overhead.report),
}


def _measured(results: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    def get(bench: str, *path: str) -> float | None:
        node: Any = results.get(bench)
        for p in path:
            if node is None:
                return None
            node = node[p]
        return None if node is None else float(node)

    return {
        "round_trips_per_step": get("roundtrips", "per_step", "round_trips"),
        "step_overhead_median_us": get("step_overhead", "overhead_us", "median"),
        "throughput_steps_per_s": get("throughput", "steps_per_s"),
        "replay_1000_ms": get("replay", "total_ms", "median"),
        "latency_median_ms": get("latency", "latency_median_ms"),
        "events_overhead_ratio": get("events_overhead", "ratio", "B/A", "median", "pooled"),
        "events_only_ratio": get("events_overhead", "ratio", "B/B0", "median", "pooled"),
    }


_LABELS = {
    "round_trips_per_step": "Redis round trips per completed step",
    "step_overhead_median_us": "median per-step overhead",
    "throughput_steps_per_s": "aggregate steps/s, 100 runs, one worker process",
    "replay_1000_ms": "activation with a 1,000-step journal replayed",
    "latency_median_ms": "start-to-result latency (median), separate processes",
    "events_overhead_ratio": "per-step overhead with events + checkpoints / core issue's (B/A)",
    "events_only_ratio": "per-step overhead, events + checkpoints alone (B/B0; no target)",
}


def summary_table(results: dict[str, dict[str, Any]]) -> str:
    rows = []
    for key, value in _measured(results).items():
        if key not in TARGETS:  # reported, no target
            rows.append((_LABELS[key], "-", "-" if value is None else value, ""))
            continue
        op, target, unit = TARGETS[key]
        if value is None:
            verdict = "not run"
        elif (value <= target) if op == "<=" else (value >= target):
            verdict = "met"
        else:
            verdict = "MISSED"
        rows.append((_LABELS[key], f"{op} {target:g} {unit}", "-" if value is None else value,
                     verdict))  # fmt: skip
    return table(rows, ["target (issues 2, 3)", "target", "measured", ""])


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--skip", default="", help="comma-separated benchmarks to leave out")
    a = p.parse_args()
    skip = {s for s in a.skip.split(",") if s}
    unknown = skip - set(BENCHES)
    if unknown:
        p.error(f"unknown benchmark(s) {sorted(unknown)}; known: {sorted(BENCHES)}")
    results: dict[str, dict[str, Any]] = {}
    failed: list[str] = []
    for name, (measure, report) in BENCHES.items():
        if name in skip:
            continue
        t0 = time.perf_counter()
        try:
            results[name] = asyncio.run(measure(a.store))
        except (Exception, SystemExit) as exc:  # one benchmark failing leaves the others
            print(f"== {name}: FAILED ({type(exc).__name__}: {exc})\n")
            failed.append(name)
            continue
        print(f"== {name} ({time.perf_counter() - t0:.0f} s)\n{report(results[name])}\n")
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(
        f"== summary ({stamp}; {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"store {a.store})\n{summary_table(results)}"
    )
    emit("all", {"results": results, "measured": _measured(results)}, a.json)
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
