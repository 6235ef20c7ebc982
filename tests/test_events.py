"""The run event log: canonical events with their data, correlation ids and
injected-clock times; stable cursors; bounded growth; the live feed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import fakeredis
import pytest
import pytest_asyncio

from sdk import Client, Event, EventType, RetryPolicy, RunOptions, flow, step, wait_for
from sdk.errors import RunFailed, RunNotFound, WaitTimeout
from stores.redis import RedisStore
from testing import FakeClock, FlowTestEnv
from tests.conftest import need_real_redis

START = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)
LEASE_TTL = 30.0
# Deadlines for the live feed: events must arrive, nothing here measures speed.
FEED_DEADLINE = 20.0

CALLS: Counter[str] = Counter()
FAIL: set[str] = set()


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> None:
    CALLS.clear()
    FAIL.clear()


def at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


@step
async def work(label: str) -> str:
    CALLS[label] += 1
    if label in FAIL:
        raise ValueError(f"{label} failed")
    return label


@step
async def noop(i: int) -> int:
    return i


@flow(name="tests.events.order")
async def order(order_id: str) -> Any:
    await work("reserve")
    await work("charge")
    return await wait_for("paid")


@flow(name="tests.events.fails")
async def fails() -> None:
    await work("a")
    await work("b")


@flow(
    name="tests.events.retries",
    retry=RetryPolicy(max_attempts=3, initial_interval=10, backoff=2),
)
async def retries() -> None:
    await work("a")


@flow(name="tests.events.times_out")
async def times_out() -> str:
    try:
        await wait_for("go", timeout=30)
    except WaitTimeout:
        return "timed out"
    return "signaled"


@flow(name="tests.events.decisions")
async def decisions() -> list[bool]:
    ship = await wait_for("ship", human=True)
    refund = await wait_for("refund", human=True)
    return [ship.approved, refund.approved]


@flow(name="tests.events.many")
async def many(n: int) -> int:
    for i in range(n):
        await noop(i)
    return n


@flow(name="tests.events.probe")
async def probe() -> None:
    return None


# -- helpers ---------------------------------------------------------------------------


async def all_events(client: Client, run_id: str) -> list[Event]:
    return await client.events(run_id, limit=100_000)


def shape(events: list[Event]) -> list[tuple[str, str | None, datetime]]:
    return [(e.type, e.step_key, e.at) for e in events]


def of_type(events: list[Event], etype: str) -> list[Event]:
    return [e for e in events if e.type == etype]


# -- the canonical sequence --------------------------------------------------------------


async def test_a_run_logs_the_canonical_sequence_with_clock_times(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(order, "o-1", tenant_id="acme")
        await env.advance(1)
        env.clock.advance(1)
        assert await env.client.signal(handle.run_id, "paid", {"ok": True}, dedup_id="pay-1",
                                       actor="psp")  # fmt: skip
        await env.advance(1)
        assert await handle.result() == {"ok": True}

        events = await all_events(env.client, handle.run_id)
    assert shape(events) == [
        ("run.created", None, at(0)),
        ("run.started", None, at(1)),
        ("step.completed", "work#1", at(1)),
        ("step.completed", "work#2", at(1)),
        ("run.waiting_for_signal", None, at(1)),
        ("signal.received", None, at(2)),
        ("wait.completed", "~wait:paid#1", at(3)),
        ("run.completed", None, at(3)),
    ]
    by_type = {e.type: e for e in events}
    assert by_type["run.created"].data == {"flow": "tests.events.order", "queue": "default",
                                           "priority": 0, "actor": None}  # fmt: skip
    assert by_type["signal.received"].data == {"name": "paid", "dedup_id": "pay-1",
                                               "actor": "psp"}  # fmt: skip
    assert by_type["step.completed"].data is None
    assert by_type["run.completed"].data is None
    assert all(e.run_id == handle.run_id for e in events)
    assert len({e.event_id for e in events}) == len(events)


async def test_every_event_type_is_an_event_type_member_equal_to_its_string() -> None:
    assert EventType.RUN_CREATED == "run.created"  # type: ignore[comparison-overlap]
    assert str(EventType.STEP_RETRY_SCHEDULED) == "step.retry_scheduled"
    assert EventType("run.waiting_for_human") is EventType.RUN_WAITING_FOR_HUMAN
    contract = {"run.created", "run.started", "step.started", "step.completed", "step.failed",
                "step.retry_scheduled", "run.waiting_for_signal", "run.waiting_for_human",
                "signal.received", "run.resumed", "run.completed", "run.failed",
                "run.canceled"}  # fmt: skip
    assert contract <= {t.value for t in EventType}

    async with FlowTestEnv(FakeClock(START)) as env:
        handle = await env.start(order, "o-1")
        await env.run_until_idle()
        await env.client.signal(handle.run_id, "paid", 1)
        await env.run_until_idle()
        events = await all_events(env.client, handle.run_id)
    assert [EventType(e.type) for e in events] == [e.type for e in events]


def test_every_type_the_engine_writes_is_an_event_type_member() -> None:
    import re
    from pathlib import Path

    from stores._scripts import lua_files

    root = Path(__file__).resolve().parent.parent
    lua = "\n".join(lua_files().values())
    written = set(re.findall(r"emit\(\w+, '([a-z_]+\.[a-z_]+)'", lua))
    assert "'run.' .. ARGV[6]" in lua  # the waiting statuses
    written |= {"run.waiting_for_signal", "run.waiting_for_human"}
    assert "'outbox.' .. outcome" in lua  # the settled outcomes
    written |= {"outbox.sent", "outbox.dead"}
    assert len(written) > 18
    assert written <= {t.value for t in EventType}, written - {t.value for t in EventType}
    # The engine names the types it writes by their EventType members, never literals.
    for path in sorted((root / "sdk").glob("*.py")):
        if path.name == "_types.py":  # where the members are defined
            continue
        source = path.read_text()
        literal = re.findall(r'"((?:run|step|side_effect|wait|signal|outbox)\.[a-z_]+)"', source)
        assert not literal, (path.name, literal)


async def test_a_failed_step_logs_its_error_and_the_run_its_failure(store: RedisStore) -> None:
    FAIL.add("b")
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(fails)
        await env.run_until_idle()
        with pytest.raises(RunFailed):
            await handle.result()
        events = await all_events(env.client, handle.run_id)

    assert [e.type for e in events] == [
        "run.created", "run.started", "step.completed", "step.failed", "run.failed",
    ]  # fmt: skip
    failed = events[3]
    assert failed.step_key == "work#2"
    assert failed.data == {"type": "builtins:ValueError", "message": "b failed",
                           "reason": "step_failed"}  # fmt: skip
    assert events[4].step_key is None
    ended = dict(events[4].data)
    assert "in work" in ended.pop("traceback")  # the step's frames (ErrorInfo.traceback)
    assert ended == {"type": "builtins:ValueError", "message": "b failed",
                     "step_key": "work#2", "reason": "step_failed"}  # fmt: skip


async def test_each_scheduled_retry_is_logged_with_its_attempt_and_due_time(
    store: RedisStore,
) -> None:
    FAIL.add("a")
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(retries)
        await env.run_until_idle()
        await env.advance(10)
        await env.advance(20)
        with pytest.raises(RunFailed):
            await handle.result()
        events = await all_events(env.client, handle.run_id)

    retried = of_type(events, "step.retry_scheduled")
    assert [(e.step_key, e.at) for e in retried] == [("work#1", at(0)), ("work#1", at(10))]
    assert [e.data for e in retried] == [
        {"attempt": 1, "due": at(10).timestamp(), "type": "builtins:ValueError",
         "message": "a failed"},
        {"attempt": 2, "due": at(30).timestamp(), "type": "builtins:ValueError",
         "message": "a failed"},
    ]  # fmt: skip
    (failed,) = of_type(events, "step.failed")
    assert (failed.at, failed.data["reason"]) == (at(30), "retries_exhausted")
    assert len(of_type(events, "run.started")) == 1
    assert CALLS == {"a": 3}


async def test_a_wait_that_times_out_logs_wait_timed_out(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(times_out)
        await env.run_until_idle()
        await env.advance(30)
        assert await handle.result() == "timed out"
        events = await all_events(env.client, handle.run_id)

    assert shape(events) == [
        ("run.created", None, at(0)),
        ("run.started", None, at(0)),
        ("run.waiting_for_signal", None, at(0)),
        ("wait.timed_out", "~wait:go#1", at(30)),
        ("run.completed", None, at(30)),
    ]


async def test_a_crashed_worker_shows_as_run_lease_expired_and_no_second_start(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(FakeClock(START), store=store, lease_ttl=LEASE_TTL) as env:
        env.crash_at("work#1", when="before")
        handle = await env.start(fails)
        await env.run_until_idle()
        await env.advance(LEASE_TTL + 1)
        assert await handle.result() is None
        events = await all_events(env.client, handle.run_id)

    assert shape(events) == [
        ("run.created", None, at(0)),
        ("run.started", None, at(0)),
        ("run.lease_expired", None, at(LEASE_TTL + 1)),
        ("step.completed", "work#1", at(LEASE_TTL + 1)),
        ("step.completed", "work#2", at(LEASE_TTL + 1)),
        ("run.completed", None, at(LEASE_TTL + 1)),
    ]


async def test_cancel_logs_its_reason_and_actor(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(order, "o-1")
        await env.run_until_idle()
        env.clock.advance(7)
        await env.client.cancel(handle.run_id, reason="customer called", actor="ops", grace=0)
        last = (await all_events(env.client, handle.run_id))[-1]

    assert (last.type, last.at, last.step_key) == ("run.canceled", at(7), None)
    assert last.data == {"reason": "customer called", "actor": "ops"}


async def test_resume_logs_run_resumed_with_its_actor(store: RedisStore) -> None:
    FAIL.add("a")
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(fails)
        await env.run_until_idle()
        FAIL.clear()
        env.clock.advance(60)
        await env.client.resume(handle.run_id, actor="ops")
        await env.run_until_idle()
        assert await handle.result() is None
        events = await all_events(env.client, handle.run_id)

    (resumed,) = of_type(events, "run.resumed")
    assert resumed.at == at(60)
    assert resumed.data["actor"] == "ops"
    assert resumed.data["from"] == "failed"
    # the resumed run is not started again
    assert [e.type for e in events[events.index(resumed) :]] == [
        "run.resumed", "step.completed", "step.completed", "run.completed",
    ]  # fmt: skip


async def test_approve_and_deny_log_the_decision_actor_and_reason(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(decisions)
        await env.run_until_idle()
        await env.client.approve(handle.run_id, "ship", actor="ada", reason="stock is fine")
        await env.run_until_idle()
        await env.client.deny(handle.run_id, "refund", actor="bob")
        await env.run_until_idle()
        assert await handle.result() == [True, False]
        events = await all_events(env.client, handle.run_id)

    received = [e.data for e in of_type(events, "signal.received")]
    assert [{k: d[k] for k in ("name", "decision", "actor", "reason")} for d in received] == [
        {"name": "ship", "decision": "approve", "actor": "ada", "reason": "stock is fine"},
        {"name": "refund", "decision": "deny", "actor": "bob", "reason": None},
    ]
    assert [e.type for e in events if e.type.startswith("run.waiting")] == [
        "run.waiting_for_human", "run.waiting_for_human",
    ]  # fmt: skip
    assert [e.step_key for e in of_type(events, "wait.completed")] == [
        "~wait:ship#1", "~wait:refund#1",
    ]  # fmt: skip


# -- correlation ids ----------------------------------------------------------------------


async def test_every_event_carries_the_runs_correlation_ids(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(
            order, "o-1", tenant_id="acme", options=RunOptions(trace_id="trace-42")
        )
        await env.run_until_idle()
        await env.client.signal(handle.run_id, "paid", 1)
        await env.run_until_idle()
        events = await all_events(env.client, handle.run_id)

    assert len(events) == 8
    for e in events:
        assert e.correlation == {"run_id": handle.run_id, "trace_id": "trace-42",
                                 "tenant_id": "acme", "step_key": e.step_key}  # fmt: skip
    assert {e.step_key for e in events} == {None, "work#1", "work#2", "~wait:paid#1"}


async def test_the_trace_id_defaults_to_the_run_id_and_the_tenant_to_none() -> None:
    async with FlowTestEnv(FakeClock(START)) as env:
        handle = await env.start(fails, run_id="run-7")
        await env.run_until_idle()
        events = await all_events(env.client, "run-7")

    assert await handle.status() == "completed"
    assert {(e.correlation["run_id"], e.correlation["trace_id"], e.correlation["tenant_id"])
            for e in events} == {("run-7", "run-7", None)}  # fmt: skip


# -- pagination ----------------------------------------------------------------------------


async def test_walking_pages_by_cursor_returns_every_event_once_in_order(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(many, 60)
        await env.run_until_idle()
        assert await handle.result() == 60

        everything = await all_events(env.client, handle.run_id)
        pages: list[list[Event]] = []
        cursor = None
        while page := await env.client.events(handle.run_id, cursor=cursor, limit=7):
            pages.append(page)
            cursor = page[-1].event_id
        first = await env.client.events(handle.run_id, limit=7)

    assert len(everything) == 63  # created, started, 60 steps, completed
    assert [e for page in pages for e in page] == everything
    assert [len(p) for p in pages] == [7] * 9
    assert first == pages[0]
    assert [e.step_key for e in everything[2:-1]] == [f"noop#{i}" for i in range(1, 61)]


async def test_a_page_after_the_newest_event_is_empty_until_more_happen() -> None:
    async with FlowTestEnv(FakeClock(START)) as env:
        handle = await env.start(order, "o-1")
        await env.run_until_idle()
        page = await env.client.events(handle.run_id)
        assert await env.client.events(handle.run_id, cursor=page[-1].event_id) == []

        await env.client.signal(handle.run_id, "paid", 1)
        await env.run_until_idle()
        rest = await env.client.events(handle.run_id, cursor=page[-1].event_id)

    assert [e.type for e in rest] == ["signal.received", "wait.completed", "run.completed"]


async def test_events_of_an_unknown_run_raise_run_not_found() -> None:
    async with FlowTestEnv() as env:
        with pytest.raises(RunNotFound):
            await env.client.events("no-such-run")


async def test_a_page_limit_below_one_is_a_value_error() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(probe)
        for bad in (0, -1):
            with pytest.raises(ValueError):
                await env.client.events(handle.run_id, limit=bad)


# -- bounded growth -------------------------------------------------------------------------

CAP = 100


@pytest_asyncio.fixture(name="capped_store", params=["memory", "redis"])
async def capped_store_fixture(
    request: pytest.FixtureRequest, key_prefix: str
) -> AsyncIterator[RedisStore]:
    """A store whose runs keep about `CAP` newest events."""
    if request.param == "memory":
        fake = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer(), decode_responses=True)
        store = RedisStore(fake, max_events_per_run=CAP)
        try:
            yield store
        finally:
            await store.close()
        return
    store = RedisStore.from_url(need_real_redis(), prefix=key_prefix, max_events_per_run=CAP)
    try:
        yield store
    finally:
        keys = [k async for k in store.client.scan_iter(match=f"{key_prefix}:*", count=1000)]
        if keys:
            await store.client.delete(*keys)
        await store.close()


async def test_a_long_run_keeps_only_its_newest_events(capped_store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(START), store=capped_store) as env:
        handle = await env.start(many, 500)
        await env.run_until_idle()
        assert await handle.result() == 500

        kept = await all_events(env.client, handle.run_id)
        walked: list[Event] = []
        cursor = None
        while page := await env.client.events(handle.run_id, cursor=cursor, limit=33):
            walked += page
            cursor = page[-1].event_id
        checkpoints = await env.client.checkpoints(handle.run_id)

    assert walked == kept
    # The audit events trimmed out of the log stay (its audit trail), in their places.
    assert (kept[0].type, kept[0].step_key) == ("run.created", None)
    kept = kept[1:]
    # 503 were logged; trimming is in blocks, so between CAP and about 2 * CAP stay.
    assert CAP <= len(kept) <= 2 * CAP
    assert kept[-1].type == "run.completed"
    newest_steps = [e.step_key for e in kept[:-1]][-(CAP - 1) :]
    assert newest_steps == [f"noop#{i}" for i in range(500 - CAP + 2, 501)]
    assert [e.step_key for e in kept[:-1]] == [f"noop#{i}" for i in range(502 - len(kept), 501)]
    # checkpoints are not trimmed: resume and replay need every one of them
    assert len(checkpoints) == 502


@pytest.mark.parametrize("cap", [0, 99])
async def test_an_event_cap_below_one_hundred_is_refused(cap: int) -> None:
    fake = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer(), decode_responses=True)
    try:
        with pytest.raises(ValueError):
            RedisStore(fake, max_events_per_run=cap)
    finally:
        await fake.aclose()


async def test_from_url_refuses_an_event_cap_below_one_hundred() -> None:
    with pytest.raises(ValueError):
        RedisStore.from_url("redis://127.0.0.1:6379/0", max_events_per_run=99)


# -- the live feed ----------------------------------------------------------------------------


class Follower:
    """Collects `Client.follow()` in a task of its own."""

    def __init__(self, client: Client) -> None:
        self.events: list[Event] = []
        self._changed = asyncio.Event()
        self._task = asyncio.create_task(self._collect(client))

    async def _collect(self, client: Client) -> None:
        async for event in client.follow(poll_timeout=0.1):
            self.events.append(event)
            self._changed.set()

    async def until(self, done: Callable[[list[Event]], bool]) -> None:
        """Wait (with a deadline) until `done(self.events)` holds."""

        async def loop() -> None:
            while not done(self.events):
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(loop(), FEED_DEADLINE)

    async def synced(self, client: Client) -> None:
        """Return once the follower is reading: it has seen a probe run's creation.

        A probe created before the follower's first read is not delivered, so
        keep creating probes until one is.
        """
        probes: set[str] = set()

        async def loop() -> None:
            while True:
                probes.add((await client.start(probe)).run_id)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self.until(lambda evs: any(e.run_id in probes for e in evs)), 0.2
                    )
                    return

        await asyncio.wait_for(loop(), FEED_DEADLINE)

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


@contextlib.asynccontextmanager
async def following(client: Client) -> AsyncIterator[Follower]:
    follower = Follower(client)
    try:
        await follower.synced(client)
        yield follower
    finally:
        await follower.close()


def completed_runs(events: list[Event]) -> set[str]:
    return {e.run_id for e in events if e.type == "run.completed"}


async def test_follow_yields_the_events_of_several_runs_live_with_their_correlation(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        history = await env.start(probe, run_id="history")
        await env.run_until_idle()
        assert await history.status() == "completed"

        async with following(env.client) as follower:
            runs = {}
            for n in range(3):
                handle = await env.start(
                    order, f"o-{n}", run_id=f"order-{n}", tenant_id=f"tenant-{n}",
                    options=RunOptions(trace_id=f"trace-{n}"),
                )  # fmt: skip
                runs[handle.run_id] = n
            await env.run_until_idle()
            for run_id in runs:
                await env.client.signal(run_id, "paid", run_id)
            await env.run_until_idle()
            await follower.until(lambda evs: set(runs) <= completed_runs(evs))
            followed = list(follower.events)

        logged = {run_id: await all_events(env.client, run_id) for run_id in runs}

    assert not [e for e in followed if e.run_id == "history"]  # no replay of the past
    ours = [e for e in followed if e.run_id in runs]
    # live and interleaved: all three were created before any of them started
    assert [(e.run_id, e.type) for e in ours[:3]] == [
        (f"order-{n}", "run.created") for n in range(3)
    ]  # fmt: skip
    for run_id, n in runs.items():
        mine = [e for e in ours if e.run_id == run_id]
        assert mine == logged[run_id]  # same ids, types, times, data and correlation
        assert {(e.correlation["trace_id"], e.correlation["tenant_id"]) for e in mine} == {
            (f"trace-{n}", f"tenant-{n}")
        }
        assert all(e.correlation["step_key"] == e.step_key for e in mine)


async def test_follow_continues_with_events_that_happen_later(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(order, "o-1", run_id="slow-order")
        await env.run_until_idle()  # waiting for "paid" before anyone follows

        async with following(env.client) as follower:
            await env.client.signal(handle.run_id, "paid", "now")
            await env.run_until_idle()
            await follower.until(lambda evs: "slow-order" in completed_runs(evs))
            mine = [e.type for e in follower.events if e.run_id == "slow-order"]

    assert mine == ["signal.received", "wait.completed", "run.completed"]


async def test_a_canceled_follower_stops_even_when_a_read_swallowed_the_cancel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # On Python 3.11, asyncio.wait_for inside redis-py can swallow a cancel that
    # lands just as a socket write completes: the read then returns normally.
    reading = asyncio.Event()
    swallowed = asyncio.Event()

    async def swallowing_follow(
        cursors: dict[int, str], timeout: float, count: int
    ) -> tuple[list[Any], dict[int, str]]:
        reading.set()
        try:
            await asyncio.sleep(timeout)
        except asyncio.CancelledError:
            if swallowed.is_set():
                raise
            swallowed.set()  # once: a later cancel (teardown) goes through
        return [], cursors

    async with FlowTestEnv() as env:
        monkeypatch.setattr(env.store, "follow", swallowing_follow)

        async def consume() -> None:
            async for _ in env.client.follow(poll_timeout=0.05):
                pass

        task = asyncio.create_task(consume())
        await asyncio.wait_for(reading.wait(), FEED_DEADLINE)
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=FEED_DEADLINE)
        if not done:
            task.cancel()
            await asyncio.wait([task])

    assert swallowed.is_set()
    assert done == {task}
    assert task.cancelled()


async def test_a_memory_store_takes_the_event_cap_and_refuses_connection_options() -> None:
    from stores import open_store

    store = open_store("memory://", max_events_per_run=100)
    try:
        assert store.max_events_per_run == 100
    finally:
        await store.close()
    with pytest.raises(TypeError, match="ssl_ca_certs"):
        open_store("memory://", ssl_ca_certs="/nope")
