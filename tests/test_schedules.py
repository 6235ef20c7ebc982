"""Schedules: one run per tick, catch-up, overlap policies, operations, validation.

Every test drives the fake clock: hours of ticks run in milliseconds. The
decorated flows live in a registry of their own (`REG`), so that other tests'
workers (which serve the default registry) do not create their schedules.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sdk import Client, Registry, RunStatus, Worker, flow, scheduled, wait_for
from sdk.errors import IdempotencyConflict, InvalidArgument, ScheduleNotFound
from stores.redis import RedisStore
from testing import FakeClock, FlowTestEnv

REG = Registry()
TICKS: Counter[str] = Counter()
START = datetime(2026, 1, 5, 0, 30, tzinfo=UTC)


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> None:
    TICKS.clear()


@scheduled("0 * * * *", tz="Europe/Paris")
@flow(name="tests.schedules.hourly", registry=REG)
async def hourly(tick: datetime) -> str:
    TICKS[f"hourly {tick.isoformat()}"] += 1
    return tick.isoformat()


@flow(name="tests.schedules.quarterly", registry=REG)
@scheduled("*/15 * * * *")  # below @flow: the same
async def quarterly(tick: datetime) -> None:
    TICKS[f"quarterly {tick.isoformat()}"] += 1


@flow(name="tests.schedules.report", registry=REG)
async def report(tick: datetime, region: str, *, top: int = 3) -> str:
    TICKS[f"report {region} {top} {tick.isoformat()}"] += 1
    return f"{region}:{top}"


@flow(name="tests.schedules.held", registry=REG)
async def held(tick: datetime) -> str:
    """Runs until signalled "done": a tick's run that has not finished."""
    TICKS[f"held {tick.isoformat()}"] += 1
    await wait_for("done")
    return tick.isoformat()


def env_at(
    store: RedisStore | None = None, start: datetime = START, *, decorated: bool = False
) -> FlowTestEnv:
    """An env on `REG`; without `decorated`, its worker serves only the undecorated
    flows (so the decorated ones' schedules are not created)."""
    flows: list[Callable[..., Any] | str] | None = None if decorated else [report, held]
    return FlowTestEnv(FakeClock(start), store=store, registry=REG, flows=flows)


async def runs_of(client: Client, flow_name: str) -> list[str]:
    return sorted(r.run_id for r in await client.list_runs(flow=flow_name, limit=1000))


async def test_a_decorated_flow_fires_one_run_per_tick_across_a_day(store: RedisStore) -> None:
    async with env_at(store, decorated=True) as env:
        await env.run_until_idle()  # the worker creates the schedules
        for _ in range(24 * 4):
            await env.advance(timedelta(minutes=15))
        hourly_runs = await runs_of(env.client, "tests.schedules.hourly")
        assert len(hourly_runs) == 24
        assert hourly_runs[0] == "tests.schedules.hourly@2026-01-05T02:00:00+01:00"
        assert sum(1 for k in TICKS if k.startswith("hourly")) == 24
        assert all(n == 1 for n in TICKS.values())
        assert len(await runs_of(env.client, "tests.schedules.quarterly")) == 24 * 4
        first = await env.client.get(hourly_runs[0])
        assert first.status is RunStatus.COMPLETED
        assert first.result == "2026-01-05T02:00:00+01:00"  # the tick, in the schedule's zone
        infos = {i.schedule_id: i for i in await env.client.list_schedules()}
        assert infos["tests.schedules.hourly"].fired == 24
        assert infos["tests.schedules.hourly"].next_tick == datetime.fromisoformat(
            "2026-01-06T02:00:00+01:00"
        )
        assert infos["tests.schedules.quarterly"].tz == "UTC"


async def test_two_workers_on_one_store_start_one_run_per_tick(store: RedisStore) -> None:
    async with env_at(store, decorated=True) as env:
        other = Worker(store, registry=REG, clock=env.clock, name="second-worker")
        await asyncio.gather(env.worker.run_until_idle(), other.run_until_idle())  # created
        for _ in range(6):
            env.clock.advance(timedelta(hours=1))
            # both workers see the same due ticks and fire them at once
            await asyncio.gather(env.worker.run_until_idle(), other.run_until_idle())
        assert len(await runs_of(env.client, "tests.schedules.hourly")) == 6
        assert all(n == 1 for n in TICKS.values())
        assert len([k for k in TICKS if k.startswith("hourly")]) == 6


