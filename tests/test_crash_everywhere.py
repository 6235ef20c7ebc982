"""`testing.check_crash_everywhere`: the examples survive a crash at every intercept point."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from examples import checkout as checkout_example
from examples.checkout import Order, Receipt, checkout, gateway
from examples.hello import hello
from examples.orders import Line, OrderOutcome, on_payment_webhook, order, warehouse
from sdk import RunStatus, flow, sleep, step, wait_for
from testing import CrashPoint, FlowTestEnv, check_crash_everywhere
from testing._crashcheck import _extra_runs, _Probe

STOCK = {"apple": 10, "pear": 5, "plum": 0}


@pytest.fixture(autouse=True, name="_reset_examples")
def reset_examples_fixture() -> Iterator[None]:
    gateway.reset(fail_first=0)
    checkout_example.shipped.clear()
    warehouse.reset(STOCK)
    yield
    warehouse.reset(STOCK)


async def test_hello_survives_a_crash_before_and_after_each_step() -> None:
    report = await check_crash_everywhere(hello, "Ada")
    keys = ["compose#1", "punctuate#1", "sign#1"]
    assert report.points == tuple(
        CrashPoint(key, when) for key in keys for when in ("before", "after")
    )
    assert report.tried == 6
    assert report.outcome == (RunStatus.COMPLETED, "Hello, Ada! (from Steadyflow)", None)
    # each step ran once more only in the run cut off after its body
    assert report.reexecutions == dict.fromkeys(keys, 1)


async def approve_and_wait_out_the_batch(env: FlowTestEnv, run_id: str) -> None:
    await env.client.approve(run_id, "fraud-review", actor="alice")
    await env.run_until_idle()
    await env.advance(3600)


async def test_checkout_survives_a_crash_at_every_point() -> None:
    order_ = Order("A-1", 4200, "ada@example.com")
    report = await check_crash_everywhere(checkout, order_, drive=approve_and_wait_out_the_batch)
    status, receipt, error = report.outcome
    assert status is RunStatus.COMPLETED and error is None
    assert receipt == Receipt("A-1", "shipped", "auth-1", tracking="TRACK-A-1")
    assert CrashPoint("~wait:fraud-review#1", "before") in report.points
    assert CrashPoint("~wait:fraud-review#1", "after") in report.points
    assert CrashPoint("~sleep#1", "before") in report.points
    assert CrashPoint("~sleep#1", "after") in report.points
    assert report.reexecutions["capture_payment#1"] == 1
    # the gateway saw one authorization and one capture, whatever re-ran
    assert gateway.authorizations == {"crash-check:authorize_payment#1": "auth-1"}
    assert gateway.captured == ["auth-1"]


async def pay(env: FlowTestEnv, run_id: str) -> None:
    await on_payment_webhook(env.client, {"order_id": "A-1", "cents": 4200}, "dlv-1")
    await env.run_until_idle()


async def test_orders_survive_a_crash_at_every_point_including_child_starts() -> None:
    lines = [Line("apple", 2), Line("pear", 1)]
    report = await check_crash_everywhere(order, "A-1", lines, drive=pay)
    status, outcome, _ = report.outcome
    assert status is RunStatus.COMPLETED
    assert outcome == OrderOutcome(
        "A-1", "shipped", ["hold-1", "hold-2"], tracking="TRACK-A-1", note="paid 4200"
    )
    kinds = {point.key.split("#")[0] for point in report.points}
    assert {"reserve", "ship"} <= kinds
    assert any(point.key.startswith("~child") for point in report.points), report.points
    assert warehouse.stock == {"apple": 8, "pear": 4, "plum": 0}  # held once, every time


@step
async def add(total: int, n: int) -> int:
    return total + n


@flow(name="tests.crash_everywhere.twenty")
async def twenty_steps() -> int:
    total = 0
    for n in range(10):
        total = await add(total, n)
    total += await wait_for("bonus")
    await sleep(60)
    for n in range(10, 20):
        total = await add(total, n)
    return total


async def bonus_then_sleep(env: FlowTestEnv, run_id: str) -> None:
    await env.client.signal(run_id, "bonus", 1000)
    await env.run_until_idle()
    await env.advance(60)


async def test_a_twenty_step_flow_with_a_signal_and_a_sleep_is_checked_at_every_point() -> None:
    report = await check_crash_everywhere(twenty_steps, drive=bonus_then_sleep)
    assert report.outcome == (RunStatus.COMPLETED, sum(range(20)) + 1000, None)
    assert report.tried == 22 * 2  # before and after each step, the wait and the sleep
    assert report.reexecutions == {f"add#{n}": 1 for n in range(1, 21)}


calls = {"n": 0}


@step
async def count() -> int:
    calls["n"] += 1  # not idempotent: a re-run after a crash returns another number
    return calls["n"]


@flow(name="tests.crash_everywhere.counting")
async def counting() -> int:
    return await count()


async def test_a_step_whose_rerun_changes_the_outcome_is_reported_at_its_point() -> None:
    calls["n"] = 0
    with pytest.raises(AssertionError, match=r"crash before 'count#1': the outcome differs"):
        await check_crash_everywhere(counting)


@flow(name="tests.crash_everywhere.waits")
async def waits_for_a_signal() -> str:
    return str(await wait_for("never"))


async def test_a_run_that_does_not_finish_without_a_drive_is_reported() -> None:
    with pytest.raises(AssertionError, match="the run without a crash: the run did not finish"):
        await check_crash_everywhere(waits_for_a_signal)


def probe_of(
    runs: dict[str, int],
    *,
    crash_run: str | None = None,
    ran: tuple[str, ...] = (),
    recorded: tuple[str, ...] = (),
) -> Any:
    """What the check's probe noted in one run (steps' bodies run, state at the crash)."""
    probe = _Probe()
    probe.runs.update({(RUN, key): n for key, n in runs.items()})
    probe.crash_run = crash_run
    probe.ran_before_crash = frozenset((RUN, key) for key in ran)
    probe.recorded_at_crash = frozenset(recorded)
    return probe


RUN = "crash-check"
POINT = CrashPoint("b#1", "after")


def test_a_step_cut_off_before_its_record_may_run_once_more() -> None:
    clean = probe_of({"a#1": 1, "b#1": 1})
    crashed = probe_of({"a#1": 1, "b#1": 2}, crash_run=RUN, ran=("a#1", "b#1"), recorded=("a#1",))
    assert _extra_runs(clean, crashed, POINT) == {(RUN, "b#1"): 1}


def test_a_step_recorded_before_the_crash_that_ran_again_is_reported() -> None:
    clean = probe_of({"a#1": 1, "b#1": 1})
    crashed = probe_of({"a#1": 2, "b#1": 1}, crash_run=RUN, ran=("a#1", "b#1"), recorded=("a#1",))
    with pytest.raises(AssertionError, match=r"crash after 'b#1': step 'a#1' .* recorded before"):
        _extra_runs(clean, crashed, POINT)


def test_a_step_run_twice_more_is_reported() -> None:
    clean = probe_of({"b#1": 1})
    crashed = probe_of({"b#1": 3}, crash_run=RUN, ran=("b#1",))
    with pytest.raises(AssertionError, match=r"step 'b#1' of run 'crash-check' ran 3 time"):
        _extra_runs(clean, crashed, POINT)
