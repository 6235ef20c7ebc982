"""The testing kit: FakeClock, FlowTestEnv isolation and crash injection, pytest fixtures."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, date, datetime, timedelta
from importlib.metadata import entry_points

import pytest

from sdk import RetryPolicy, current_run, current_step, flow, sleep, step, wait_for
from sdk.errors import RunFailed, RunNotFound
from stores.redis import RedisStore
from testing import FakeClock, FlowTestEnv

START = datetime(2031, 2, 3, 4, 5, 6, tzinfo=UTC)


# -- FakeClock -------------------------------------------------------------------


def test_fake_clock_starts_where_told_and_moves_only_forward() -> None:
    clock = FakeClock(START)
    assert clock.now() == START
    assert clock.time() == START.timestamp()
    clock.advance(90)
    clock.advance(timedelta(days=1))
    assert clock.now() == START + timedelta(days=1, seconds=90)
    with pytest.raises(ValueError):
        clock.advance(-1)
    assert FakeClock(START.timestamp()).now() == START
    with pytest.raises(ValueError, match="timezone-aware"):
        FakeClock(datetime(2031, 1, 1))


def test_a_started_fake_clock_drives_the_wall_clock() -> None:
    clock = FakeClock(START)
    with clock:
        assert datetime.now(UTC) == START
        assert time.time() == START.timestamp()
        clock.advance(timedelta(hours=3))
        assert datetime.now(UTC) == START + timedelta(hours=3)
        assert date.today() == START.date()
    assert datetime.now(UTC) != clock.now()  # stopped: the real clock again


def test_pytests_own_timing_keeps_the_real_clock() -> None:
    from _pytest import timing

    far = datetime(2090, 1, 1, tzinfo=UTC)
    with FakeClock(far):
        assert time.time() == far.timestamp()
        assert timing.time() < far.timestamp()  # --durations stay real


def test_the_fake_clock_fixture_is_started(fake_clock: FakeClock) -> None:
    assert fake_clock.started
    assert datetime.now(UTC) == fake_clock.now()
    fake_clock.advance(3600)
    assert datetime.now(UTC) == fake_clock.now()


async def test_asyncio_sleep_still_works_under_the_fake_clock(fake_clock: FakeClock) -> None:
    await asyncio.wait_for(asyncio.sleep(0.01), timeout=5)
    assert datetime.now(UTC) == fake_clock.now()


# -- wall clock in code under test ------------------------------------------------


@step
async def wall_clock() -> str:
    return datetime.now(UTC).isoformat()  # not journaled on purpose: reads the wall clock


@flow(name="tests.testing_kit.stamps")
async def stamps() -> list[str]:
    first = await wall_clock()
    await sleep(timedelta(days=2))
    second = await wall_clock()
    return [first, second]


async def test_the_fake_clock_drives_datetime_now_in_code_under_test() -> None:
    async with FlowTestEnv(clock=FakeClock(START)) as env:
        handle = await env.start(stamps)
        await env.run_until_idle()
        await env.advance(timedelta(days=2, minutes=1))
        first, second = await handle.result()
    assert datetime.fromisoformat(first) == START
    assert datetime.fromisoformat(second) == START + timedelta(days=2, minutes=1)


# -- fixtures ----------------------------------------------------------------------


def test_the_pytest_plugin_is_installed_by_entry_point(pytestconfig: pytest.Config) -> None:
    plugins = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert plugins.get("steadyflow") == "testing.plugin"
    assert pytestconfig.pluginmanager.has_plugin("steadyflow")


async def test_the_flow_env_fixture_runs_flows_on_the_fake_clock(
    flow_env: FlowTestEnv, fake_clock: FakeClock
) -> None:
    assert flow_env.clock is fake_clock
    handle = await flow_env.start(stamps)
    await flow_env.run_until_idle()
    assert await handle.status() == "waiting_for_signal"
    began = fake_clock.now()
    await flow_env.advance(timedelta(days=2))
    first, second = await handle.result()
    assert datetime.fromisoformat(first) == began
    assert datetime.fromisoformat(second) == began + timedelta(days=2)


# -- isolation ---------------------------------------------------------------------

OBSERVED: list[tuple[str, str]] = []


@flow(name="tests.testing_kit.whoami")
async def whoami(label: str) -> str:
    await wait_for("go")
    OBSERVED.append((label, current_run().run_id))
    return label


async def test_two_envs_in_one_process_do_not_see_each_others_runs() -> None:
    OBSERVED.clear()
    async with FlowTestEnv() as one, FlowTestEnv() as two:
        first = await one.start(whoami, "one", run_id="shared-id")
        second = await two.start(whoami, "two", run_id="shared-id")  # no conflict
        other = await one.start(whoami, "one-b", run_id="only-in-one")
        with pytest.raises(RunNotFound):
            await two.client.get("only-in-one")
        assert {r.run_id for r in await two.client.list_runs()} == {"shared-id"}

        await asyncio.gather(one.run_until_idle(), two.run_until_idle())
        await one.client.signal("shared-id", "go")
        await one.client.signal("only-in-one", "go")
        await asyncio.gather(one.run_until_idle(), two.run_until_idle())

        assert await first.result() == "one"
        assert await other.result() == "one-b"
        assert await second.status() == "waiting_for_signal"  # env two got no signal
        await two.client.signal("shared-id", "go")
        await two.run_until_idle()
        assert await second.result() == "two"
    assert sorted(OBSERVED) == [
        ("one", "shared-id"),
        ("one-b", "only-in-one"),
        ("two", "shared-id"),
    ]


# -- crash injection ----------------------------------------------------------------


def test_crash_at_accepts_only_before_or_after() -> None:
    env = FlowTestEnv()
    with pytest.raises(ValueError, match="before"):
        env.crash_at("x#1", when="during")  # type: ignore[arg-type]


CRASHED: list[str] = []


@step
async def crashable() -> str:
    CRASHED.append("ran")
    return "ok"


@flow(name="tests.testing_kit.crashy")
async def crashy() -> str:
    return await crashable()


async def test_a_crash_recovers_after_the_envs_lease_ttl() -> None:
    CRASHED.clear()
    async with FlowTestEnv(lease_ttl=5) as env:
        env.crash_at("crashable#1")
        handle = await env.start(crashy)
        await env.run_until_idle()
        await env.advance(4)
        assert await handle.status() == "running"
        await env.advance(2)
        assert await handle.result() == "ok"
    assert CRASHED == ["ran", "ran"]


async def test_a_crash_point_fires_once() -> None:
    CRASHED.clear()
    async with FlowTestEnv() as env:
        env.crash_at("crashable#1", when="before")
        first = await env.start(crashy)
        await env.run_until_idle()
        second = await env.start(crashy)
        await env.run_until_idle()
        assert await second.result() == "ok"
        assert await first.status() == "running"
        await env.advance(31)
        assert await first.result() == "ok"
    assert CRASHED == ["ran", "ran"]


charges: list[tuple[str, int]] = []  # the payment provider's side: (idempotency key, attempt)


@step(name="tests.testing_kit.charge", retry=RetryPolicy(max_attempts=3, initial_interval=5))
async def charge(order: str) -> str:
    charges.append((current_step().idempotency_key, current_step().attempt))  # a partial charge
    if current_step().attempt == 1:
        raise ConnectionError("gateway reset the connection")  # ...then an exception
    return f"charged {order}"


@flow(name="tests.testing_kit.paying")
async def paying(order: str) -> str:
    return await charge(order)


@step(name="tests.testing_kit.refuse")
async def refuse(order: str) -> str:
    charges.append((current_step().idempotency_key, current_step().attempt))
    raise ValueError(f"card of {order} declined")


@flow(name="tests.testing_kit.refused")
async def refused(order: str) -> str:
    return await refuse(order)


async def test_a_crash_after_a_failed_attempt_fires_before_its_failure_is_recorded(
    store: RedisStore,
) -> None:
    charges.clear()
    async with FlowTestEnv(store=store) as env:
        env.crash_at("tests.testing_kit.charge#1", "after")
        handle = await env.start(paying, "o-1", run_id="pay-1")
        await env.run_until_idle()
        assert await handle.status() == "running"  # died: the lease is held
        journal = await store.read_lineage("pay-1")
        assert journal is not None and journal.journal == {}  # the failure is not recorded

        await env.advance(31)  # recovered: the cut-off attempt runs again, uncounted
        await env.advance(5)  # its retry
        assert await handle.result() == "charged o-1"
    key = "pay-1:tests.testing_kit.charge#1"
    attempts = [(key, 1), (key, 1), (key, 2)]  # the cut-off attempt 1, again, then 2
    assert charges == attempts


async def test_a_crash_after_a_failing_step_without_retries_runs_it_again(
    store: RedisStore,
) -> None:
    charges.clear()
    async with FlowTestEnv(store=store) as env:
        env.crash_at("tests.testing_kit.refuse#1", "after")
        handle = await env.start(refused, "o-2", run_id="refused-1")
        await env.run_until_idle()
        assert await handle.status() == "running"
        await env.advance(31)
        with pytest.raises(RunFailed) as info:
            await handle.result()
    assert info.value.error.reason == "step_failed"  # recorded once, by the second run
    assert charges == [("refused-1:tests.testing_kit.refuse#1", 1)] * 2


async def test_a_crash_at_a_given_attempt_fires_at_that_attempt() -> None:
    charges.clear()
    async with FlowTestEnv() as env:
        env.crash_at("tests.testing_kit.charge#1", "before", attempt=2)
        handle = await env.start(paying, "o-3", run_id="pay-3")
        await env.run_until_idle()
        await env.advance(5)  # the retry: the worker dies before attempt 2
        assert await handle.status() == "running"
        await env.advance(31)
        assert await handle.result() == "charged o-3"
    assert charges == [
        ("pay-3:tests.testing_kit.charge#1", 1),
        ("pay-3:tests.testing_kit.charge#1", 2),
    ]


async def test_a_crash_point_no_run_reaches_is_an_error_when_the_env_closes() -> None:
    CRASHED.clear()
    with pytest.raises(AssertionError, match=r"after step 'crashable#2'.*never happened"):
        async with FlowTestEnv() as env:
            env.crash_at("crashable#2")  # the flow calls crashable once: #1
            handle = await env.start(crashy)
            await env.run_until_idle()
            assert await handle.result() == "ok"
    with pytest.raises(AssertionError, match=r"before step 'crashable#1' \(attempt 2\)"):
        async with FlowTestEnv() as env:
            env.crash_at("crashable#1", "before", attempt=2)  # it succeeds at attempt 1
            await env.start(crashy)
            await env.run_until_idle()


async def test_a_crash_point_left_unfired_does_not_hide_the_tests_own_error() -> None:
    with pytest.raises(KeyError, match="the test's own"):
        async with FlowTestEnv() as env:
            env.crash_at("crashable#1")
            raise KeyError("the test's own")


def test_crash_at_accepts_only_an_attempt_from_one() -> None:
    env = FlowTestEnv()
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="attempt"):
            env.crash_at("x#1", attempt=bad)  # type: ignore[arg-type]
