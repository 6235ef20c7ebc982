"""Times and durations at the boundary, and reads of a stored time no `datetime`
holds (issue 30).

A time is taken from 0001-01-02 to 9999-12-31 UTC (`sdk._core._clock.EARLIEST`
and `LATEST`: every UTC offset can show it), a duration up to 1e10 seconds;
anything else is `InvalidArgument` before anything is written. A run stored
before those checks (``start_at=9999-12-31T23:59:59-14:00`` is year 10000 in
UTC), or edited by hand, reads as damaged (`RunRecord.damage` names the field)
and every other run is listed as usual: `Client` here, the command line too;
the HTTP API and the console are in test_http_boundary.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import attrs
import pytest

from sdk import Client, RunStatus, flow, sleep_until, start_child
from sdk._core._serde import dumps
from sdk.cli._options import ExitCode
from sdk.client._runpages import RunFilter, decode_cursor, page_runs
from sdk.client._starting import new_run
from sdk.errors import InvalidArgument
from stores.redis import RedisStore
from testing import FakeClock, FlowTestEnv
from tests.test_cli_runs import CliEnv

#: Aware datetimes that some reader could not show: in UTC, year 10000 and year 0;
#: the last is a UTC time that an offset of +14:00 would carry into year 10000.
OUT_OF_RANGE = [
    datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-14))),
    datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))),
    datetime(9999, 12, 31, 12, tzinfo=UTC),
]
IDS = ["year-10000-in-utc", "year-0-in-utc", "past-the-last-day"]
#: What the bug stored for the first two (epoch seconds).
STORED = {"late": 253402350799.0, "early": -62135647200.0}
#: The tampered cursor of the issue: ``[1e308, "x"]``.
TAMPERED_CURSOR = "WzFlMzA4LCAieCJd"


@flow(name="tests.times.echo")
async def echo(x: int) -> int:
    return x


@flow(name="tests.times.tick")
async def tick(at: datetime) -> str:
    return at.isoformat()


@flow(name="tests.times.parent")
async def parent(i: int) -> str:
    child = await start_child(echo, 1, start_at=OUT_OF_RANGE[i])
    return child.run_id


@flow(name="tests.times.sleeper")
async def sleeper(i: int) -> None:
    await sleep_until(OUT_OF_RANGE[i])


async def plant(store: RedisStore, run_id: str, start_at: float) -> None:
    """Store a run with `start_at` as the client did before issue 30 (it checked only
    that the time was finite): through the store, past today's checks."""
    new = new_run(
        "tests.times.echo", (1,), {}, Client(store).serializer, run_id=run_id, priority=0,
        queue=None, tenant_id=None, options=None, now=1_795_000_000.0,
    )  # fmt: skip
    await store.create_run(attrs.evolve(new, start_at=start_at), dumps({"flow": new.flow}))


# -- refused at the boundary ------------------------------------------------------------


@pytest.mark.parametrize("at", OUT_OF_RANGE, ids=IDS)
async def test_start_refuses_a_start_at_that_a_reader_could_not_show(
    memory_store: RedisStore, at: datetime
) -> None:
    client = Client(memory_store)
    with pytest.raises(InvalidArgument, match="start_at must be from 0001-01-02"):
        await client.start(echo, 1, start_at=at)
    assert await client.list_runs() == []  # nothing stored


async def test_the_first_and_last_times_are_taken(memory_store: RedisStore) -> None:
    client = Client(memory_store)
    first = datetime(1, 1, 2, tzinfo=UTC)
    last = datetime(9999, 12, 31, 9, 59, tzinfo=timezone(timedelta(hours=10)))
    await client.start(echo, 1, run_id="first", start_at=first)
    await client.start(echo, 2, run_id="last", start_at=last)
    got = {r.run_id: r for r in await client.list_runs()}
    assert got["first"].start_at == first and got["last"].start_at == last
    assert got["first"].damage is None and got["last"].damage is None
    from sdk._core._clock import MAX_TIME, MIN_TIME

    last_day = datetime(9999, 12, 31, tzinfo=UTC)
    assert (first.timestamp(), last_day.timestamp()) == (MIN_TIME, MAX_TIME)


