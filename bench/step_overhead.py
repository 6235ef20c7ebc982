"""Per-step overhead of a durable step against the same function undecorated.

A flow calls a trivial async step N times in sequence, and the undecorated
twin of that step right before each call; both are timed with
``time.perf_counter`` inside the flow. Overhead = step time - undecorated time.
An in-process worker executes the flow against real Redis; every step is
live (nothing replays), so each one costs its fenced record write.

For scale, the same run also times the floors under a step, interleaved
call by call: a bare ``store.record`` call (the one script a step runs), a
PING through the same client, through a second client forced to
``socket_timeout=None`` (the store's default too, so the two PINGs agree
unless a socket timeout was passed), and over a bare asyncio socket.

``--optional-checkpoints`` runs the same flow declared with
``@flow(optional_checkpoints=True)`` (a ``step_started`` checkpoint per step).

    python -m bench.step_overhead [--steps 2000] [--rounds 3] [--store URL] [--profile]
        [--optional-checkpoints]
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import sdk
from bench import flows
from bench._common import bench_store, emit, new_prefix, parser, profiled, summary, table
from sdk import Client, Worker
from sdk._journal import Kind, Record, State
from stores.redis import RedisStore

__all__ = ["main", "measure", "overhead_runs"]

#: One run's step times, undecorated-call times (seconds, one per call) and wall time.
Timed = tuple[list[float], list[float], float]

#: The engine this process runs (bench.events_overhead checks it).
ENGINE = os.path.dirname(os.path.abspath(sdk.__file__))


async def _floors(
    store: RedisStore, url: str, n: int, **store_kwargs: Any
) -> dict[str, dict[str, float]]:
    """µs per call of what lies under a step, the calls interleaved so noise hits all alike.

    - the store call a step makes (``store.record``, one EVALSHA);
    - a PING through the store's client;
    - a PING through a client like it but forced to ``socket_timeout=None`` (a
      set socket timeout wraps every read and write in ``asyncio.wait_for``;
      the store has none by default, so this matches the row above unless
      a timeout was passed);
    - a PING on a bare asyncio stream: loopback + server, no client library.
    """
    client = Client(store)
    handle = await client.start(flows.wait_once)  # a run whose lease we take below
    claims = await store.claim("bench-floor", None, 1, time.time(), 60.0)
    assert claims and claims[0].run.run_id == handle.run_id
    run_id, fence = handle.run_id, claims[0].run.fence
    rec = Record("noop#1", 0, Kind.STEP, State.OK, value=1).to_json()
    bare = RedisStore.from_url(
        url, prefix=store.keys.prefix, **{**store_kwargs, "socket_timeout": None}
    )
    kw = store.client.connection_pool.connection_kwargs
    if "path" in kw:
        reader, writer = await asyncio.open_unix_connection(kw["path"])
    else:
        reader, writer = await asyncio.open_connection(kw.get("host"), kw.get("port", 6379))

    async def raw_ping() -> None:
        writer.write(b"PING\r\n")
        await reader.readline()

    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "store_record": lambda: store.record(run_id, fence, "noop#1", rec),
        "ping": store.client.ping,
        "ping_no_timeout": bare.client.ping,
        "raw_ping": raw_ping,
    }
    times: dict[str, list[float]] = {k: [] for k in calls}
    order = list(calls)
    clock = time.perf_counter
    try:
        for i in range(n + 20):  # the first 20 warm up
            order = order[1:] + order[:1]
            for name in order:
                t0 = clock()
                await calls[name]()
                if i >= 20:
                    times[name].append(clock() - t0)
    finally:
        writer.close()
        await writer.wait_closed()
        await bare.close()
    await client.cancel(run_id, reason="benchmark floor done")
    return {k: summary(v, 1e6) for k, v in times.items()}


@contextlib.asynccontextmanager
async def overhead_runs(
    url: str, optional_checkpoints: bool = False, **store_kwargs: Any
) -> AsyncIterator[tuple[RedisStore, Callable[[int, bool], Awaitable[Timed]]]]:
    """A store and ``run(steps, profile)``: one run of the overhead flow through an
    in-process worker, returning (step seconds, plain seconds, wall seconds).

    The flow has run once (200 steps) to warm up before this yields.
    """
    if optional_checkpoints:
        from bench import flows_checkpointed

        flow = flows_checkpointed.overhead
    else:
        flow = flows.overhead
    async with bench_store(url, new_prefix("overhead"), **store_kwargs) as store:
        client = Client(store)
        worker = Worker(store, [flow], concurrency=1)

        async def run(steps: int, profile: bool = False) -> Timed:
            handle = await client.start(flow, steps)
            t0 = time.perf_counter()
            with profiled(profile):
                await worker.run_until_idle()
            wall = time.perf_counter() - t0
            s, p = await handle.result(timeout=60)
            return s, p, wall

        await run(200)
        yield store, run


async def measure(
    url: str,
    steps: int = 2000,
    rounds: int = 3,
    profile: bool = False,
    optional_checkpoints: bool = False,
    **store_kwargs: Any,
) -> dict[str, Any]:
    async with overhead_runs(url, optional_checkpoints, **store_kwargs) as (store, run):
        step_t: list[float] = []
        plain_t: list[float] = []
        walls: list[float] = []
        for _ in range(rounds):
            s, p, wall = await run(steps, profile and not walls)
            walls.append(wall)
            step_t += s
            plain_t += p
        floors = await _floors(store, url, 1000, **store_kwargs)
    plain_med = summary(plain_t)["median"]
    over = [s - plain_med for s in step_t]
    return {
        "steps": steps,
        "rounds": rounds,
        "optional_checkpoints": optional_checkpoints,
        "engine": ENGINE,
        "parser": _parser_name(store_kwargs),
        "step_us": summary(step_t, 1e6),
        "plain_us": summary(plain_t, 1e6),
        "overhead_us": summary(over, 1e6),
        "run_wall_per_step_us": min(walls) / steps * 1e6,
        "floors_us": floors,
    }


def _parser_name(kwargs: dict[str, Any]) -> str:
    cls = kwargs.get("parser_class")
    if cls is not None:
        return str(cls.__name__)
    from redis.asyncio.connection import DefaultParser

    return DefaultParser.__name__


def report(r: dict[str, Any]) -> str:
    rows = [
        ("per-step overhead (step - undecorated)", *_q(r["overhead_us"])),
        ("step call, as timed in the flow", *_q(r["step_us"])),
        ("undecorated call", *_q(r["plain_us"])),
        ("floor: store.record() alone", *_q(r["floors_us"]["store_record"])),
        ("floor: PING through the store's client", *_q(r["floors_us"]["ping"])),
        ("floor: PING, socket_timeout=None forced", *_q(r["floors_us"]["ping_no_timeout"])),
        ("floor: PING on a bare asyncio socket", *_q(r["floors_us"]["raw_ping"])),
    ]
    out = table(rows, ["µs", "median", "p90", "p99"])
    return (
        f"step overhead: {r['steps']} sequential steps x {r['rounds']} runs, "
        f"parser {r['parser']}"
        f"{', @flow(optional_checkpoints=True)' if r.get('optional_checkpoints') else ''}\n"
        f"{out}\n"
        f"whole run (claim .. finish) / steps, best run: {r['run_wall_per_step_us']:.1f} µs"
    )


def _q(s: dict[str, float]) -> tuple[float, float, float]:
    return s["median"], s["p90"], s["p99"]


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--profile", action="store_true", help="cProfile the first measured run")
    p.add_argument(
        "--optional-checkpoints",
        action="store_true",
        help="run the flow with @flow(optional_checkpoints=True)",
    )
    a = p.parse_args()
    r = asyncio.run(measure(a.store, a.steps, a.rounds, a.profile, a.optional_checkpoints))
    print(report(r))
    emit("step_overhead", r, a.json)


if __name__ == "__main__":
    main()
