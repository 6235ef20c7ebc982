"""Sticky activations: a wake-up continues the kept flow, and the flow cannot tell.

Every scenario runs twice on a fake clock, with the worker's cache on and off;
journals (byte for byte), events, checkpoints and outcomes must match.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from examples import agent as agent_example
from examples import checkout as checkout_example
from examples import orders as orders_example
from examples.agent import agent
from examples.checkout import Order, checkout, gateway
from examples.hello import hello
from examples.orders import Line, order
from sdk import Worker, continue_as_new, flow, now, sleep, step, wait_for, wait_for_event
from sdk.errors import InvalidArgument
from stores.redis import RedisStore
from testing import FakeClock, FlowTestEnv
from tests import crashflows
from tests.crashflows import ROOT, STEADYFLOW

START = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)

Scenario = Callable[[FlowTestEnv, Path], Awaitable[None]]

# -- flows that exercise what a kept activation must get right ----------------------------

executions: list[str] = []  # step bodies run, in order
tops: list[str] = []  # flow code run from the top (a replay re-runs it)


@step
async def record_step(label: str) -> str:
    executions.append(label)
    return label


@flow(name="tests.sticky.waits_in_a_loop")
async def waits_in_a_loop(n: int) -> list[Any]:
    tops.append("waits_in_a_loop")
    got = []
    for i in range(n):
        value = await wait_for("go")
        got.append(await record_step(f"step-{i}-{value}"))
        got.append(str(await now()))
        await sleep(60)
    return got


@flow(name="tests.sticky.races")
async def races() -> list[Any]:
    out: list[Any] = []
    # a wait raced against an asyncio timer (a durable timer of the flow loop)
    try:
        out.append(await asyncio.wait_for(wait_for("quick"), timeout=30))
    except TimeoutError:
        out.append("timer won")
    # two waits side by side, one with a timeout that fires
    a: Any
    b: Any
    a, b = await asyncio.gather(
        wait_for("a"), wait_for("b", timeout=120), return_exceptions=True
    )  # fmt: skip
    out += [a, type(b).__name__ if isinstance(b, BaseException) else b]
    out.append(await record_step("after-gather"))
    event = await wait_for_event("sticky.paid", match={"id": "x"}, timeout=3600)
    out.append(event)
    return out


@flow(name="tests.sticky.generations")
async def generations(left: int) -> int:
    await wait_for("next")
    await record_step(f"gen-{left}")
    if left:
        await continue_as_new(left - 1)
    return left


@flow(name="tests.sticky.cleans_up")
async def cleans_up() -> str:
    try:
        await wait_for("go")
    finally:
        await record_step("cleanup")
    return "done"


# -- scenarios ------------------------------------------------------------------------------


async def hello_scenario(env: FlowTestEnv, tmp: Path) -> None:
    await env.start(hello, "Ada", run_id="s-hello")
    await env.run_until_idle()


def checkout_scenario(verdict: str) -> Scenario:
    async def scenario(env: FlowTestEnv, tmp: Path) -> None:
        gateway.reset(fail_first=2)  # durable retry timers before the review
        order = Order("A-1", 4200, "buyer@example.com")
        await env.start(checkout, order, batch_window=600, run_id="s-checkout")
        for _ in range(4):
            await env.advance(30)  # the gateway's retries
        if verdict == "approve":
            await env.client.approve("s-checkout", "fraud-review", actor="ann", reason="ok")
        elif verdict == "deny":
            await env.client.deny("s-checkout", "fraud-review", actor="ann", reason="no")
        await env.run_until_idle()
        await env.advance(3 * 86400)  # the batching window, or the review's deadline

    return scenario


async def agent_scenario(env: FlowTestEnv, tmp: Path) -> None:
    await env.start(agent, "What is 6 * 7?", run_id="s-agent")
    await env.run_until_idle()


def orders_scenario(paid: bool) -> Scenario:
    async def scenario(env: FlowTestEnv, tmp: Path) -> None:
        orders_example.warehouse.__init__({"apple": 10, "pear": 5, "plum": 0})  # type: ignore[misc]
        lines = [Line("apple", 2), Line("pear", 1)]
        await env.start(order, "o-1", lines, payment_timeout=600, run_id="s-order")
        await env.run_until_idle()
        if paid:
            await env.client.send_event(
                "payment.succeeded", {"order_id": "o-1", "cents": 900}, event_id="e-1"
            )
        await env.run_until_idle()
        await env.advance(900)

    return scenario


async def loop_scenario(env: FlowTestEnv, tmp: Path) -> None:
    await env.start(waits_in_a_loop, 4, run_id="s-loop")
    await env.run_until_idle()
    await env.client.signal("s-loop", "go", "early")  # before the wait: in the mailbox
    for i in range(4):
        await env.advance(60)
        await env.client.signal("s-loop", "go", i)
        await env.run_until_idle()
    await env.advance(60)


async def races_scenario(env: FlowTestEnv, tmp: Path) -> None:
    await env.start(races, run_id="s-races")
    await env.run_until_idle()
    await env.advance(31)  # the asyncio timer wins the first race
    await env.client.signal("s-races", "a", {"n": 1})
    await env.run_until_idle()
    await env.advance(121)  # "b" times out
    await env.client.send_event("sticky.paid", {"id": "x", "cents": 5}, event_id="e-2")
    await env.run_until_idle()


async def generations_scenario(env: FlowTestEnv, tmp: Path) -> None:
    await env.start(generations, 2, run_id="s-gen")
    for i in range(3):
        await env.run_until_idle()
        await env.client.signal("s-gen", "next", i)
    await env.run_until_idle()


async def cancel_scenario(env: FlowTestEnv, tmp: Path) -> None:
    await env.start(cleans_up, run_id="s-cancel")
    await env.run_until_idle()
    await env.client.cancel("s-cancel", reason="changed my mind", grace=60)
    await env.run_until_idle()


async def crashflows_scenario(env: FlowTestEnv, tmp: Path) -> None:
    markers = str(tmp / "markers")
    await env.start(crashflows.sleep_between_steps, markers, 90.0, run_id="s-sleepy")
    await env.start(crashflows.fan_out, markers, 3, run_id="s-fan")
    await env.start(crashflows.await_payment, markers, "b-1", run_id="s-pay")
    await env.run_until_idle()
    await env.client.send_event("crash.payment", {"batch": "b-1"}, event_id="e-3")
    await env.advance(90)


SCENARIOS: dict[str, Scenario] = {
    "hello": hello_scenario,
    "checkout-approved": checkout_scenario("approve"),
    "checkout-denied": checkout_scenario("deny"),
    "checkout-no-review": checkout_scenario("none"),
    "agent": agent_scenario,
    "orders-paid": orders_scenario(True),
    "orders-unpaid": orders_scenario(False),
    "waits-in-a-loop": loop_scenario,
    "races": races_scenario,
    "continue-as-new": generations_scenario,
    "cancel-while-parked": cancel_scenario,
    "crashflows": crashflows_scenario,
}


async def everything_recorded(env: FlowTestEnv) -> dict[str, Any]:
    """Each run's record, journal (raw JSON), events and checkpoints, minus event ids."""
    store = env.store
    assert isinstance(store, RedisStore)
    out: dict[str, Any] = {}
    for run in await env.client.list_runs(limit=1000):
        rid = run.run_id
        events = await env.client.events(rid, limit=1000)
        out[rid] = {
            "status": run.status,
            "result": run.result,
            "error": run.error,
            "journal": await store.client.hgetall(store.keys.journal(rid)),
            "events": [(e.type, e.at, e.step_key, e.data) for e in events],
            "checkpoints": [
                (c.checkpoint_id, c.kind, c.step_key, c.status, c.created_at)
                for c in await env.client.checkpoints(rid)
            ],
        }
    return out


