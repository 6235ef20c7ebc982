"""The testing kit: `FlowTestEnv.stub`, `FlowTestEnv.history`, the fake clock's monotonic option."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from sdk import RetryPolicy, flow, sleep, step, wait_for
from sdk.errors import RunFailed, RunNotFound
from testing import FakeClock, FlowTestEnv, HistoryEntry

T0 = datetime(2030, 1, 1, tzinfo=UTC)
charged: list[tuple[str, int]] = []


class PaymentDeclined(Exception):
    pass


@step(retry=RetryPolicy(max_attempts=3, initial_interval=10.0, backoff=1.0))
async def charge(order_id: str, cents: int) -> str:
    charged.append((order_id, cents))  # the real payment API
    return f"ch-{order_id}"


@flow(name="tests.stubs.pay")
async def pay(order_id: str, cents: int) -> str:
    return await charge(order_id, cents)


@pytest.fixture(autouse=True, name="_no_charges")
def no_charges_fixture() -> None:
    charged.clear()


async def test_a_stub_returns_its_value_and_the_journal_records_it() -> None:
    async with FlowTestEnv(FakeClock(T0)) as env:
        env.stub(charge, returns="ch-stubbed")
        handle = await env.start(pay, "A-1", 4200)
        await env.run_until_idle()
        assert await handle.result() == "ch-stubbed"
        [entry] = await env.history(handle.run_id)
        assert entry.result == "ch-stubbed" and entry.state == "ok"
    assert charged == []  # the real body never ran


async def test_a_stub_is_for_its_env_only() -> None:
    async with FlowTestEnv(FakeClock(T0)) as stubbed, FlowTestEnv(FakeClock(T0)) as real:
        stubbed.stub(charge, returns="ch-stubbed")
        one = await stubbed.start(pay, "A-1", 1)
        two = await real.start(pay, "B-2", 2)
        await stubbed.run_until_idle()
        await real.run_until_idle()
        assert await one.result() == "ch-stubbed"
        assert await two.result() == "ch-B-2"
    assert charged == [("B-2", 2)]
    assert await charge("C-3", 3) == "ch-C-3"  # outside a run: the plain function


async def test_a_raising_stub_is_retried_under_the_steps_policy() -> None:
    async with FlowTestEnv(FakeClock(T0)) as env:
        env.stub(charge, raises=PaymentDeclined("card declined"))
        handle = await env.start(pay, "A-1", 4200)
        await env.run_until_idle()
        await env.advance(10)
        await env.advance(10)
        with pytest.raises(RunFailed, match="card declined"):
            await handle.result()
        assert await env.history(handle.run_id) == [
            HistoryEntry(
                "charge#1", "step", "failed", attempts=3,
                error="PaymentDeclined: card declined",
                started_at=T0, ended_at=T0 + timedelta(seconds=20),
                duration=timedelta(seconds=20),
            ),
        ]  # fmt: skip


@step(name="tests.stubs.notify")
async def notify(email: str) -> None:
    raise AssertionError("the real body is not run")


@flow(name="tests.stubs.notifying")
async def notifying(email: str) -> str:
    try:
        await notify(email)
    except ConnectionError as exc:
        return f"not sent: {type(exc).__name__}"
    return "sent"


async def test_a_stub_by_step_name_can_raise_an_exception_class() -> None:
    async with FlowTestEnv(FakeClock(T0)) as env:
        env.stub("tests.stubs.notify", raises=ConnectionRefusedError)
        handle = await env.start(notifying, "ada@example.com")
        await env.run_until_idle()
        assert await handle.result() == "not sent: ConnectionRefusedError"
        env.stub(notify, returns=None)  # a later stub replaces the earlier one
        again = await env.start(notifying, "bob@example.com")
        await env.run_until_idle()
        assert await again.result() == "sent"


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
async def test_a_side_effect_gets_the_steps_arguments(asynchronous: bool) -> None:
    seen: list[tuple[str, int]] = []

    def sync_fake(order_id: str, cents: int) -> str:
        seen.append((order_id, cents))
        return f"fake-{cents}"

    async def async_fake(order_id: str, cents: int) -> str:
        return sync_fake(order_id, cents)

    async with FlowTestEnv(FakeClock(T0)) as env:
        env.stub(charge, side_effect=async_fake if asynchronous else sync_fake)
        handle = await env.start(pay, "A-1", 4200)
        await env.run_until_idle()
        assert await handle.result() == "fake-4200"
    assert seen == [("A-1", 4200)]
    assert charged == []


def test_a_stub_takes_exactly_one_behaviour() -> None:
    env = FlowTestEnv(FakeClock(T0))
    with pytest.raises(TypeError, match="exactly one"):
        env.stub(charge)
    with pytest.raises(TypeError, match="exactly one"):
        env.stub(charge, returns="x", raises=ValueError)
    with pytest.raises(TypeError, match="not a @step"):
        env.stub(pay, returns="x")
    with pytest.raises(TypeError, match="exception"):
        env.stub(charge, raises="declined")  # type: ignore[arg-type]


@step
async def reserve(sku: str) -> int:
    return 7


@flow(name="tests.history.order")
async def order_flow(sku: str) -> int:
    hold = await reserve(sku)
    approved = await wait_for("approval")
    await sleep(timedelta(hours=1))
    return hold if approved else -1


async def test_history_lists_steps_waits_and_sleeps_in_order_on_the_fake_clock() -> None:
    async with FlowTestEnv(FakeClock(T0)) as env:
        handle = await env.start(order_flow, "apple")
        await env.run_until_idle()
        await env.advance(30)
        await env.client.signal(handle.run_id, "approval", True)
        await env.run_until_idle()
        waiting = await env.history(handle.run_id)
        assert waiting[-1] == HistoryEntry(
            "~sleep#1", "sleep", "pending", started_at=T0 + timedelta(seconds=30)
        )
        await env.advance(timedelta(hours=1))
        assert await handle.result() == 7
        at30 = T0 + timedelta(seconds=30)
        assert await env.history(handle.run_id) == [
            HistoryEntry("reserve#1", "step", "ok", attempts=1, result=7,
                         started_at=T0, ended_at=T0, duration=timedelta(0)),
            HistoryEntry("~wait:approval#1", "wait", "ok", result=True,
                         started_at=T0, ended_at=at30, duration=timedelta(seconds=30)),
            HistoryEntry("~sleep#1", "sleep", "ok", started_at=at30,
                         ended_at=at30 + timedelta(hours=1), duration=timedelta(hours=1)),
        ]  # fmt: skip


async def test_history_of_an_unknown_run_raises_run_not_found() -> None:
    async with FlowTestEnv(FakeClock(T0)) as env:
        with pytest.raises(RunNotFound):
            await env.history("nope")


readings: dict[str, float | datetime] = {}


@step
async def measure() -> None:
    readings["wall"] = datetime.now(UTC)
    began = time.perf_counter()
    mono = time.monotonic()
    time.sleep(0.002)  # noqa: ASYNC251 - a blocking pause, to see the clocks move
    readings["perf"] = time.perf_counter() - began
    readings["mono"] = time.monotonic() - mono


@flow(name="tests.clock.measure")
async def measuring() -> None:
    await measure()


async def test_timing_code_in_a_step_reads_real_monotonic_time_and_fake_wall_time() -> None:
    readings.clear()
    async with FlowTestEnv(FakeClock(T0)) as env:
        handle = await env.start(measuring)
        await env.run_until_idle()
        await handle.result()
    assert readings["wall"] == T0  # fake
    assert readings["perf"] != 0 and readings["mono"] != 0  # real: they moved


def test_fake_monotonic_true_freezes_perf_counter_and_monotonic_too() -> None:
    with FakeClock(T0, fake_monotonic=True):
        began, mono = time.perf_counter(), time.monotonic()
        time.sleep(0.002)
        assert (time.perf_counter(), time.monotonic()) == (began, mono)
        assert datetime.now(UTC) == T0
    with FakeClock(T0):
        began = time.perf_counter()
        time.sleep(0.002)
        assert time.perf_counter() != began


@step
async def then_ship(receipt: str) -> str:
    return f"shipped with {receipt}"


@flow(name="tests.stubs.pay_and_ship")
async def pay_and_ship(order_id: str) -> str:
    return await then_ship(await charge(order_id, 1))


async def test_a_stubs_recorded_result_is_replayed_after_a_crash_not_called_again() -> None:
    calls: list[str] = []

    def fake(order_id: str, cents: int) -> str:
        calls.append(order_id)
        return "ch-fake"

    async with FlowTestEnv(FakeClock(T0)) as env:
        env.stub(charge, side_effect=fake)
        env.crash_at("then_ship#1", "before")
        handle = await env.start(pay_and_ship, "A-1")
        await env.run_until_idle()
        await env.advance(31)  # past the lease: recovered, the journal replayed
        assert await handle.result() == "shipped with ch-fake"
    assert calls == ["A-1"]
