"""Round trips of ``asyncio.gather`` of N steps, with and without pipelining.

A flow runs ``asyncio.gather(*(noop(i) for i in range(N)))`` (default N =
100) through an in-process worker: its claim, the N step records and its
finish. The store's script lane sends calls made while others are on the wire
as one batch (`stores._redispy.Lane`); the bench runs the same flow with the
lane's pipelining off and on, alternately, and prints round trips, script
calls and wall time per run for each (medians over the repeats).

    python -m bench.gather [--steps 100] [--repeats 5] [--store URL]
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from bench import flows
from bench._common import bench_store, counting, emit, new_prefix, parser, table
from sdk import Client, RunStatus, Worker
from stores._redispy import Lane

__all__ = ["main", "measure"]


async def measure(url: str, steps: int = 100, repeats: int = 5) -> dict[str, Any]:
    figures: dict[bool, dict[str, list[float]]] = {
        on: {"round_trips": [], "scripts": [], "ms": []} for on in (False, True)
    }
    async with bench_store(url, new_prefix("gather")) as store:
        counter = counting(store)
        client = Client(store)
        worker = Worker(store, [flows.gathered])
        runner = store._runner
        if not isinstance(runner, Lane):
            raise SystemExit(f"bench.gather needs the script lane; {url} gives {runner!r}")
        for n in range(repeats + 1):  # repeat 0 warms up (connections, scripts)
            for on in (False, True):
                runner._pipelining = on
                handle = await client.start(flows.gathered, steps)
                snap = counter.snapshot()
                t0 = time.perf_counter()
                await worker.run_until_idle()
                wall = time.perf_counter() - t0
                got = counter.since(snap)
                if (await client.get(handle.run_id)).status is not RunStatus.COMPLETED:
                    raise SystemExit(f"run {handle.run_id} did not complete")
                if n:
                    f = figures[on]
                    f["round_trips"].append(got["round_trips"])
                    f["scripts"].append(sum(got["scripts"].values()))
                    f["ms"].append(wall * 1000)
        runner._pipelining = True
    med = {
        ("on" if on else "off"): {k: statistics.median(v) for k, v in f.items()}
        for on, f in figures.items()
    }
    return {"steps": steps, "repeats": repeats, "pipelining": med}


def report(r: dict[str, Any]) -> str:
    rows = [
        (
            f"pipelining {label}",
            f["round_trips"],
            f["scripts"],
            f["ms"],
        )
        for label, f in r["pipelining"].items()
    ]
    return (
        f"gather: one run of asyncio.gather of {r['steps']} steps (claim, records, finish),"
        f" medians of {r['repeats']}\n"
        + table(rows, ["lane", "round trips", "script calls", "ms per run"])
    )


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__ or "")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    r = asyncio.run(measure(args.store, args.steps, args.repeats))
    print(report(r))
    emit("gather", r, args.json)


if __name__ == "__main__":
    main()