async def play(name: str, tmp: Path, cache: int) -> tuple[dict[str, Any], int]:
    for reset in (executions, tops, checkout_example.shipped, agent_example.executions):
        reset.clear()
    agent_example.idempotency_keys.clear()
    where = tmp / "play"  # the same paths both ways (step arguments are journaled)
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir()
    async with FlowTestEnv(FakeClock(START), sticky_cache=cache) as env:
        await SCENARIOS[name](env, where)
        sticky = env.worker._sticky
        return await everything_recorded(env), 0 if sticky is None else sticky.hits


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_a_kept_flow_and_a_replayed_one_record_the_same(name: str, tmp_path: Path) -> None:
    replayed, _ = await play(name, tmp_path, cache=0)
    kept, _ = await play(name, tmp_path, cache=100)

    assert kept == replayed
    assert replayed, "the scenario started no run"


async def test_the_scenarios_do_wake_kept_flows(tmp_path: Path) -> None:
    hits = 0
    for name in ("waits-in-a-loop", "races", "checkout-approved", "orders-paid"):
        (tmp_path / name).mkdir()
        hits += (await play(name, tmp_path / name, cache=100))[1]
    assert hits >= 10


# -- the kept path itself --------------------------------------------------------------------


async def test_a_wake_up_continues_the_kept_flow_instead_of_replaying_it() -> None:
    tops.clear()
    async with FlowTestEnv(FakeClock(START)) as env:
        handle = await env.start(waits_in_a_loop, 3)
        await env.run_until_idle()
        for i in range(3):
            await env.client.signal(handle.run_id, "go", i)
            await env.advance(60)
        await env.advance(60)  # the last sleep

        assert len(await handle.result()) == 6
        assert tops == ["waits_in_a_loop"]  # run from the top once: never replayed
        sticky = env.worker._sticky
        assert sticky is not None and (sticky.hits, sticky.misses) == (4, 0)


async def test_without_the_cache_every_wake_up_replays_from_the_top() -> None:
    tops.clear()
    async with FlowTestEnv(FakeClock(START), sticky_cache=0) as env:
        handle = await env.start(waits_in_a_loop, 3)
        await env.run_until_idle()
        for i in range(3):
            await env.client.signal(handle.run_id, "go", i)
            await env.advance(60)
        await env.advance(60)  # the last sleep

        assert len(await handle.result()) == 6
        assert len(tops) == 5  # the start and four wake-ups
        assert env.worker._sticky is None


