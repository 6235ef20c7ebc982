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
unless a socket timeout was passed), and over a bare asyncio socket. The
floors are timed right after each measured run of the flow (a quarter as many
calls as it has steps, so the two take about as long), and each run has its
own ratio of per-step overhead to PING (issue 15's target: <= 1.3): on a small
VM the round-trip time drifts by up to 2x within seconds (vCPU idle states), so
short runs, each next to its own floors, and the median of their ratios.

``--cpu-only`` answers the steps' record calls at once (after packing each
one, as for the socket) instead of sending them: what is left of a step is
the Python between the flow's ``await`` and the socket, the engine's, the
store's and the lane's, a figure the loopback's drift does not move. It
prints no floors. In a real run much of that Python is not on top of the
round trip: the flow's code and the next step's start run while a step's
write is on the wire (`sdk.engine._writes.Writes.send`).

``--optional-checkpoints`` runs the same flow declared with
``@flow(optional_checkpoints=True)`` (a ``step_started`` checkpoint per step).

    python -m bench.step_overhead [--steps 500] [--rounds 8] [--store URL] [--profile]
        [--cpu-only]
        [--optional-checkpoints]
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from redis.asyncio.connection import AbstractConnection

import sdk
from bench import flows
from bench._common import (
    bench_store,
    emit,
    machine,
    machine_line,
    new_prefix,
    parser,
    profiled,
    summary,
    table,
)
from sdk import Client, Worker
from sdk._core._journal import Kind, Record, State
from sdk.store import CheckpointKind, EventType, StepEvent
from stores._redispy import Lane, _packed
from stores.redis import RedisStore

__all__ = ["main", "measure", "overhead_runs"]

#: One run's step times, undecorated-call times (seconds, one per call) and wall time.
Timed = tuple[list[float], list[float], float]

#: The event (and checkpoint) a completed step's write makes (as `sdk.engine._steprun`'s).
STEP_COMPLETED = StepEvent(EventType.STEP_COMPLETED, "", CheckpointKind.STEP_COMPLETED)

#: The engine this process runs (bench.events_overhead checks it).
ENGINE = os.path.dirname(os.path.abspath(sdk.__file__))


