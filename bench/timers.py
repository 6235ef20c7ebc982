"""How late a durable timer fires: sleeps of a few milliseconds, one after another.

A flow sleeps `--sleeps` times for each duration; an in-process worker
(`Worker.run`, as `steadyflow worker` runs it) serves it against real Redis.
Per sleep: the run's start-to-result time divided by the sleeps, minus the
duration: what a timer adds.

Each duration is measured twice. With the worker's defaults, a sleep that ends
within its ``inline_backoff_max`` (1 s) is waited for in place, the run staying
claimed (`sdk.engine._waits.holds`): what it adds is the write of the timer's record.
With ``inline_backoff_max=0`` every sleep parks the run: the park, the
worker's wait ending at the deadline, the claim that continues the flow, and
their round trips.

An idle worker blocks on ``BLPOP`` until work comes or its next deadline.
Redis ends a blocking command's timeout at its next cron tick (``hz``, 10 by
default: every 100 ms), so the store ends the wait itself at the deadline
(`stores._storecore.StoreCore.blpop_until`, a token on a list of the wait's own).
``--compare`` also runs the parked sleeps with that turned off (the wait ends
only when Redis ends it, as before 2026-11-24), so both are measured side by
side against the same server. The server's ``hz`` is printed.

    python -m bench.timers [--sleeps 20] [--ms 1,10,50] [--compare] [--store URL]
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

from bench._common import bench_store, emit, machine, machine_line, new_prefix, parser, table
from sdk import Client, Worker, flow, sleep
from stores import _storecore
from stores.redis import RedisStore

__all__ = ["main", "measure"]


@flow(name="bench.timers.naps")
async def naps(n: int, seconds: float) -> int:
    for _ in range(n):
        await sleep(seconds)
    return n


@contextlib.contextmanager
def ended_by_redis() -> Iterator[None]:
    """The store's blocking waits end only when Redis ends them (no bell)."""
    bell = _storecore.StoreCore.blpop_until

    async def plain(self: _storecore.StoreCore, keys: list[str], timeout: float) -> bool:
        reply = await self.blocking_client.blpop(keys, timeout=_storecore.block_seconds(timeout))
        return reply is not None

    _storecore.StoreCore.blpop_until = plain  # type: ignore[method-assign]
    try:
        yield
    finally:
        _storecore.StoreCore.blpop_until = bell  # type: ignore[method-assign]


async def measure(
    store: RedisStore, durations: list[float], sleeps: int, *, park: bool = False
) -> list[float]:
    """Per duration, the ms a sleep took beyond its duration (mean over `sleeps`);
    with `park`, every sleep parks the run (``inline_backoff_max=0``)."""
    worker = Worker(store, [naps], inline_backoff_max=0.0) if park else Worker(store, [naps])
    serving = asyncio.create_task(worker.run())
    client = Client(store)
    try:
        await (await client.start(naps, 2, durations[0])).result(timeout=60)  # warm up
        late = []
        for seconds in durations:
            t0 = time.perf_counter()
            await (await client.start(naps, sleeps, seconds)).result(timeout=600)
            late.append(((time.perf_counter() - t0) / sleeps - seconds) * 1e3)
        return late
    finally:
        await worker.stop()
        await serving


async def _main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--sleeps", type=int, default=20)
    p.add_argument("--ms", default="1,10,50", help="sleep durations, ms (comma-separated)")
    p.add_argument("--compare", action="store_true", help="also with waits ended by Redis")
    args = p.parse_args()
    durations = [float(ms) / 1e3 for ms in args.ms.split(",")]
    m = machine()
    figures: dict[str, Any] = {"machine": m, "sleeps": args.sleeps}
    async with bench_store(args.store, new_prefix("timers")) as store:
        hz = (await store.client.config_get("hz")).get("hz", "?")
        figures["hz"] = hz
        figures["waited_in_place"] = await measure(store, durations, args.sleeps)
        figures["ended_by_worker"] = await measure(store, durations, args.sleeps, park=True)
        if args.compare:
            with ended_by_redis():
                figures["ended_by_redis"] = await measure(store, durations, args.sleeps, park=True)
    print(f"timers: {args.sleeps} durable sleeps per duration, Redis hz {hz}")
    header = ["ms a sleep took beyond its duration", *(f"{ms} ms" for ms in args.ms.split(","))]
    rows = [
        ["waited in place (within inline_backoff_max)", *figures["waited_in_place"]],
        ["parked, wait ended by the worker (the bell)", *figures["ended_by_worker"]],
    ]
    if args.compare:
        rows.append(["parked, wait ended by Redis's timeout", *figures["ended_by_redis"]])
    print(table(rows, header))
    print(machine_line(m))
    emit("timers", figures, args.json)


def main() -> None:
    asyncio.run(_main())


if __name__ == "__main__":
    main()