async def test_an_evicted_flow_unwinds_without_running_or_recording_its_cleanup() -> None:
    executions.clear()
    async with FlowTestEnv(FakeClock(START), sticky_cache=1) as env:
        first = await env.start(cleans_up, run_id="first")
        await env.run_until_idle()
        await env.start(cleans_up, run_id="second")
        await env.run_until_idle()  # "second" parks: "first" is evicted, unwound

        sticky = env.worker._sticky
        assert sticky is not None and "first" not in sticky and "second" in sticky
        assert executions == []  # its finally block's step raised instead of running
        store = env.store
        assert isinstance(store, RedisStore)
        assert set(await store.client.hkeys(store.keys.journal("first"))) == {"~wait:go#1"}

        await env.client.signal("first", "go")
        await env.run_until_idle()  # replayed: the cleanup runs once, for real

        assert await first.result() == "done"
        assert executions == ["cleanup"]


async def test_a_run_another_worker_took_is_replayed_and_the_stale_copy_dropped() -> None:
    tops.clear()
    async with FlowTestEnv(FakeClock(START)) as env:
        # (it keeps nothing itself: the run then goes back to any worker at once)
        other = Worker(env.store, clock=env.clock, name="other", sticky_cache=0)
        handle = await env.start(waits_in_a_loop, 1)
        await env.run_until_idle()  # parked, kept by the env's worker
        await env.client.signal(handle.run_id, "go", "x")

        # run_until_idle does not hold wake-ups for its worker (it may be gone by
        # then; `Worker.run` does, for sticky_delay): the other worker replays it
        await other.run_until_idle()
        assert tops == ["waits_in_a_loop", "waits_in_a_loop"]

        await env.advance(60)  # the env's worker drops its stale copy and replays
        assert len(await handle.result()) == 2
        sticky = env.worker._sticky
        assert sticky is not None and (sticky.hits, sticky.misses) == (0, 1)
        assert handle.run_id not in sticky  # it finished


async def test_a_simulated_crash_drops_every_kept_run() -> None:
    async with FlowTestEnv(FakeClock(START)) as env:
        for i in range(3):
            await env.start(cleans_up, run_id=f"kept-{i}")
        await env.run_until_idle()
        sticky = env.worker._sticky
        assert sticky is not None and len(sticky) == 3

        env.crash_at("~wait:go#1", "after")
        await env.client.signal("kept-0", "go")
        await env.run_until_idle()

        assert len(sticky) == 0  # a dead process keeps nothing
        await env.advance(31)  # the lease expires: replayed, and it finishes
        for i in (1, 2):  # replayed too: nothing of them was kept
            await env.client.signal(f"kept-{i}", "go")
        await env.run_until_idle()
        for i in range(3):
            assert (await env.client.get(f"kept-{i}")).status == "completed"
        assert sticky.hits == 1  # kept-0's wake-up, before its crash; none after


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"sticky_cache": -1}, "sticky_cache"),
        ({"sticky_cache": True}, "sticky_cache"),
        ({"sticky_delay": -1.0}, "sticky_delay"),
        ({"sticky_delay": "1"}, "sticky_delay"),
    ],
)
def test_bad_sticky_options_are_refused_by_name(options: dict[str, Any], named: str) -> None:
    from stores import open_store

    with pytest.raises(InvalidArgument, match=named):
        Worker(open_store("memory://"), **options)


@pytest.mark.slow
def test_the_worker_command_takes_the_sticky_options() -> None:
    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [STEADYFLOW, "worker", *argv], cwd=ROOT, capture_output=True, text=True, timeout=30
        )

    shown = run("-h")
    bad_size = run("examples.hello", "--sticky-cache", "-1")
    bad_delay = run("examples.hello", "--sticky-delay", "soon")

    assert "--sticky-cache N" in shown.stdout and "--sticky-delay SECONDS" in shown.stdout
    assert bad_size.returncode == 2 and "-1 is not in the range x>=0" in bad_size.stderr
    assert bad_delay.returncode == 2 and "'soon' is not a valid float" in bad_delay.stderr


DROPPED_WORKER = """
import asyncio
from sdk import Client, Worker, flow, step, wait_for
from stores import open_store

@step
async def cleanup() -> None:
    print("the cleanup step ran")

@flow
async def parked() -> None:
    try:
        await wait_for("go")
    finally:
        await cleanup()

async def main() -> None:
    store = open_store("memory://")
    await Client(store).start(parked, run_id="r1")
    worker = Worker(store, [parked])
    await worker.run_until_idle()
    print("kept", len(worker._sticky))

asyncio.run(main())  # exits with the worker never stopped, its run kept
"""


@pytest.mark.slow
def test_a_dropped_worker_unwinds_its_kept_flows_without_running_their_cleanup() -> None:
    done = subprocess.run(
        [sys.executable, "-c", DROPPED_WORKER], cwd=ROOT, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert done.stdout == "kept 1\n"  # not closed by the garbage collector outside its run
    assert "Traceback" not in done.stderr
