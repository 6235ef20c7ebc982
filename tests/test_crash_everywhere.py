"""`testing.check_crash_everywhere`: the examples survive a crash at every intercept point."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bench.crash_check import add, drive, twenty
from examples import agent as agent_example
from examples import checkout as checkout_example
from examples.agent import agent
from examples.checkout import Order, Receipt, checkout, gateway
from examples.hello import hello
from examples.orders import Line, OrderOutcome, on_payment_webhook, order, warehouse
from sdk import (
    Intent,
    Registry,
    RetryPolicy,
    RunStatus,
    channel,
    current_step,
    emit,
    flow,
    now,
    scheduled,
    sleep,
    step,
    wait_for,
)
from testing import CrashPoint, FlowTestEnv, _crashcheck, check_crash_everywhere
from testing._crashcheck import _extra_deliveries, _extra_runs, _Probe, _Shared

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


async def test_the_agent_survives_a_crash_at_every_turn_and_tool_call() -> None:
    agent_example.executions.clear()
    report = await check_crash_everywhere(agent, "How much taller is Everest than K2, in feet?")
    assert report.outcome == (RunStatus.COMPLETED, "The answer is 781.", None)
    keys = {point.key for point in report.points}
    assert {"model#5", "tool:search#2", "tool:calculator#2"} <= keys
    # each turn or tool call ran once more only in the runs cut off after its body
    assert report.reexecutions == dict.fromkeys(sorted(keys), 1)


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
    children = {point.key for point in report.points if point.key.startswith("~child")}
    assert children, report.points
    # after each child start: the child run exists, the parent has not recorded it
    for key in children:
        assert CrashPoint(key, "before") in report.points
        assert CrashPoint(key, "after") in report.points
    # each child's end reaches its parent through the outbox: a delivery cut off
    # after the parent's mailbox got it is delivered again, and counted once
    assert any(point.key.startswith("~deliver:") for point in report.points), report.points
    assert set(report.redeliveries.values()) == {1}
    assert warehouse.stock == {"apple": 8, "pear": 4, "plum": 0}  # held once, every time


# the yardstick of bench/crash_check.py (issue 11)
async def test_a_twenty_step_flow_with_a_signal_and_a_sleep_is_checked_at_every_point() -> None:
    report = await check_crash_everywhere(twenty, drive=drive)
    assert report.outcome == (RunStatus.COMPLETED, sum(range(20)) + 1000, None)
    assert report.tried == 22 * 2  # before and after each step, the wait and the sleep
    assert report.reexecutions == {f"add#{n}": 1 for n in range(1, 21)}


def _spy_trials(monkeypatch: pytest.MonkeyPatch) -> list[tuple[CrashPoint | None, bool]]:
    """(point, with outbox claims) of each run the check makes."""
    tried: list[tuple[CrashPoint | None, bool]] = []
    trial = _crashcheck._trial

    async def spied(*args: Any, outbox: bool = True) -> Any:
        tried.append((args[-1], outbox))
        return await trial(*args, outbox=outbox)

    monkeypatch.setattr(_crashcheck, "_trial", spied)
    return tried


async def test_a_flow_that_never_touches_the_outbox_is_checked_without_outbox_claims(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tried = _spy_trials(monkeypatch)
    report = await check_crash_everywhere(twenty, drive=drive)
    assert report.reexecutions == {f"add#{n}": 1 for n in range(1, 21)}
    assert tried == [(None, True)] + [(point, False) for point in report.points]


rerun_emits = {"n": 0}


@step
async def emits_when_run_again() -> int:
    rerun_emits["n"] += 1
    if rerun_emits["n"] > 1:
        emit(MAIL, {"run": rerun_emits["n"]})
    return 1


@flow(name="tests.crash_everywhere.emits_on_rerun")
async def emits_on_rerun() -> int:
    return await emits_when_run_again()


async def test_a_crashed_run_that_reaches_the_outbox_is_checked_again_with_its_claims(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tried = _spy_trials(monkeypatch)
    rerun_emits["n"] = 0
    with pytest.raises(AssertionError, match=r"crash before 'emits_when_run_again#1': the outbox"):
        await check_crash_everywhere(emits_on_rerun)
    point = CrashPoint("emits_when_run_again#1", "before")
    assert tried == [(None, True), (point, False), (point, True)]


MAIL = "tests.crash_everywhere.mail"
mailbox: list[tuple[str, Any]] = []  # (idempotency key, payload) per handler call


@channel(MAIL)
async def mail(intent: Intent) -> None:
    mailbox.append((intent.idempotency_key, intent.payload))


@step
async def confirm(order_id: str) -> str:
    emit(MAIL, {"order": order_id, "template": "confirmed"})
    emit(MAIL, {"order": order_id, "template": "receipt"}, key=f"receipt-{order_id}")
    return order_id


@flow(name="tests.crash_everywhere.mailing")
async def mailing(order_id: str) -> str:
    return await confirm(order_id)


async def test_outbox_emits_and_deliveries_survive_a_crash_at_every_point() -> None:
    mailbox.clear()
    report = await check_crash_everywhere(mailing, "A-1")
    confirmed, receipt = "crash-check:confirm#1:1", "crash-check:receipt-A-1"
    for key in (confirmed, receipt):
        for when in ("before", "after"):
            assert CrashPoint(f"~emit:{key}", when) in report.points
            assert CrashPoint(f"~deliver:{key}", when) in report.points
    assert report.tried == 2 + 4 + 4  # the step, its two emits, their two deliveries
    # cut off after its body, or mid-body before or after either emit: run once more
    assert report.reexecutions == {"confirm#1": 5}
    # a delivery cut off after its handler returned is delivered once more, same key
    assert report.redeliveries == {confirmed: 1, receipt: 1}
    runs = 1 + report.tried
    assert len(mailbox) == 2 * runs + 2
    # a receiver that deduplicates on the idempotency key sent each mail once per run
    assert {key for key, _ in mailbox} == {confirmed, receipt}
    assert {key: payload["template"] for key, payload in mailbox} == {
        confirmed: "confirmed",
        receipt: "receipt",
    }


emits = {"n": 0}


@step
async def announce_draw() -> None:
    emits["n"] += 1  # not deterministic: a re-run emits another payload under the same key
    emit(MAIL, {"ticket": emits["n"]})


@flow(name="tests.crash_everywhere.draw")
async def draw() -> None:
    await announce_draw()


async def test_an_emit_whose_payload_changes_when_its_step_runs_again_is_reported() -> None:
    emits["n"] = 0
    with pytest.raises(AssertionError, match=r"crash before 'announce_draw#1': the outbox intents"):
        await check_crash_everywhere(draw)


@flow(name="tests.crash_everywhere.stamped")
async def stamped() -> str:
    started = await now()  # journaled before the first point: every run reads its clock
    await add(0, 1)
    await sleep(60)
    return started.isoformat()


async def test_every_run_of_the_check_starts_at_the_same_instant_on_an_empty_store() -> None:
    # the runs share one fakeredis server, emptied between runs: a store that
    # kept the last run (the same run id) would never reach the crash point;
    # each run's clock starts at the check's start, so `now()` reads the same
    report = await check_crash_everywhere(stamped, drive=lambda env, _: env.advance(60))
    assert report.tried == 4
    assert report.outcome[0] is RunStatus.COMPLETED


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


def test_a_delivery_cut_off_after_its_handler_may_run_once_more() -> None:
    clean, crashed = _Probe(), _Probe()
    clean.deliveries["~deliver:k"] = 1
    crashed.deliveries["~deliver:k"] = 2
    crashed.crashed = CrashPoint("~deliver:k", "after")
    assert _extra_deliveries(clean, crashed, crashed.crashed) == ["k"]


def test_a_delivery_made_again_without_a_crash_cutting_it_off_is_reported() -> None:
    clean, crashed = _Probe(), _Probe()
    clean.deliveries.update({"~deliver:k": 1, "~deliver:j": 1})
    crashed.deliveries.update({"~deliver:k": 1, "~deliver:j": 2})
    crashed.crashed = CrashPoint("~deliver:k", "after")
    with pytest.raises(AssertionError, match=r"intent 'j' was delivered 2 time\(s\), 1 without"):
        _extra_deliveries(clean, crashed, crashed.crashed)


def test_a_delivery_lost_after_a_crash_is_reported() -> None:
    clean, crashed = _Probe(), _Probe()
    clean.deliveries["~deliver:k"] = 1
    crashed.crashed = CrashPoint("~deliver:k", "before")
    with pytest.raises(AssertionError, match=r"intent 'k' was delivered 0 time\(s\)"):
        _extra_deliveries(clean, crashed, crashed.crashed)


def test_each_run_of_the_check_gets_a_clock_at_the_start_that_the_wall_clock_follows() -> None:
    start = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    with _Shared(start) as shared:
        first = shared.clock()
        first.advance(3600)
        assert datetime.now(UTC) == start + timedelta(hours=1)
        second = shared.clock()
        assert second.now() == start and datetime.now(UTC) == start
        second.advance(5)
        assert datetime.now(UTC) == start + timedelta(seconds=5)
    assert datetime.now(UTC).year != 2030  # the check's freeze ends with it


# -- failed attempts and runs the flow did not start (issue 28) --------------------------

PAYMENTS: dict[str, list[int]] = {}  # the gateway's side: idempotency key -> attempts seen


@step(name="tests.crash_everywhere.charge_payment", retry=RetryPolicy(initial_interval=5))
async def charge_payment(order: str) -> str:
    key = current_step().idempotency_key
    PAYMENTS.setdefault(key, []).append(current_step().attempt)  # a partial charge...
    if current_step().attempt == 1:
        raise ConnectionError("gateway reset the connection")  # ...then an exception
    return f"paid {order}"


@flow(name="tests.crash_everywhere.pay")
async def paying(order: str) -> str:
    return await charge_payment(order)


async def past_the_retry(env: FlowTestEnv, run_id: str) -> None:
    await env.advance(5)


async def test_a_failed_attempt_is_crashed_after_its_body_too() -> None:
    PAYMENTS.clear()
    report = await check_crash_everywhere(paying, "o-1", drive=past_the_retry)
    key = "tests.crash_everywhere.charge_payment#1"
    assert report.points == tuple(
        CrashPoint(key, when, attempt) for attempt in (1, 2) for when in ("before", "after")
    )
    assert report.outcome == (RunStatus.COMPLETED, "paid o-1", None)
    assert report.reexecutions == {key: 2}  # cut off after attempt 1 (failed), and after 2


SHOP = Registry()
RECONCILED: list[str] = []


@step(name="tests.crash_everywhere.reconcile")
async def reconcile(tick: str) -> str:
    RECONCILED.append(tick)
    return tick


@scheduled("* * * * *")
@flow(name="tests.crash_everywhere.shop.reconcile", registry=SHOP)
async def shop_reconcile(tick: datetime) -> str:
    return await reconcile(tick.isoformat())


@flow(name="tests.crash_everywhere.shop.pay", registry=SHOP)
async def shop_pay(order: str) -> str:
    return await charge_payment(order)


class _At10Seconds(datetime):
    """The check's start: 10 s past a minute, so its ticks fall where the test says."""

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return datetime(2030, 1, 2, 3, 4, 10, tzinfo=UTC)


async def test_a_scheduled_flow_beside_the_checked_one_is_not_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_crashcheck, "datetime", _At10Seconds)
    PAYMENTS.clear()

    async def to_the_minute(env: FlowTestEnv, run_id: str) -> None:
        await env.advance(50)  # the schedule ticks at :00 in every run

    report = await check_crash_everywhere(shop_pay, "o-2", drive=to_the_minute, registry=SHOP)
    assert RECONCILED  # the schedule ran beside it
    assert {p.key for p in report.points} == {"tests.crash_everywhere.charge_payment#1"}

    async def short_of_the_minute(env: FlowTestEnv, run_id: str) -> None:
        await env.advance(30)  # a tick only in the crashed runs (their recovery moves 31 s)

    report = await check_crash_everywhere(shop_pay, "o-2", drive=short_of_the_minute, registry=SHOP)
    assert report.outcome == (RunStatus.COMPLETED, "paid o-2", None)
