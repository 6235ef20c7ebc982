"""Activation time of a run whose 1,000-step journal is replayed in full.

K runs of a flow (N trivial steps, then ``wait_for("go")``) are executed
until they suspend at the wait, so each has an N-step journal. Then, one run
at a time, the run is signalled and re-activated the way a worker does it,
with each phase timed:

- load: ``store.claim`` (one round trip: lease + run record + whole journal
  + the mailboxes holding signals);
- parse: ``Journal.from_raw`` (JSON -> records);
- replay: the flow re-walking its N recorded steps (execute minus store time);
- conclude: the store calls of the activation's end (consume the signal,
  finish the run);
- total = load + parse + replay + conclude.

A second pass times the same re-activation end to end through
``Worker.run_until_idle`` (its loop's polls included), with the worker's sticky
cache off, so that it replays too (``python -m bench.wakeups`` compares replay
with a kept activation).

    python -m bench.replay [--steps 1000] [--runs 20] [--store URL] [--profile]
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench import flows
from bench._common import bench_store, emit, new_prefix, parser, profiled, summary, table
from sdk import Client, RunStatus, Worker
from sdk._core._clock import SystemClock
from sdk._core._journal import Journal
from sdk.engine._activation import Activation
from sdk.engine._engine import Engine
from sdk.model._registry import Registry

__all__ = ["main", "measure"]


class _TimedStore:
    """Forwards to a store and adds up the time spent awaiting it."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.spent = 0.0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        async def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await attr(*args, **kwargs)
            finally:
                self.spent += time.perf_counter() - t0

        return timed


async def measure(
    url: str, steps: int = 1000, runs: int = 20, profile: bool = False, **store_kwargs: Any
) -> dict[str, Any]:
    clock = SystemClock()
    phases: dict[str, list[float]] = {k: [] for k in ("load", "parse", "replay", "conclude")}
    totals: list[float] = []
    worker_path: list[float] = []
    journal_bytes = 0
    async with bench_store(url, new_prefix("replay"), **store_kwargs) as store:
        client = Client(store)
        # no sticky cache: every wake-up replays (bench.wakeups measures the kept path)
        worker = Worker(store, [flows.replay_then_wait], concurrency=runs, sticky_cache=0)
        handles = [await client.start(flows.replay_then_wait, steps) for _ in range(2 * runs)]
        await worker.run_until_idle()  # every run now waits at "go" with `steps` records
        for h in handles:
            assert await h.status() is RunStatus.WAITING_FOR_SIGNAL, h
        journal_bytes = int(
            await store.client.memory_usage(store.keys.journal(handles[0].run_id)) or 0
        )
        fd = Registry.default().flow("bench.replay_then_wait")
        timed = _TimedStore(store)
        engine = Engine(store=timed, clock=clock, owner="bench-replay")
        # Pass 1: the activation, phase by phase (as the worker's `InFlight.spawn` does it).
        for i, h in enumerate(handles[:runs]):
            await client.signal(h.run_id, "go", 1)
            t0 = time.perf_counter()
            claims = await store.claim(engine.owner, None, 1, clock.time(), 30.0)
            t1 = time.perf_counter()
            assert len(claims) == 1 and claims[0].run.run_id == h.run_id
            journal = Journal.from_raw(claims[0].journal)
            t2 = time.perf_counter()
            timed.spent = 0.0
            with profiled(profile and i == 0):
                await Activation(engine, claims[0].run, journal, fd).execute()
            t3 = time.perf_counter()
            assert await h.result(timeout=5) == steps
            phases["load"].append(t1 - t0)
            phases["parse"].append(t2 - t1)
            phases["replay"].append(t3 - t2 - timed.spent)
            phases["conclude"].append(timed.spent)
            totals.append(t3 - t0)
        # Pass 2: end to end through the worker's loop.
        for h in handles[runs:]:
            await client.signal(h.run_id, "go", 1)
            t0 = time.perf_counter()
            await worker.run_until_idle()
            worker_path.append(time.perf_counter() - t0)
            assert await h.result(timeout=5) == steps
    return {
        "steps": steps,
        "runs": runs,
        "journal_bytes": journal_bytes,
        **{f"{k}_ms": summary(v, 1e3) for k, v in phases.items()},
        "total_ms": summary(totals, 1e3),
        "worker_ms": summary(worker_path, 1e3),
    }


def report(r: dict[str, Any]) -> str:
    rows = [
        ("load (claim round trip, journal included)", r["load_ms"]),
        ("parse (Journal.from_raw)", r["parse_ms"]),
        ("replay (flow re-walks the steps)", r["replay_ms"]),
        ("conclude (consume signal + finish)", r["conclude_ms"]),
        ("total activation", r["total_ms"]),
        ("end to end via Worker.run_until_idle", r["worker_ms"]),
    ]
    body = table(
        [(name, s["median"], s["p90"], s["max"]) for name, s in rows],
        ["ms", "median", "p90", "max"],
    )
    return (
        f"replay: {r['steps']}-step journal ({r['journal_bytes'] / 1024:.0f} KiB in Redis), "
        f"{r['runs']} activations per pass\n{body}"
    )


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--profile", action="store_true", help="cProfile the first activation")
    a = p.parse_args()
    r = asyncio.run(measure(a.store, a.steps, a.runs, a.profile))
    print(report(r))
    emit("replay", r, a.json)


if __name__ == "__main__":
    main()
