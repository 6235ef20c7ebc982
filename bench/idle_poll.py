"""What a worker's idle poll costs with 1, 8 and 64 partitions, and a busy claim.

A worker with nothing to do polls every partition (maintenance, then a claim)
each time it wakes. The store asks all partitions at once (stores._claiming):
one round trip on one node (the lane pipelines the calls), one per master on a
cluster. "sequential" is the earlier way, one partition after another, kept
here to measure against (the same scripts, awaited in turn).

Also: a claim of 10 runs when 40 are ready, spread over the partitions (two
concurrent rounds: peek, then claim).

    python -m bench.idle_poll [--store URL] [--cluster] [--polls 300] [--json]

``--cluster`` also runs on a 3-master local Redis Cluster (redis-server and
redis-cli on PATH), started and stopped (by pid) by the bench.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench._common import emit, new_prefix, parser, summary, table
from bench.scaling import cluster_of
from sdk.store import Claim, NewRun, RunStatus, TickResult
from stores import _decode, open_store
from stores._codec import num
from stores._queuestore import limits_args
from stores.redis import RedisStore

PARTITIONS = (1, 8, 64)
NO_ARGS = '{"args":[],"kwargs":{},"types":{}}'


async def sequential_poll(store: RedisStore, now: float) -> None:
    """The earlier poll, as the store did it: each partition's script awaited in
    turn, its reply decoded."""
    ticks: list[TickResult] = []
    claims: list[Claim] = []
    for p in range(store.keys.partitions):
        reply = await store._core.call(
            "poll", [store._core.anchor(p)],
            [store.keys.base(p), "bench", num(now), num(now + 30), str(8 - len(claims)), "10",
             "{}", *limits_args(()), "0"],
        )  # fmt: skip
        ticked, taken = _decode.corrupt("", reply)
        ticks.append(_decode.tick_result(ticked))
        claims += _decode.claims(taken, store.keys.run, store._core.key)
    _decode.merged(ticks)


async def timed(calls: int, op: Any) -> dict[str, float]:
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        await op()
        times.append(time.perf_counter() - t)
    return summary(times, 1000.0)


async def measure(url: str, partitions: int, polls: int) -> dict[str, float]:
    prefix = new_prefix("idle")
    store = open_store(url, prefix=prefix, partitions=partitions)
    try:
        now = 1_000_000.0
        await store.poll("bench", None, 8, now, 30, 10, "{}")  # connected, scripts loaded
        concurrent = await timed(polls, lambda: store.poll("bench", None, 8, now, 30, 10, "{}"))
        one_by_one = await timed(polls, lambda: sequential_poll(store, now))
        claims = []
        for round_ in range(max(polls // 20, 5)):
            for i in range(40):
                run_id = f"r{round_}-{i}"
                await store.create_run(
                    NewRun(run_id, "bench.flow", None, NO_ARGS, "h", "default", 0, None, now + i)
                )
            t = time.perf_counter()
            got = await store.claim("bench", None, 10, now, 30)
            claims.append(time.perf_counter() - t)
            assert len(got) == 10, got
            for c in await store.claim("bench", None, 100, now, 30):
                await store.finish(c.run.run_id, c.run.fence, RunStatus.COMPLETED, now)
            for c in got:
                await store.finish(c.run.run_id, c.run.fence, RunStatus.COMPLETED, now)
        return {
            "poll_ms": concurrent["median"],
            "sequential_poll_ms": one_by_one["median"],
            "claim10_ms": summary(claims, 1000.0)["median"],
        }
    finally:
        keys = [k async for k in _keys(store, prefix)]
        for k in keys:
            await store.client.unlink(k)
        await store.close()


async def _keys(store: RedisStore, prefix: str) -> Any:
    if store.cluster:
        for node in store.client.get_primaries():  # type: ignore[attr-defined]
            async for k in store.client.scan_iter(match=f"{prefix}:*", target_nodes=node):
                yield k
    else:
        async for k in store.client.scan_iter(match=f"{prefix}:*"):
            yield k


async def run_all(urls: list[tuple[str, str]], polls: int) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    rows = []
    for label, url in urls:
        for n in PARTITIONS:
            got = await measure(url, n, polls)
            figures[f"{label}_{n}"] = got
            rows.append((label, n, got["poll_ms"], got["sequential_poll_ms"], got["claim10_ms"]))
    print(table(rows, ["store", "partitions", "idle poll ms", "sequential ms", "claim 10 ms"]))
    return figures


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--polls", type=int, default=300)
    p.add_argument("--cluster", action="store_true")
    args = p.parse_args()
    urls = [("redis", args.store)]
    if args.cluster:
        with cluster_of(3) as cluster:
            figures = asyncio.run(run_all([*urls, ("cluster", cluster.url)], args.polls))
    else:
        figures = asyncio.run(run_all(urls, args.polls))
    emit("idle_poll", figures, args.json)


if __name__ == "__main__":
    main()