async def test_a_tick_fired_again_starts_nothing(store: RedisStore) -> None:
    async with env_at(store) as env:
        await env.client.create_schedule("again", report, cron="0 * * * *", args=("eu",))
        env.clock.advance(timedelta(hours=1))
        ticker = env.worker._ticker
        due, _ = await store.due_schedules(["tests.schedules.report"], env.clock.time())
        fire = ticker._plan(due[0], env.clock.time())
        assert fire is not None
        # the same fire twice (a retried write, a second worker): started once
        assert await store.fire_schedules([fire, fire]) == [
            ["again@2026-01-05T01:00:00+00:00"],
            None,
        ]
        await env.client.pause_schedule("again")
        await env.run_until_idle()
        assert await runs_of(env.client, "tests.schedules.report") == [
            "again@2026-01-05T01:00:00+00:00"
        ]
        assert dict(TICKS) == {"report eu 3 2026-01-05T01:00:00+00:00": 1}


async def test_after_downtime_only_the_last_missed_tick_fires_by_default(store: RedisStore) -> None:
    async with env_at(store) as env:
        await env.client.create_schedule("daily-ish", report, cron="0 * * * *", args=("eu",))
        await env.advance(timedelta(hours=5))  # no worker pass for 5 hours
        assert await runs_of(env.client, "tests.schedules.report") == [
            "daily-ish@2026-01-05T05:00:00+00:00"
        ]
        (info,) = await env.client.list_schedules()
        assert info.next_tick == datetime(2026, 1, 5, 6, 0, tzinfo=UTC)
        assert info.last_tick == datetime(2026, 1, 5, 5, 0, tzinfo=UTC)


async def test_a_catchup_window_fires_the_ticks_missed_within_it_oldest_first(
    store: RedisStore,
) -> None:
    async with env_at(store) as env:
        await env.client.create_schedule(
            "catchup", report, cron="0 * * * *", args=("eu",), kwargs={"top": 5},
            catchup=timedelta(hours=3), overlap="allow",
        )  # fmt: skip
        await env.advance(timedelta(hours=5))  # 01:00 .. 05:00 missed; now 05:30
        runs = await env.client.list_runs(flow="tests.schedules.report", limit=100)
        oldest_first = [r.run_id for r in sorted(runs, key=lambda r: (r.created_at, r.run_id))]
        assert oldest_first == [
            "catchup@2026-01-05T03:00:00+00:00",
            "catchup@2026-01-05T04:00:00+00:00",
            "catchup@2026-01-05T05:00:00+00:00",
        ]
        assert set(TICKS) == {
            "report eu 5 2026-01-05T03:00:00+00:00",
            "report eu 5 2026-01-05T04:00:00+00:00",
            "report eu 5 2026-01-05T05:00:00+00:00",
        }
        await env.advance(timedelta(hours=1))  # and then one per tick again
        assert len(await runs_of(env.client, "tests.schedules.report")) == 4


async def _held_schedule(env: FlowTestEnv, overlap: str) -> list[list[str]]:
    """Three hourly ticks while the first tick's run waits; the run ids after each."""
    await env.client.create_schedule("held", held, cron="0 * * * *", overlap=overlap)
    seen = []
    for _ in range(3):
        await env.advance(timedelta(hours=1))
        seen.append(await runs_of(env.client, "tests.schedules.held"))
    return seen


async def test_overlap_skip_skips_ticks_while_the_previous_run_is_going(store: RedisStore) -> None:
    async with env_at(store) as env:
        seen = await _held_schedule(env, "skip")
        assert seen[-1] == ["held@2026-01-05T01:00:00+00:00"]
        (info,) = await env.client.list_schedules()
        assert (info.skipped, info.last_skipped_tick) == (2, datetime(2026, 1, 5, 3, tzinfo=UTC))
        await env.client.signal("held@2026-01-05T01:00:00+00:00", "done")
        await env.run_until_idle()
        await env.advance(timedelta(hours=1))  # the next tick starts again
        assert await runs_of(env.client, "tests.schedules.held") == [
            "held@2026-01-05T01:00:00+00:00", "held@2026-01-05T04:00:00+00:00",
        ]  # fmt: skip


