"""A step's write stays on the wire while the flow goes on (`sdk.engine._writes.Writes.send`),
and nothing that has an effect happens before it is back.

In process: a store holds one step's write until the test lets it through, and
the test watches what the flow's own code and the step bodies did meanwhile.
The process tests (SIGKILL while the write is on the wire) are in
tests/test_crash.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sdk import Client, RunStatus, Worker, flow, step
from sdk.engine._activation import Activation
from sdk.engine._eager import Started
from sdk.errors import RunCanceled
from sdk.model._stepspec import StepSpec
from stores.redis import RedisStore
from tests.crashflows import until

WAKE = 5.0  # generous bound on in-process hand-offs; nothing measures speed

BODIES: list[str] = []  # the step bodies that ran, in order
FLOW_CODE: list[str] = []  # what the flow's own code did, in order


@pytest.fixture(autouse=True)
def _fresh() -> None:
    BODIES.clear()
    FLOW_CODE.clear()


@step(name="tests.ahead.body")
async def body(label: str) -> str:
    BODIES.append(label)
    return label


@flow(name="tests.ahead.two")
async def two() -> list[str]:
    a = await body("a")
    FLOW_CODE.append(f"after {a}")  # the flow's own code: deterministic, observed by the test
    b = await body("b")
    FLOW_CODE.append(f"after {b}")
    return [a, b]


@flow(name="tests.ahead.ends")
async def ends() -> str:
    a = await body("a")
    FLOW_CODE.append(f"after {a}")
    return a


class Held(RedisStore):
    """Holds its first write of step `key` until `gate` is set, then answers `answer`:
    ``"ok"`` (written), ``"fenced"`` (refused, nothing written) or ``"error"`` (raises)."""

    key = "tests.ahead.body#1"
    answer = "ok"

    def hold(self) -> None:
        self.gate = asyncio.Event()
        self.holding = asyncio.Event()
        self.held = 0

    async def record(self, run_id: str, fence: int, key: str, *a: Any, **kw: Any) -> bool:
        if key != self.key or self.held:
            return await super().record(run_id, fence, key, *a, **kw)
        self.held += 1
        self.holding.set()
        await self.gate.wait()
        if self.answer == "fenced":
            return False
        if self.answer == "error":
            raise ConnectionError("the write's reply was lost")
        return await super().record(run_id, fence, key, *a, **kw)


def held(store: RedisStore, answer: str = "ok") -> Held:
    out = Held(store.client, prefix=store.keys.prefix)
    out.answer = answer
    out.hold()
    return out


async def test_the_flow_goes_on_while_a_write_is_out_but_the_next_body_waits(
    store: RedisStore,
) -> None:
    slow = held(store)
    handle = await Client(slow).start(two, run_id="ahead")
    task = asyncio.create_task(Worker(slow, name="w").run_until_idle())
    await asyncio.wait_for(slow.holding.wait(), WAKE)
    # the flow's code after step a ran (its outcome was delivered) ...
    await until(lambda: FLOW_CODE == ["after a"], WAKE, "the flow to go on")
    for _ in range(20):  # ... and nothing else does, however long the write takes
        await asyncio.sleep(0.005)
        assert BODIES == ["a"]
    slow.gate.set()
    await asyncio.wait_for(task, WAKE)
    assert await handle.result(timeout=WAKE) == ["a", "b"]
    assert BODIES == ["a", "b"]
    assert FLOW_CODE == ["after a", "after b"]


async def test_a_flow_that_ends_ahead_of_its_last_write_ends_once_it_is_back(
    store: RedisStore,
) -> None:
    slow = held(store)
    client = Client(slow)
    handle = await client.start(ends, run_id="ends")
    task = asyncio.create_task(Worker(slow, name="w").run_until_idle())
    await until(lambda: FLOW_CODE == ["after a"], WAKE, "the flow to return")
    await asyncio.sleep(0.05)
    assert (await client.get("ends")).status is RunStatus.RUNNING  # not finished yet
    slow.gate.set()
    await asyncio.wait_for(task, WAKE)
    assert await handle.result(timeout=WAKE) == "a"


async def test_a_cancel_that_comes_while_a_write_is_out_is_given_before_the_next_body(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    requested = asyncio.Event()
    request_cancel = Activation.request_cancel

    def heard(self: Activation, reason: str) -> None:
        request_cancel(self, reason)
        requested.set()

    monkeypatch.setattr(Activation, "request_cancel", heard)
    slow = held(store)
    client = Client(slow)
    handle = await client.start(two, run_id="canceled")
    # a short lease: the heartbeat that brings the request comes every 0.1 s
    task = asyncio.create_task(Worker(slow, lease_ttl=0.3, name="w").run_until_idle())
    await until(lambda: FLOW_CODE == ["after a"], WAKE, "the flow to go on")
    await client.cancel("canceled", reason="changed my mind", grace=30)
    await asyncio.wait_for(requested.wait(), WAKE)  # heard while a's write is out
    slow.gate.set()
    await asyncio.wait_for(task, WAKE)
    with pytest.raises(RunCanceled):
        await handle.result(timeout=WAKE)
    assert BODIES == ["a"]  # b was called, and never ran: the cancel came first
    journal = await slow.client.hkeys(slow.keys.journal("canceled"))
    assert sorted(k.decode() if isinstance(k, bytes) else k for k in journal) == [
        "tests.ahead.body#1",
        "~cancel",
    ]


@pytest.mark.parametrize("answer", ["fenced", "error"])
async def test_a_write_refused_or_lost_stops_the_activation_before_the_next_body(
    store: RedisStore, answer: str
) -> None:
    from testing import FakeClock

    clock = FakeClock(1_000.0)
    slow = held(store, answer)
    client = Client(slow, clock=clock)
    handle = await client.start(two, run_id="stopped")
    first = asyncio.create_task(Worker(slow, clock=clock, lease_ttl=30, name="a").run_until_idle())
    await until(lambda: FLOW_CODE == ["after a"], WAKE, "the flow to go on")
    slow.gate.set()
    await asyncio.wait_for(first, WAKE)
    assert BODIES == ["a"]  # b never ran: the activation stopped at a's write
    assert (await client.get("stopped")).status is RunStatus.RUNNING

    clock.advance(31)  # the lease expires; another worker recovers the run
    await Worker(slow, clock=clock, lease_ttl=30, name="b").run_until_idle()
    assert await handle.result(timeout=WAKE) == ["a", "b"]
    assert BODIES == ["a", "a", "b"]


async def test_an_activation_that_stops_with_a_write_out_still_completes_it(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine error in the next step's start (here: its request hash) stops the
    activation while the last write is out. That write is not dropped half-way
    (a coroutine closed where it waits for its reply): a task of its own completes
    it, so its connection carries no stale reply, and later calls get their own."""
    hash_of = StepSpec.request_hash

    def failing(self: StepSpec, fn: Any, args: tuple[Any, ...], *rest: Any) -> str:
        if args == ("b",):
            raise RuntimeError("no hash for b")
        return hash_of(self, fn, args, *rest)

    monkeypatch.setattr(StepSpec, "request_hash", failing)
    slow = held(store)
    await Client(slow).start(two, run_id="no-hash")
    await Worker(slow, lease_ttl=30, name="w").run_until_idle()  # stops at b's start
    assert BODIES == ["a"]
    assert await slow.client.hkeys(slow.keys.journal("no-hash")) == []
    slow.gate.set()  # the write that was out goes through, though nobody awaits it
    await until(
        lambda: slow.client.hexists(slow.keys.journal("no-hash"), Held.key), WAKE, "a's write"
    )
    run = await slow.get_run("no-hash")
    assert run is not None and run.status is RunStatus.RUNNING  # left to recovery
    monkeypatch.undo()
    handle = await Client(slow).start(ends, run_id="after")
    await Worker(slow, lease_ttl=30, name="w2").run_until_idle()
    assert await handle.result(timeout=WAKE) == "a"