async def test_start_in_that_ends_past_the_last_time_is_refused(memory_store: RedisStore) -> None:
    client = Client(memory_store, clock=FakeClock(datetime(9999, 6, 1, tzinfo=UTC)))
    with pytest.raises(InvalidArgument, match=r"start_in: .* from now is after 9999-12-31"):
        await client.start(echo, 1, start_in=timedelta(days=300))
    with pytest.raises(InvalidArgument, match="start_in must be finite and at most 1e\\+10"):
        await client.start(echo, 1, start_in=1e300)
    assert await client.list_runs() == []


@pytest.mark.parametrize("i", range(len(OUT_OF_RANGE)), ids=IDS)
async def test_a_child_start_or_a_sleep_out_of_range_fails_its_run_and_stores_no_time(
    i: int,
) -> None:
    async with FlowTestEnv(flows=[parent, sleeper, echo]) as env:
        starts = await env.start(parent, i, run_id="parent")
        sleeps = await env.start(sleeper, i, run_id="sleeper")
        await env.run_until_idle()
        for handle, what in ((starts, "start_at"), (sleeps, "sleep_until(): when")):
            record = await env.client.get(handle.run_id)
            assert record.status is RunStatus.FAILED
            assert record.error is not None
            assert record.error.type == "sdk.errors:InvalidArgument"
            assert f"{what} must be from 0001-01-02" in record.error.message
        runs = await env.client.list_runs()
    assert sorted(r.run_id for r in runs) == ["parent", "sleeper"]  # no child was stored
    assert all(r.damage is None and r.waiting_on == () for r in runs)


@pytest.mark.parametrize("at", OUT_OF_RANGE, ids=IDS)
async def test_a_listing_refuses_a_since_out_of_range(memory_store: RedisStore, at: Any) -> None:
    with pytest.raises(InvalidArgument, match="since must be from 0001-01-02"):
        RunFilter(since=at)


async def test_a_listing_refuses_a_cursor_no_run_could_have_made(memory_store: RedisStore) -> None:
    with pytest.raises(InvalidArgument, match="is not a cursor of a run listing"):
        decode_cursor(TAMPERED_CURSOR)
    with pytest.raises(InvalidArgument, match="cursor"):
        await page_runs(Client(memory_store), cursor=TAMPERED_CURSOR)


@pytest.mark.parametrize("catchup", [1e300, 1e12, timedelta.max, float("inf")])
async def test_a_schedule_catchup_past_the_longest_duration_is_refused(
    memory_store: RedisStore, catchup: Any
) -> None:
    client = Client(memory_store)
    with pytest.raises(InvalidArgument, match="catchup must be >= 0 and at most 1e\\+10"):
        await client.create_schedule("s", tick, cron="* * * * *", catchup=catchup)
    assert await client.list_schedules() == []


async def test_a_stored_catchup_past_what_a_timedelta_holds_still_lists(
    memory_store: RedisStore,
) -> None:
    client = Client(memory_store)
    await client.create_schedule("ok", tick, cron="0 * * * *", catchup=timedelta(hours=1))
    await client.create_schedule("bad", tick, cron="0 * * * *", catchup=timedelta(hours=1))
    # as Client.create_schedule(catchup=1e300) stored it before issue 30
    for name in [k async for k in memory_store.client.scan_iter(match="*")]:
        if await memory_store.client.type(name) == "hash":
            fields = await memory_store.client.hgetall(name)
            if fields.get("catchup") and "bad" in name:
                await memory_store.client.hset(name, "catchup", "1e300")
    listed = {s.schedule_id: s.catchup for s in await client.list_schedules()}
    assert listed == {"ok": timedelta(hours=1), "bad": timedelta(seconds=1e10)}


# -- a time out of range already stored: read as damage, the rest as usual ---------------


async def _edit_by_hand(store: RedisStore, run_id: str) -> None:
    await plant(store, run_id, 1_795_000_000.0)
    key = store.key_of(run_id, "run")
    await store.client.hset(key, "start_at", str(STORED["late"]))


