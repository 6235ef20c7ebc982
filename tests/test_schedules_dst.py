"""Schedules across DST nights (Europe/Paris): what happens to the skipped and the
repeated hour. See `sdk.model._schedules` (cronsim follows Debian cron)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from sdk import Registry, flow
from stores.redis import RedisStore
from testing import FakeClock, FlowTestEnv

REG = Registry()


@flow(name="tests.schedules_dst.job", registry=REG)
async def job(tick: datetime) -> str:
    return tick.isoformat()


async def ticks_over_the_night(store: RedisStore, start: datetime) -> dict[str, list[str]]:
    """The tick times (run id suffixes) of a daily 02:30 and an hourly job, from
    `start` over 6 hours advanced 10 minutes at a time."""
    async with FlowTestEnv(FakeClock(start), store=store, registry=REG) as env:
        for sid, cron in (("daily", "30 2 * * *"), ("hourly", "0 * * * *")):
            await env.client.create_schedule(sid, job, cron=cron, tz="Europe/Paris")
        for _ in range(6 * 6):
            await env.advance(timedelta(minutes=10))
        runs = await env.client.list_runs(flow="tests.schedules_dst.job", limit=100)
        out: dict[str, list[str]] = {"daily": [], "hourly": []}
        for r in sorted(runs, key=lambda r: (r.created_at, r.run_id)):
            sid, tick = r.run_id.split("@")
            out[sid].append(tick)
            assert await env.client.handle(r.run_id).result() == tick  # the flow got the tick
        return out


async def test_spring_forward_the_skipped_hour(store: RedisStore) -> None:
    # 2026-03-29: at 02:00 CET clocks go to 03:00 CEST; start at 23:30 local
    ticks = await ticks_over_the_night(store, datetime(2026, 3, 28, 22, 30, tzinfo=UTC))
    # the daily 02:30 does not exist that night: it fires when the gap ends, once
    assert ticks["daily"] == ["2026-03-29T03:00:00+02:00"]
    # the hourly job has no 02:00 tick: one hour of real time passes from 01:00 to 03:00
    assert ticks["hourly"] == [
        "2026-03-29T00:00:00+01:00", "2026-03-29T01:00:00+01:00",
        "2026-03-29T03:00:00+02:00", "2026-03-29T04:00:00+02:00", "2026-03-29T05:00:00+02:00",
        "2026-03-29T06:00:00+02:00",
    ]  # fmt: skip


async def test_fall_back_the_repeated_hour(store: RedisStore) -> None:
    # 2026-10-25: at 03:00 CEST clocks go back to 02:00 CET; start at 23:30 local
    ticks = await ticks_over_the_night(store, datetime(2026, 10, 24, 21, 30, tzinfo=UTC))
    # the daily 02:30 comes twice on the wall clock: it fires once, at the first
    assert ticks["daily"] == ["2026-10-25T02:30:00+02:00"]
    # the hourly job fires every real hour: both 02:00s, told apart by their offsets
    assert ticks["hourly"] == [
        "2026-10-25T00:00:00+02:00", "2026-10-25T01:00:00+02:00",
        "2026-10-25T02:00:00+02:00", "2026-10-25T02:00:00+01:00",
        "2026-10-25T03:00:00+01:00", "2026-10-25T04:00:00+01:00",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        # down over the spring-forward gap: the last missed tick is 03:00 CEST
        (datetime(2026, 3, 28, 23, 30, tzinfo=UTC), "2026-03-29T03:00:00+02:00"),
        # down over the repeated hour: the last missed tick is the second 02:00
        (datetime(2026, 10, 24, 23, 30, tzinfo=UTC), "2026-10-25T02:00:00+01:00"),
    ],
)
async def test_downtime_across_a_dst_change_fires_the_last_real_tick(
    store: RedisStore, start: datetime, expected: str
) -> None:
    async with FlowTestEnv(FakeClock(start), store=store, registry=REG) as env:
        await env.client.create_schedule("hourly", job, cron="0 * * * *", tz="Europe/Paris")
        await env.advance(timedelta(minutes=120))  # no pass until then
        (run,) = await env.client.list_runs(flow="tests.schedules_dst.job")
        assert run.run_id == f"hourly@{expected}"
