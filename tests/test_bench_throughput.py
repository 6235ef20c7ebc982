"""`python -m bench.throughput`: the store-alone measurement writes what a step writes,
and the report carries its rows."""

from __future__ import annotations

import math

from bench.throughput import measure, report, store_alone
from sdk import Client
from stores.redis import RedisStore


async def test_store_alone_writes_each_runs_records(real_store: RedisStore) -> None:
    client = Client(real_store)

    rate, cpu, server = await store_alone(real_store, client, runs=3, steps=4)

    journals = [k async for k in real_store.client.scan_iter(match=real_store.keys.journal("*"))]
    assert len(journals) == 3
    assert [await real_store.client.hlen(k) for k in journals] == [4, 4, 4]
    assert rate > 0 and cpu > 0 and server is not None and server >= 0


async def test_measure_reports_the_store_alone_rows(redis_url: str) -> None:
    r = await measure(redis_url, runs=2, steps=3, rounds=1)

    assert r["runs_not_completed"] == 0
    assert len(r["store_alone_records_per_s_all"]) == 1
    assert r["share_of_store_alone"] > 0 and math.isfinite(r["share_of_store_alone"])
    text = report(r)
    assert "store alone (no engine), records/s" in text
    assert "engine's own CPU per step" in text
    assert "store alone: Redis CPU per record" in text