async def test_overlap_buffer_one_starts_one_waiting_tick_when_the_run_ends(
    store: RedisStore,
) -> None:
    async with env_at(store) as env:
        seen = await _held_schedule(env, "buffer_one")
        assert seen[-1] == ["held@2026-01-05T01:00:00+00:00"]
        (info,) = await env.client.list_schedules()
        # 02:00 waits, 03:00 found the buffer full
        assert info.buffered_tick == datetime(2026, 1, 5, 2, tzinfo=UTC)
        assert info.skipped == 1
        await env.client.signal("held@2026-01-05T01:00:00+00:00", "done")
        await env.run_until_idle()  # the first run ends: the buffered tick starts at once
        assert await runs_of(env.client, "tests.schedules.held") == [
            "held@2026-01-05T01:00:00+00:00", "held@2026-01-05T02:00:00+00:00",
        ]  # fmt: skip
        (info,) = await env.client.list_schedules()
        assert info.buffered_tick is None


async def test_overlap_allow_starts_every_tick(store: RedisStore) -> None:
    async with env_at(store) as env:
        seen = await _held_schedule(env, "allow")
        assert [len(s) for s in seen] == [1, 2, 3]
        statuses = {r.status for r in await env.client.list_runs(flow="tests.schedules.held")}
        assert statuses == {RunStatus.WAITING_FOR_SIGNAL}


async def test_pause_resume_trigger_list_and_delete(store: RedisStore) -> None:
    async with env_at(store) as env:
        client = env.client
        info = await client.create_schedule("ops", report, cron="0 * * * *", args=("us",))
        assert (info.schedule_id, info.flow, info.paused) == (
            "ops",
            "tests.schedules.report",
            False,
        )
        assert await client.create_schedule("ops", report, cron="0 * * * *", args=("us",)) == info
        with pytest.raises(IdempotencyConflict, match="'ops'"):
            await client.create_schedule("ops", report, cron="30 * * * *", args=("us",))

        paused = await client.pause_schedule("ops")
        assert paused.paused and paused.next_tick is None
        await env.advance(timedelta(hours=3))
        assert await runs_of(client, "tests.schedules.report") == []

        handle = await client.trigger_schedule("ops")  # also while paused
        assert handle.run_id == "ops@2026-01-05T03:30:00+00:00"
        await env.run_until_idle()
        assert await handle.result() == "us:3"

        resumed = await client.resume_schedule("ops")  # from the next tick: no catch-up
        assert resumed.next_tick == datetime(2026, 1, 5, 4, tzinfo=UTC)
        await env.advance(timedelta(hours=1))
        assert await runs_of(client, "tests.schedules.report") == [
            "ops@2026-01-05T03:30:00+00:00", "ops@2026-01-05T04:00:00+00:00",
        ]  # fmt: skip
        assert [i.schedule_id for i in await client.list_schedules()] == ["ops"]
        assert (await client.list_schedules())[0].fired == 2

        await client.delete_schedule("ops")
        assert await client.list_schedules() == []
        await env.advance(timedelta(hours=2))
        assert len(await runs_of(client, "tests.schedules.report")) == 2  # runs are kept
        for op in (client.pause_schedule, client.resume_schedule, client.delete_schedule,
                   client.trigger_schedule):  # fmt: skip
            with pytest.raises(ScheduleNotFound, match="'ops'"):
                await op("ops")


async def test_events_of_a_tick_run_carry_the_schedule_id(store: RedisStore) -> None:
    async with env_at(store) as env:
        await env.client.create_schedule("corr", report, cron="0 * * * *", args=("eu",))
        await env.advance(timedelta(hours=1))
        (run_id,) = await runs_of(env.client, "tests.schedules.report")
        record = await env.client.get(run_id)
        assert record.schedule_id == "corr"
        events = await env.client.events(run_id)
        assert [e.type for e in events][:2] == ["run.created", "run.started"]
        assert events[0].data == {
            "schedule_id": "corr", "tick": "2026-01-05T01:00:00+00:00", "cause": "tick",
        }  # fmt: skip
        assert all(e.correlation["schedule_id"] == "corr" for e in events)
        plain = await env.start(report, datetime.now(UTC), "eu", run_id="plain")
        await env.run_until_idle()
        assert (await env.client.get(plain.run_id)).schedule_id is None
        assert all("schedule_id" not in e.correlation for e in await env.client.events("plain"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cron": "61 * * * *"}, "schedule 'bad': cron '61 \\* \\* \\* \\*' is not a cron"),
        ({"cron": 5}, "schedule 'bad': cron must be a str"),
        ({"cron": "0 * * * *", "tz": "Mars/Olympus"}, "schedule 'bad': tz 'Mars/Olympus'"),
        ({"cron": "0 * * * *", "overlap": "queue"}, "schedule 'bad': overlap must be one of"),
        ({"cron": "0 * * * *", "catchup": timedelta(hours=-1)}, "schedule 'bad': catchup must"),
        ({"cron": "0 * * * *", "catchup": "1h"}, "schedule 'bad': catchup must be a timedelta"),
        ({"cron": "0 * * * *", "args": (1, 2, 3)}, "tests.schedules.report"),
    ],
)
async def test_a_bad_schedule_is_refused_naming_it_and_the_argument(
    kwargs: dict[str, object], message: str
) -> None:
    async with env_at() as env:
        with pytest.raises(InvalidArgument, match=message):
            await env.client.create_schedule("bad", report, **kwargs)  # type: ignore[arg-type]
        assert await env.client.list_schedules() == []