async def _floors(
    store: RedisStore, url: str, n: int, **store_kwargs: Any
) -> dict[str, list[float]]:
    """Seconds per call (one entry per call) of what lies under a step, the calls
    interleaved so noise hits all alike.

    - the store call a step makes (``store.record``, one EVALSHA), as a step makes
      it (a new key, with its ``step.completed`` event and checkpoint) and bare
      (one key written again, no event: the script's least work);
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
    # what the steps of a run write: a new key each, with the step's event
    steps = iter(
        (f"noop#{i}", Record(f"noop#{i}", i, Kind.STEP, State.OK, value=i, r=i).to_json())
        for i in range(2, n + 100)
    )

    def step_record() -> Awaitable[bool]:
        key, text = next(steps)
        return store.record(run_id, fence, key, text, now=time.time(), event=STEP_COMPLETED)

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
        "store_record_step": step_record,
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
    return times


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
    steps: int = 500,
    rounds: int = 8,
    profile: bool = False,
    optional_checkpoints: bool = False,
    cpu_only: bool = False,
    **store_kwargs: Any,
) -> dict[str, Any]:
    host = machine()  # before any work of ours
    async with overhead_runs(url, optional_checkpoints, **store_kwargs) as (store, run):
        if cpu_only:
            _answer_records_at_once(store)
        step_t: list[float] = []
        plain_t: list[float] = []
        walls: list[float] = []
        floor_t: dict[str, list[float]] = {}
        ratios: list[float] = []
        for _ in range(rounds):
            s, p, wall = await run(steps, profile and not walls)
            walls.append(wall)
            step_t += s
            plain_t += p
            if cpu_only:
                continue
            # this run's floors, right after it (see the module docstring)
            floors = await _floors(store, url, max(100, steps // 4), **store_kwargs)
            for k, v in floors.items():
                floor_t.setdefault(k, []).extend(v)
            over_med = statistics.median(s) - statistics.median(p)
            ratios.append(over_med / statistics.median(floors["ping"]))
    plain_med = summary(plain_t)["median"]
    over = [s - plain_med for s in step_t]
    if cpu_only:
        return {
            "steps": steps,
            "rounds": rounds,
            "cpu_only": True,
            "machine": host,
            "optional_checkpoints": optional_checkpoints,
            "engine": ENGINE,
            "step_us": summary(step_t, 1e6),
            "plain_us": summary(plain_t, 1e6),
            "overhead_us": summary(over, 1e6),
            # per run: the median per-step overhead, µs
            "per_run_us": [
                (statistics.median(step_t[i : i + steps]) - plain_med) * 1e6
                for i in range(0, len(step_t), steps)
            ],
        }
    return {
        "steps": steps,
        "rounds": rounds,
        "optional_checkpoints": optional_checkpoints,
        "engine": ENGINE,
        "machine": host,
        "parser": _parser_name(store_kwargs),
        "step_us": summary(step_t, 1e6),
        "plain_us": summary(plain_t, 1e6),
        "overhead_us": summary(over, 1e6),
        "run_wall_per_step_us": min(walls) / steps * 1e6,
        "floors_us": {k: summary(v, 1e6) for k, v in floor_t.items()},
        # per run: median per-step overhead / median PING through the store's client
        "ratio_to_ping": {
            "per_run": ratios,
            "median": statistics.median(ratios),
            "min": min(ratios),
            "max": max(ratios),
        },
    }


def _parser_name(kwargs: dict[str, Any]) -> str:
    cls = kwargs.get("parser_class")
    if cls is not None:
        return str(cls.__name__)
    from redis.asyncio.connection import DefaultParser

    return DefaultParser.__name__


def _answer_records_at_once(store: RedisStore) -> None:
    """Make the store's lane answer the flow's step records (``noop#n``) with 1 at
    once, after packing them: no socket, no Redis (see the module docstring)."""
    lane = store._runner
    if not isinstance(lane, Lane):
        raise SystemExit("--cpu-only needs the store's lane (a redis:// or unix:// URL)")
    sha = store._scripts["record"].sha
    call = lane._call

    async def answered(conn: AbstractConnection, command: tuple[Any, ...]) -> Any:
        # EVALSHA sha 2 run journal base run_id fence key ...
        if command[1] == sha and str(command[8]).startswith("noop#"):
            _packed(conn, command)
            return 1
        return await call(conn, command)

    lane._call = answered  # type: ignore[method-assign]


def report(r: dict[str, Any]) -> str:
    if r.get("cpu_only"):
        rows = [
            ("per-step overhead (step - undecorated)", *_q(r["overhead_us"])),
            ("step call, as timed in the flow", *_q(r["step_us"])),
            ("undecorated call", *_q(r["plain_us"])),
        ]
        return (
            f"step overhead without I/O (--cpu-only): {r['steps']} sequential steps x "
            f"{r['rounds']} runs, the record calls answered at once\n"
            f"{table(rows, ['µs', 'median', 'p90', 'p99'])}\n"
            f"per run: {' '.join(f'{x:.1f}' for x in r['per_run_us'])} µs\n"
            f"{machine_line(r['machine'])}"
        )
    rows = [
        ("per-step overhead (step - undecorated)", *_q(r["overhead_us"])),
        ("step call, as timed in the flow", *_q(r["step_us"])),
        ("undecorated call", *_q(r["plain_us"])),
        ("floor: store.record() as a step writes it", *_q(r["floors_us"]["store_record_step"])),
        ("floor: store.record() alone, no event", *_q(r["floors_us"]["store_record"])),
        ("floor: PING through the store's client", *_q(r["floors_us"]["ping"])),
        ("floor: PING, socket_timeout=None forced", *_q(r["floors_us"]["ping_no_timeout"])),
        ("floor: PING on a bare asyncio socket", *_q(r["floors_us"]["raw_ping"])),
    ]
    out = table(rows, ["µs", "median", "p90", "p99"])
    q = r["ratio_to_ping"]
    return (
        f"step overhead: {r['steps']} sequential steps x {r['rounds']} runs, "
        f"parser {r['parser']}"
        f"{', @flow(optional_checkpoints=True)' if r.get('optional_checkpoints') else ''}\n"
        f"{out}\n"
        f"whole run (claim .. finish) / steps, best run: {r['run_wall_per_step_us']:.1f} µs\n"
        f"per-step overhead / PING, each run against its own floors: "
        f"{' '.join(f'{x:.2f}' for x in q['per_run'])} (median {q['median']:.2f})\n"
        f"{machine_line(r['machine'])}"
    )


def _q(s: dict[str, float]) -> tuple[float, float, float]:
    return s["median"], s["p90"], s["p99"]


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--profile", action="store_true", help="cProfile the first measured run")
    p.add_argument(
        "--cpu-only",
        action="store_true",
        help="answer the steps' record calls at once: the Python per step, no I/O",
    )
    p.add_argument(
        "--optional-checkpoints",
        action="store_true",
        help="run the flow with @flow(optional_checkpoints=True)",
    )
    a = p.parse_args()
    r = asyncio.run(
        measure(a.store, a.steps, a.rounds, a.profile, a.optional_checkpoints, cpu_only=a.cpu_only)
    )
    print(report(r))
    emit("step_overhead", r, a.json)


if __name__ == "__main__":
    main()