@pytest.mark.parametrize("how", ["stored-by-the-old-client", "edited-by-hand"])
async def test_a_stored_time_out_of_range_reads_as_damage_and_the_rest_as_usual(
    store: RedisStore, how: str
) -> None:
    client = Client(store)
    await client.start(echo, 1, run_id="healthy")
    if how == "edited-by-hand":
        await _edit_by_hand(store, "late")
    else:
        await plant(store, "late", STORED["late"])
    await plant(store, "early", STORED["early"])

    runs = {r.run_id: r for r in await client.list_runs()}
    assert sorted(runs) == ["early", "healthy", "late"]
    assert runs["healthy"].damage is None and runs["healthy"].start_at is None
    for run_id in ("late", "early"):
        record = await client.get(run_id)
        assert record == runs[run_id]
        assert record.start_at is None
        assert record.damage is not None
        assert "field 'start_at' is out of range" in record.damage, record.damage
        assert record.status is RunStatus.PENDING  # the rest of the record as stored
        assert record.flow == "tests.times.echo"
    page = await page_runs(client, RunFilter(flow="tests.times.echo"), limit=2)
    assert len(page.runs) == 2 and page.next_cursor is not None
    rest = await page_runs(client, RunFilter(flow="tests.times.echo"), cursor=page.next_cursor)
    assert len(rest.runs) == 1

    await client.cancel("late", reason="planted by a bad request", grace=0)
    canceled = await client.get("late")
    assert canceled.status is RunStatus.CANCELED
    assert canceled.finished_at is not None and canceled.damage is not None


# -- the command line ---------------------------------------------------------------------


@pytest.fixture(name="cli_env", params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def cli_env_fixture(request: pytest.FixtureRequest) -> Any:
    env = CliEnv(request.param)
    try:
        yield env
    finally:
        env.cleanup()


def test_runs_list_and_show_read_a_run_whose_time_is_out_of_range(cli_env: CliEnv) -> None:
    cli_env.run(lambda c: c.start(echo, 1, run_id="healthy"))
    cli_env.run(lambda c: plant(c.store, "late", STORED["late"]))  # type: ignore[arg-type]

    listed = cli_env.cli("runs", "list")
    assert listed.exit_code == 0, listed.output
    assert "healthy" in listed.stdout and "late" in listed.stdout
    assert "pending (damaged)" in listed.stdout
    shapes = {r["run_id"]: r for r in cli_env.json("runs", "list")["runs"]}
    assert shapes["healthy"]["damage"] is None
    assert "field 'start_at' is out of range" in shapes["late"]["damage"]

    shown = cli_env.cli("runs", "show", "late")
    assert shown.exit_code == 0, shown.output
    assert "field 'start_at' is out of range" in shown.stdout
    assert (
        json.loads(cli_env.cli("runs", "show", "late", "--json").stdout)["run"]["start_at"] is None
    )

    canceled = cli_env.cli("cancel", "late", "--reason", "planted", "--grace", "0")
    assert canceled.exit_code == 0, canceled.output


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["runs", "list", "--since", "9999-12-31T23:59:59-14:00"], "must be from 0001-01-02"),
        (["runs", "list", "--since", "0001-01-01T00:00:00+14:00"], "must be from 0001-01-02"),
        (["runs", "list", "--since", "999999999999d"], "ago is before 0001-01-02"),
        (["runs", "list", "--cursor", TAMPERED_CURSOR], "is not a cursor of a run listing"),
        (["schedules", "create", "s", "tests.times.tick", "--cron", "* * * * *",
          "--catchup", "1e300"], "--catchup"),
        (["schedules", "create", "s", "tests.times.tick", "--cron", "* * * * *",
          "--catchup", "inf"], "--catchup"),
    ],
)  # fmt: skip
def test_the_cli_refuses_times_out_of_range_with_exit_2(argv: list[str], said: str) -> None:
    env = CliEnv("memory")
    done = env.cli(*argv)
    assert done.exit_code == ExitCode.USAGE, done.output
    assert said in done.output
    assert "Traceback" not in done.output
