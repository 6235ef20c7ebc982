"""`Client.send_event` among many waiting runs: round trips and wall time.

`--runs` runs (default 10,000) park in ``wait_for_event("bench.paid",
match={"order_id": ...})``, each with its own order id; then each measured
send names one of them, so exactly one run matches. A send reads the filter
shapes of the event and the one index its data selects (one round trip per
partition each, concurrently), then delivers to the matching run: the cost
does not grow with the number of waiting runs. Also measured: a send that
matches no run. Figures for ``--partitions`` 1 and 4 by default.

    python -m bench.send_event [--runs 10000] [--sends 200] [--partitions 1,4] [--store URL]
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from bench._common import bench_store, counting, emit, new_prefix, parser, summary, table
from sdk import Client, Worker, flow, wait_for_event

__all__ = ["main", "measure"]


@flow(name="bench.await_paid")
async def await_paid(order_id: str) -> Any:
    return await wait_for_event("bench.paid", match={"order_id": order_id})


async def _park(client: Client, worker: Worker, runs: int) -> None:
    for start in range(0, runs, 500):
        ids = range(start, min(start + 500, runs))
        await asyncio.gather(
            *(client.start(await_paid, f"o-{i}", run_id=f"bench-paid-{i}") for i in ids)
        )
    await worker.run_until_idle()


async def measure(url: str, runs: int, sends: int, partitions: int) -> dict[str, Any]:
    prefix = new_prefix("send-event")
    async with (
        bench_store(url, prefix, partitions=partitions) as wstore,
        bench_store(url, prefix, partitions=partitions, cleanup=False) as sstore,
    ):
        count = counting(sstore)
        client, sender = Client(wstore), Client(sstore)
        began = time.perf_counter()
        await _park(client, Worker(wstore, concurrency=64), runs)
        park_s = time.perf_counter() - began
        waiting = sum([await wstore.client.zcard(k) for k in _waiting_keys(wstore)])
        # warm up: connections made, the delivery script loaded
        assert await sender.send_event("bench.paid", {"order_id": "o-0"}) == ["bench-paid-0"]

        hit_rt, hit_ms, miss_rt, miss_ms = [], [], [], []
        for n in range(1, sends + 1):
            target = n * (runs - 1) // sends  # spread over the runs (and partitions)
            snap = count.snapshot()
            t0 = time.perf_counter()
            got = await sender.send_event("bench.paid", {"order_id": f"o-{target}", "n": n})
            hit_ms.append((time.perf_counter() - t0) * 1000)
            hit_rt.append(count.since(snap)["round_trips"])
            assert got == [f"bench-paid-{target}"], got
            snap = count.snapshot()
            t0 = time.perf_counter()
            assert await sender.send_event("bench.paid", {"order_id": "nobody"}) == []
            miss_ms.append((time.perf_counter() - t0) * 1000)
            miss_rt.append(count.since(snap)["round_trips"])
    return {
        "runs": runs,
        "waiting": waiting,
        "partitions": partitions,
        "sends": sends,
        "park_s": round(park_s, 2),
        "one_match": {"round_trips": _rt(hit_rt), "ms": summary(hit_ms)},
        "no_match": {"round_trips": _rt(miss_rt), "ms": summary(miss_ms)},
    }


def _rt(counts: list[int]) -> dict[str, float]:
    """Round trips per send: the usual count, and the most (a new connection's setup)."""
    return {"median": statistics.median(counts), "max": max(counts)}


def _waiting_keys(store: Any) -> list[str]:
    return [store.keys.status_index(p, "waiting_for_signal") for p in range(store.keys.partitions)]


HEADER = [
    "partitions",
    "waiting runs",
    "send",
    "round trips",
    "(max)",
    "median ms",
    "p99 ms",
    "max ms",
]


def report(results: list[dict[str, Any]]) -> str:
    rows = []
    for r in results:
        for case in ("one_match", "no_match"):
            ms = r[case]["ms"]
            rows.append(
                (
                    r["partitions"], r["waiting"], case.replace("_", " "),
                    r[case]["round_trips"]["median"], r[case]["round_trips"]["max"],
                    ms["median"], ms["p99"], ms["max"],
                )
            )  # fmt: skip
    return table(rows, HEADER)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10_000)
    p.add_argument("--sends", type=int, default=200)
    p.add_argument("--partitions", default="1,4", help="comma-separated partition counts")
    a = p.parse_args()
    results = [
        asyncio.run(measure(a.store, a.runs, a.sends, int(n))) for n in a.partitions.split(",")
    ]
    print(report(results))
    for r in results:
        emit("send_event", r, a.json)


if __name__ == "__main__":
    main()