@pytest.mark.parametrize("schedule_id", ["", "a@b", "line\nbreak", 7])
async def test_a_bad_schedule_id_is_refused(schedule_id: object) -> None:
    async with env_at() as env:
        with pytest.raises(InvalidArgument, match="schedule_id"):
            await env.client.create_schedule(schedule_id, report, cron="0 * * * *")  # type: ignore[arg-type]


def test_a_scheduled_flow_needs_a_parameter_for_the_tick() -> None:
    with pytest.raises(InvalidArgument, match="first parameter receives the tick"):

        @scheduled("0 * * * *")
        @flow(name="tests.schedules.no_tick", registry=Registry())
        async def no_tick() -> None: ...

    with pytest.raises(InvalidArgument, match="tz 'Nowhere/Land'"):
        scheduled("0 * * * *", tz="Nowhere/Land")


async def test_a_store_with_several_partitions_fires_one_run_per_tick(
    partitioned: RedisStore,
) -> None:
    # A tick's run is created by the script that advances its schedule, in the
    # schedules' partition: its id gets the "~p<n>" suffix that puts it there.
    async with env_at(partitioned) as env:
        await env.client.create_schedule("p", report, cron="0 * * * *", args=("eu",))
        other = Worker(partitioned, registry=REG, clock=env.clock, flows=[report, held])
        for _ in range(8):
            env.clock.advance(timedelta(hours=1))
            await asyncio.gather(env.worker.run_until_idle(), other.run_until_idle())
        runs = await env.client.list_runs(flow=report, limit=100)
        assert len(runs) == 8 and {r.status for r in runs} == {RunStatus.COMPLETED}
        keys = partitioned.keys
        for r in runs:
            base = r.run_id.split("~p")[0]
            assert base.startswith("p@2026-01-05T")
            assert r.run_id == partitioned.schedule_run_id(base) == keys.in_partition(base, 0)
            assert keys.partition(r.run_id) == 0
        assert any("~p" in r.run_id for r in runs)  # some ids needed a suffix
        assert all(n == 1 for n in TICKS.values()) and len(TICKS) == 8
        info = (await env.client.list_schedules())[0]
        assert info.fired == 8 and info.last_run_id in {r.run_id for r in runs}
        handle = await env.client.trigger_schedule("p")
        await env.run_until_idle()
        assert await handle.result() == "eu:3"
        assert keys.partition(handle.run_id) == 0


async def test_a_worker_restarting_after_downtime_keeps_the_decorated_schedule(
    store: RedisStore,
) -> None:
    async with env_at(store, decorated=True) as env:
        await env.run_until_idle()  # the schedules are created
        await env.advance(timedelta(hours=1))
        before = {i.schedule_id: i for i in await env.client.list_schedules()}
    later = START + timedelta(hours=4)  # down for 3 hours; a new worker starts
    async with env_at(store, later, decorated=True) as env:
        await env.run_until_idle()
        after = {i.schedule_id: i for i in await env.client.list_schedules()}
        # unchanged definition: nothing rewritten, and the last missed tick fires
        assert (
            after["tests.schedules.hourly"].created_at
            == before["tests.schedules.hourly"].created_at
        )
        assert await runs_of(env.client, "tests.schedules.hourly") == [
            "tests.schedules.hourly@2026-01-05T02:00:00+01:00",
            "tests.schedules.hourly@2026-01-05T05:00:00+01:00",
        ]
