"""A run's timeline (`steadyflow runs timeline`, ``GET /v1/runs/{id}/timeline``, the
console's Gantt bars) follows the event log's order and times, and names each
entry as the flow wrote it."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from sdk import flow, sleep, step, wait_for
from sdk.client._timeline import timeline
from stores.redis import RedisStore
from testing import FakeClock, FlowTestEnv
from tests.test_console import console

START = datetime(2030, 5, 1, 9, 0, tzinfo=UTC)


@step
async def charge(order_id: str) -> str:
    return f"ch-{order_id}"


@step
async def send_invoice(order_id: str) -> str:
    return f"inv-{order_id}"


@flow(name="tests.timeline.invoice")
async def invoice(order_id: str) -> str:
    await charge(order_id)
    await sleep(20)
    return await send_invoice(order_id)


@flow(name="tests.timeline.approval")
async def approval() -> None:
    await wait_for("manager-approval", human=True)
    await wait_for("go")


async def test_a_step_after_a_sleep_comes_after_it_and_takes_its_own_time(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        await env.start(invoice, "K1", run_id="order-K1")
        await env.run_until_idle()
        await env.advance(20)
        root = await timeline(env.client, "order-K1")
        events = await env.client.events("order-K1")

    calls = [e for e in root.entries if e.kind in ("step", "sleep")]
    assert [(e.kind, e.label) for e in calls] == [
        ("step", "charge#1"), ("sleep", "until 2030-05-01T09:00:20Z"), ("step", "send_invoice#1"),
    ]  # fmt: skip
    assert [e.duration for e in calls] == [0.0, 20.0, 0.0]
    assert [(e.started_at - START).total_seconds() for e in calls] == [0.0, 0.0, 20.0]  # type: ignore[operator]
    assert root.duration == 20.0
    # the sleep's end is in the log, before the step that followed it
    order = [(e.type, e.step_key) for e in events if e.step_key]
    assert order.index(("wait.completed", "~sleep#1")) < order.index(
        ("step.completed", "send_invoice#1")
    )


async def test_waits_are_labelled_by_kind_and_name_not_journal_key(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        await env.start(approval, run_id="a-1")
        await env.run_until_idle()
        pending = await timeline(env.client, "a-1")
        await env.client.approve("a-1", "manager-approval", actor="maria")
        await env.run_until_idle()
        await env.client.signal("a-1", "go")
        await env.run_until_idle()
        done = await timeline(env.client, "a-1")

    assert [(e.label, e.status) for e in pending.entries if e.kind == "wait"] == [
        ("approval manager-approval", "waiting")
    ]
    assert [(e.label, e.status) for e in done.entries if e.kind == "wait"] == [
        ("approval manager-approval", "completed"), ("signal go", "completed"),
    ]  # fmt: skip
    labels = [e.label for e in done.entries]
    assert not any(label.startswith("~") for label in labels)


async def test_the_consoles_gantt_bars_agree() -> None:
    async with FlowTestEnv(FakeClock(START)) as env:
        await env.start(invoice, "K2", run_id="order-K2")
        await env.run_until_idle()
        await env.advance(20)
        async with console(env.client) as http:
            page = (await http.get("/ui/runs/order-K2")).text

    rows = re.findall(
        r'<span class="g-label" title="([^"]*)">.*?<span class="g-info">([^<]*)', page, re.S
    )
    info = {label: " ".join(said.split()) for label, said in rows}
    assert info["send_invoice#1"] == "completed 0 ms"
    assert info["until 2030-05-01T09:00:20Z"] == "completed 20.0 s"
