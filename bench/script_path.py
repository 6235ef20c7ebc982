"""What the store's script path costs: the lane and the packer against redis-py's own.

Every store operation is one ``EVALSHA``. This benchmark builds one store per
variant on the same Redis and compares, in one run:

- ``record``: a bare ``store.record`` call (a step's write), the variants
  called in turn, call by call, so noise hits them all alike;
- ``step``: a step as timed inside a flow (``bench.overhead``), the variants
  taking turns run by run (`--steps` steps each, `--rounds` turns).

Variants (``redis-py`` is the reference every ratio is against):

- ``redis-py``: redis-py's script object (``Redis.register_script``): its
  ``evalsha`` through ``Redis.execute_command``, which takes a connection from
  the pool and gives it back per call (`stores._redispy.RedisPyScripts`);
- ``single``: the same through a ``single_connection_client`` on the store's
  pool (redis-py's public way to keep a connection checked out);
- ``lane``: the store's lane (connections held, sent with redis-py's packer);
- ``lane+packer``: the lane with `stores._redispy.pack` (the store's default).

    python -m bench.script_path [--calls 3000] [--steps 300] [--rounds 10] [--store URL]
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.commands.core import AsyncScript

from bench import flows
from bench._common import delete_prefix, emit, new_prefix, parser, summary, table
from sdk import Client, Worker
from sdk._core._journal import Kind, Record, State
from stores._redispy import Lane, RedisPyScripts, ScriptRunner
from stores.redis import RedisStore

__all__ = ["VARIANTS", "main", "measure"]

VARIANTS = ("redis-py", "single", "lane", "lane+packer")
REFERENCE = "redis-py"


class _LaneWithRedisPysPacker(Lane):
    @staticmethod
    async def _call(conn: AbstractConnection, command: tuple[Any, ...]) -> Any:
        await conn.send_command(*command)
        return await conn.read_response()


class _SingleConnection:
    """redis-py's script objects through a single-connection client on the pool."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._client = aioredis.Redis(connection_pool=pool, single_connection_client=True)

    async def run(self, script: AsyncScript, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return await script(keys, args, client=self._client)

    async def close(self) -> None:
        await self._client.aclose(close_connection_pool=False)


def _configure(store: RedisStore, variant: str) -> None:
    """Make `store` send its scripts the `variant`'s way (before its first command)."""
    pool = store.client.connection_pool
    runners: dict[str, Callable[[], ScriptRunner]] = {
        "redis-py": RedisPyScripts,
        "single": lambda: _SingleConnection(pool),
        "lane": lambda: _LaneWithRedisPysPacker(pool, 64),
        "lane+packer": lambda: Lane(pool, 64),
    }
    store._runner = runners[variant]()


@asynccontextmanager
async def _store(url: str, variant: str) -> AsyncIterator[RedisStore]:
    prefix = new_prefix("script-path")
    store = RedisStore.from_url(url, prefix=prefix)
    _configure(store, variant)
    try:
        yield store
    finally:
        await delete_prefix(store, prefix)
        await store.close()


async def _record_calls(stores: dict[str, RedisStore], calls: int) -> dict[str, list[float]]:
    """µs of `store.record` per variant, interleaved call by call."""
    targets: dict[str, Callable[[], Awaitable[Any]]] = {}
    rec = Record("noop#1", 0, Kind.STEP, State.OK, value=1).to_json()
    for variant, store in stores.items():
        handle = await Client(store).start(flows.wait_once)
        claims = await store.claim("bench-path", None, 1, time.time(), 600.0)
        assert claims and claims[0].run.run_id == handle.run_id
        fence = claims[0].run.fence
        targets[variant] = functools.partial(store.record, handle.run_id, fence, "noop#1", rec)
    times: dict[str, list[float]] = {v: [] for v in stores}
    order = list(stores)
    clock = time.perf_counter
    for i in range(calls + 50):  # the first 50 warm up
        order = order[1:] + order[:1]
        for variant in order:
            t0 = clock()
            await targets[variant]()
            if i >= 50:
                times[variant].append(clock() - t0)
    return times


async def _step_runs(
    stores: dict[str, RedisStore], steps: int, rounds: int
) -> dict[str, list[float]]:
    """Seconds per step (as timed in the flow) per variant, the variants taking turns."""
    runners: dict[str, tuple[Client, Worker]] = {
        v: (Client(s), Worker(s, [flows.overhead], concurrency=1)) for v, s in stores.items()
    }

    async def run(variant: str, n: int) -> list[float]:
        client, worker = runners[variant]
        handle = await client.start(flows.overhead, n)
        await worker.run_until_idle()
        step_t, _plain = await handle.result(timeout=60)
        return list(step_t)

    for variant in stores:
        await run(variant, 100)  # warm up
    times: dict[str, list[float]] = {v: [] for v in stores}
    order = list(stores)
    for _ in range(rounds):
        order = order[1:] + order[:1]
        for variant in order:
            times[variant] += await run(variant, steps)
    return times


async def measure(
    url: str,
    calls: int = 3000,
    steps: int = 300,
    rounds: int = 10,
    variants: Sequence[str] = VARIANTS,
) -> dict[str, Any]:
    async with AsyncExitStack() as stack:
        stores = {v: await stack.enter_async_context(_store(url, v)) for v in variants}
        record = _record_calls(stores, calls)
        record_t = await record
        step_t = await _step_runs(stores, steps, rounds)
    figures: dict[str, Any] = {"calls": calls, "steps": steps, "rounds": rounds}
    for name, times in (("record", record_t), ("step", step_t)):
        per = {v: summary(t, 1e6) for v, t in times.items()}
        ref = per[REFERENCE]["median"] if REFERENCE in per else per[variants[0]]["median"]
        figures[name] = {
            v: {**s, "ratio": s["median"] / ref, "saved_us": ref - s["median"]}
            for v, s in per.items()
        }
    return figures


def report(r: dict[str, Any]) -> str:
    out = []
    for name, title in (
        ("record", f"store.record(), {r['calls']} calls each, interleaved call by call"),
        ("step", f"a step in a flow, {r['rounds']} x {r['steps']} steps each, runs alternated"),
    ):
        rows = [
            (v, s["median"], s["p90"], s["p99"], s["ratio"], s["saved_us"])
            for v, s in r[name].items()
        ]
        out.append(title)
        out.append(table(rows, ["µs", "median", "p90", "p99", f"/ {REFERENCE}", "saved"]))
    return "\n\n".join(out)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=3000)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--variants", default=",".join(VARIANTS))
    a = p.parse_args()
    variants = [v for v in a.variants.split(",") if v]
    r = asyncio.run(measure(a.store, a.calls, a.steps, a.rounds, variants))
    print(report(r))
    emit("script_path", r, a.json)


if __name__ == "__main__":
    main()