# -- Started ------------------------------------------------------------------------------


async def test_started_runs_the_first_step_now_and_the_rest_in_the_awaiting_task() -> None:
    seen: list[object] = []
    gate = asyncio.get_running_loop().create_future()

    async def coro() -> int:
        seen.append(("first", asyncio.current_task()))
        await gate
        seen.append(("rest", asyncio.current_task()))
        return 7

    me = asyncio.current_task()
    started = Started(coro())
    assert seen == [("first", me)]  # at once, before any turn of the loop
    asyncio.get_running_loop().call_soon(gate.set_result, None)
    assert await started == 7
    assert seen == [("first", me), ("rest", me)]


async def test_started_raises_the_first_steps_error_when_awaited() -> None:
    async def coro() -> int:
        raise KeyError("at once")

    started = Started(coro())
    with pytest.raises(KeyError, match="at once"):
        await started


async def test_started_done_before_it_is_awaited_needs_no_turn_of_the_loop() -> None:
    gate = asyncio.get_running_loop().create_future()
    order: list[str] = []

    async def coro() -> str:
        await gate
        return "done"

    started = Started(coro())
    gate.set_result(None)
    asyncio.get_running_loop().call_soon(order.append, "a turn of the loop")
    assert await started == "done"
    order.append("awaited")
    assert order == ["awaited"]


async def test_a_cancel_of_the_awaiting_task_reaches_the_coroutine() -> None:
    unwound: list[str] = []

    async def coro() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            unwound.append("cancelled")
            raise

    async def awaiter() -> None:
        await Started(coro())

    task = asyncio.create_task(awaiter())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert unwound == ["cancelled"]


async def test_finish_runs_the_rest_in_a_task_of_its_own() -> None:
    done: list[str] = []
    gate = asyncio.get_running_loop().create_future()

    async def coro() -> None:
        try:
            await gate
            raise RuntimeError("nobody reads this")
        finally:
            done.append("finally")

    Started(coro()).finish()
    assert done == []
    gate.set_result(None)
    await until(lambda: done, WAKE, "the finishing task")
    assert done == ["finally"]


async def test_started_lets_a_keyboard_interrupt_through_at_once() -> None:
    async def coro() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Started(coro())
