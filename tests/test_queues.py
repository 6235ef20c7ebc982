"""Queues with limits: concurrency (global, per worker, per key), rate limits,
priority order among held runs, delayed starts, max_pending, Client.queues."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sdk import (
    Client,
    Queue,
    QueueInfo,
    RateLimit,
    Registry,
    RunStatus,
    Worker,
    flow,
    start_child,
    step,
    wait_for,
)
from sdk.errors import InvalidArgument, QueueFull, RegistryConflict, RunNotFound
from stores._keys import SUFFIX
from stores.redis import RedisStore
from testing import FlowTestEnv

ACTIVE: Counter[str] = Counter()  # group -> steps executing now
PEAK: Counter[str] = Counter()  # group -> most executing at once
ORDER: list[str] = []  # labels, in the order their step ran


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> None:
    ACTIVE.clear()
    PEAK.clear()
    ORDER.clear()


@step(name="tests.queues.work")
async def work(groups: list[str], label: str) -> str:
    """Counts itself executing in each of `groups` for a few real milliseconds."""
    ORDER.append(label)
    for g in groups:
        ACTIVE[g] += 1
        PEAK[g] = max(PEAK[g], ACTIVE[g])
    try:
        await asyncio.sleep(0.02)
    finally:
        for g in groups:
            ACTIVE[g] -= 1
    return label


LIMITED = Queue("tests.queues.limited", concurrency=3)
PER_WORKER = Queue("tests.queues.per-worker", worker_concurrency=2)
KEYED = Queue("tests.queues.keyed", key_concurrency=1)
RATED = Queue("tests.queues.rated", rate_limit=RateLimit(2, timedelta(minutes=1)))
SERIAL = Queue("tests.queues.serial", concurrency=1)
BOUNDED = Queue("tests.queues.bounded", max_pending=2)
FIFO = Queue("tests.queues.fifo", priority=False)


@flow(name="tests.queues.limited", queue=LIMITED)
async def limited(label: str) -> str:
    return await work(["all"], label)


@flow(name="tests.queues.per_worker", queue=PER_WORKER)
async def per_worker(label: str) -> str:
    return await work(["all"], label)


@flow(name="tests.queues.keyed", queue=KEYED)
async def keyed(key: str, label: str) -> str:
    return await work(["all", key], label)


@flow(name="tests.queues.rated", queue=RATED)
async def rated(label: str) -> str:
    return await work(["all"], label)


@flow(name="tests.queues.serial", queue="tests.queues.serial")
async def serial(label: str) -> str:
    return await work(["all"], label)


@flow(name="tests.queues.parks", queue="tests.queues.serial")
async def parks(label: str) -> str:
    await work(["all"], f"{label}:before")
    await wait_for("go")
    return await work(["all"], f"{label}:after")


@flow(name="tests.queues.bounded", queue=BOUNDED)
async def bounded(label: str) -> str:
    return label


@flow(name="tests.queues.fifo", queue=FIFO)
async def fifo(label: str) -> str:
    return label


@flow(name="tests.queues.parent")
async def parent(label: str) -> str:
    child = await start_child(serial, label, start_in=30, concurrency_key="k")
    return str(await child.result())


Registry.default().add(SERIAL)  # `serial` names its queue; the declaration is separate


# -- declaring queues ---------------------------------------------------------------------------


def test_a_queue_checks_every_argument_and_names_the_queue() -> None:
    for kwargs, what in [
        ({"concurrency": 0}, "concurrency"),
        ({"worker_concurrency": -1}, "worker_concurrency"),
        ({"key_concurrency": 1.5}, "key_concurrency"),
        ({"max_pending": True}, "max_pending"),
        ({"rate_limit": (10, 60)}, "rate_limit"),
        ({"priority": "yes"}, "priority"),
    ]:
        with pytest.raises(InvalidArgument, match=f"Queue 'q1': {what}"):
            Queue("q1", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="Queue: name"):
        Queue("")
    with pytest.raises(InvalidArgument, match="RateLimit: limit"):
        RateLimit(0, 60)
    with pytest.raises(InvalidArgument, match="RateLimit: period"):
        RateLimit(1, 0)
    assert RateLimit(10, timedelta(minutes=1)).interval == 6.0


def test_queues_are_registry_objects_declared_once_per_name() -> None:
    registry = Registry(limited, Queue("other", concurrency=2))
    assert registry.queues() == {
        "tests.queues.limited": LIMITED,
        "other": Queue("other", concurrency=2),
    }
    registry.add(Queue("other", concurrency=2))  # the same declaration again: fine
    with pytest.raises(RegistryConflict, match="queue 'other'"):
        registry.add(Queue("other", concurrency=3))
    assert Registry.default().queues()["tests.queues.limited"] is LIMITED


@pytest.mark.parametrize("name", ["concurrency_key", "start_at", "start_in"])
def test_the_new_start_options_are_reserved_names(name: str) -> None:
    scope: dict[str, object] = {}
    exec(f"async def f({name}: str) -> None: ...", scope)
    with pytest.raises(InvalidArgument, match="reserved"):
        flow(name=f"tests.queues.reserved.{name}", registry=Registry())(scope["f"])  # type: ignore[arg-type]


# -- concurrency ---------------------------------------------------------------------------------


async def test_concurrency_caps_executing_runs_across_workers(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handles = [await env.start(limited, f"r{i}") for i in range(12)]
        other = Worker(store, clock=env.clock, name="second-worker")
        await asyncio.gather(env.run_until_idle(), other.run_until_idle())
        await env.run_until_idle()
        assert [await h.status() for h in handles] == [RunStatus.COMPLETED] * 12
    assert PEAK["all"] == 3  # two workers with 16 slots each, and never more than the queue's 3


async def test_worker_concurrency_caps_each_worker(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handles = [await env.start(per_worker, f"r{i}") for i in range(6)]
        await env.run_until_idle()
        assert [await h.status() for h in handles] == [RunStatus.COMPLETED] * 6
    assert PEAK["all"] == 2


async def test_key_concurrency_caps_each_key_and_passes_a_full_key_over(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        # the noisy tenant's runs are all ahead of the quiet one's in the queue
        handles = [
            await env.start(keyed, "noisy", f"n{i}", concurrency_key="noisy") for i in range(4)
        ]
        handles += [
            await env.start(keyed, "quiet", f"q{i}", concurrency_key="quiet") for i in range(2)
        ]
        await env.run_until_idle()
        assert [await h.status() for h in handles] == [RunStatus.COMPLETED] * 6
        assert (await env.client.get(handles[0].run_id)).concurrency_key == "noisy"
    assert PEAK["noisy"] == PEAK["quiet"] == 1
    assert PEAK["all"] == 2  # the quiet tenant ran beside the noisy one, not behind it
    assert ORDER.index("q0") < ORDER.index("n1")


async def test_limited_runs_start_in_priority_order_fifo_within(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        for label, prio in [("a5", 5), ("b0", 0), ("c5", 5), ("d-1", -1), ("e0", 0)]:
            await env.start(serial, label, priority=prio)
        await env.run_until_idle()
    assert ORDER == ["d-1", "b0", "e0", "a5", "c5"]
    assert PEAK["all"] == 1


async def test_a_parked_run_holds_no_slot(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        first = await env.start(parks, "p")
        second = await env.start(serial, "s")
        await env.run_until_idle()
        assert await first.status() == RunStatus.WAITING_FOR_SIGNAL
        assert await second.status() == RunStatus.COMPLETED  # ran while `first` was parked
        await env.client.signal(first.run_id, "go")
        await env.run_until_idle()
        assert await first.status() == RunStatus.COMPLETED
    assert ORDER == ["p:before", "s", "p:after"]


async def test_a_crashed_workers_slot_comes_back_when_its_lease_expires(store: RedisStore) -> None:
    async with FlowTestEnv(store=store, lease_ttl=10) as env:
        env.crash_at("tests.queues.work#1", "before")
        crashed = await env.start(serial, "crashed")
        waiting = await env.start(serial, "waiting")
        await env.run_until_idle()
        [info] = [q for q in await env.client.queues() if q.name == "tests.queues.serial"]
        assert (info.pending, info.executing, info.limited_by) == (1, 1, "concurrency")
        assert await waiting.status() == RunStatus.PENDING
        await env.advance(11)  # the lease expires: the slot is free, both runs finish
        assert await crashed.status() == RunStatus.COMPLETED
        assert await waiting.status() == RunStatus.COMPLETED
        [info] = [q for q in await env.client.queues() if q.name == "tests.queues.serial"]
        assert (info.pending, info.executing, info.limited_by) == (0, 0, None)


async def test_canceling_an_executing_run_frees_its_slot(store: RedisStore) -> None:
    gate, entered = asyncio.Event(), asyncio.Event()

    @step(name="tests.queues.gated")
    async def gated() -> str:
        ORDER.append("gated")
        entered.set()
        await gate.wait()
        return "done"

    @flow(name="tests.queues.gated_flow", queue="tests.queues.serial", registry=Registry())
    async def gated_flow() -> str:
        return await gated()

    registry = Registry(gated_flow, serial, SERIAL)
    async with FlowTestEnv(store=store, registry=registry) as env:
        held = await env.start(gated_flow)
        await env.start(serial, "next")
        running = asyncio.ensure_future(env.run_until_idle())
        await entered.wait()
        [info] = [q for q in await env.client.queues() if q.name == "tests.queues.serial"]
        assert (info.executing, info.limited_by) == (1, "concurrency")
        await env.client.cancel(held.run_id, reason="test", grace=0)  # at once
        [info] = [q for q in await env.client.queues() if q.name == "tests.queues.serial"]
        assert (info.pending, info.executing, info.limited_by) == (1, 0, None)
        gate.set()
        await running
        await env.run_until_idle()
        assert ORDER == ["gated", "next"]


# -- rate limits ---------------------------------------------------------------------------------


async def test_a_rate_limit_spreads_starts_evenly(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        t0 = env.clock.time()
        handles = [await env.start(rated, f"r{i}") for i in range(5)]
        await env.run_until_idle()
        assert ORDER == ["r0"]  # 2 a minute: one every 30 s, no burst
        # the worker knows when the queue next has room: it blocks until then, no polling
        _, next_due = await env.worker._poller.poll()
        assert next_due == pytest.approx(t0 + 30)
        [info] = [q for q in await env.client.queues() if q.name == "tests.queues.rated"]
        assert (info.pending, info.limited_by) == (4, "rate")
        await env.advance(29)
        assert ORDER == ["r0"]
        await env.advance(1)
        assert ORDER == ["r0", "r1"]
        await env.advance(90)  # an idle stretch earns no burst: one start, the next in 30 s
        assert ORDER == ["r0", "r1", "r2"]
        await env.advance(30)
        await env.advance(30)
        assert ORDER == ["r0", "r1", "r2", "r3", "r4"]
        starts = [(await env.client.get(h.run_id)).started_at for h in handles]
    offsets = [round(s.timestamp() - t0) for s in starts if s is not None]
    assert offsets == [0, 30, 120, 150, 180]


async def test_a_resumed_run_is_not_a_new_start_for_the_rate_limit(store: RedisStore) -> None:
    @flow(name="tests.queues.rated_waits", queue=RATED, registry=Registry())
    async def rated_waits() -> str:
        await wait_for("go")
        return await work(["all"], "after")

    async with FlowTestEnv(store=store, registry=Registry(rated_waits)) as env:
        handle = await env.start(rated_waits)
        await env.run_until_idle()
        await env.client.signal(handle.run_id, "go")
        await env.run_until_idle()  # within the same 30 s: it runs on at once
        assert await handle.status() == RunStatus.COMPLETED


# -- delayed starts ------------------------------------------------------------------------------


async def test_a_delayed_start_waits_pending_on_a_durable_timer(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        later = await env.start(serial, "later", start_in=timedelta(minutes=1))
        at = datetime.fromtimestamp(env.clock.time(), UTC) + timedelta(seconds=90)
        latest = await env.start(serial, "latest", start_at=at)
        now = await env.start(serial, "now", start_in=0)
        await env.run_until_idle()
        assert ORDER == ["now"]
        assert await later.status() == RunStatus.PENDING
        [info] = [q for q in await env.client.queues() if q.name == "tests.queues.serial"]
        assert info.pending == 0  # not ready yet: on a timer, not in the queue
        await env.advance(59)
        assert ORDER == ["now"]
        await env.advance(1)
        assert ORDER == ["now", "later"]
        await env.advance(30)
        assert ORDER == ["now", "later", "latest"]
        record = await env.client.get(latest.run_id)
        assert record.started_at == record.start_at == at
        assert await now.status() == RunStatus.COMPLETED


async def test_delayed_start_arguments_are_checked(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        with pytest.raises(InvalidArgument, match="timezone-aware"):
            await env.start(serial, "x", start_at=datetime(2030, 1, 1))
        with pytest.raises(InvalidArgument, match="both"):
            await env.start(serial, "x", start_in=1, start_at=datetime.now(UTC))
        with pytest.raises(InvalidArgument, match="start_in"):
            await env.start(serial, "x", start_in=-1)
        with pytest.raises(InvalidArgument, match="concurrency_key"):
            await env.start(serial, "x", concurrency_key="")


async def test_a_child_flow_takes_the_start_options(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(parent, "kid")
        await env.run_until_idle()
        assert ORDER == []  # the child waits for its delayed start
        [child] = await env.client.list_runs(parent_run_id=handle.run_id)
        assert child.status == RunStatus.PENDING
        await env.advance(30)
        assert await handle.result() == "kid"


# -- back-pressure ---------------------------------------------------------------------------------


async def test_max_pending_refuses_new_runs_but_not_repeats(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        await env.start(bounded, "a", run_id="bounded-a")
        await env.start(bounded, "b", run_id="bounded-b")
        with pytest.raises(QueueFull, match=r"'tests\.queues\.bounded' is full") as caught:
            await env.start(bounded, "c", run_id="bounded-c")
        assert (caught.value.queue, caught.value.depth) == ("tests.queues.bounded", 2)
        with pytest.raises(RunNotFound):
            await env.client.get("bounded-c")
        again = await env.start(bounded, "a", run_id="bounded-a")  # idempotent: the existing run
        assert again.run_id == "bounded-a"
        await env.run_until_idle()
        handle = await env.start(bounded, "c", run_id="bounded-c")  # room again
        await env.run_until_idle()
        assert await handle.result() == "c"


async def test_a_fifo_queue_refuses_priorities(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        with pytest.raises(InvalidArgument, match="FIFO"):
            await env.start(fifo, "x", priority=1)
        handle = await env.start(fifo, "x")
        await env.run_until_idle()
        assert await handle.result() == "x"


# -- reporting -------------------------------------------------------------------------------------


async def test_client_queues_reports_figures_limits_and_age(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        for i in range(3):
            await env.start(limited, f"r{i}")
        await env.start(serial, "s")
        env.clock.advance(5)
        infos = {q.name: q for q in await env.client.queues()}
        assert infos["tests.queues.limited"] == QueueInfo(
            "tests.queues.limited",
            3,
            0,
            LIMITED,
            None,
            pytest.approx(5.0),  # type: ignore[arg-type]
        )
        assert infos["tests.queues.serial"].queue is SERIAL
        assert infos["tests.queues.serial"].pending == 1
        assert infos["tests.queues.bounded"].pending == 0  # declared, never used: listed
        await env.run_until_idle()
        infos = {q.name: q for q in await env.client.queues()}
        after = infos["tests.queues.limited"]
        assert (after.pending, after.executing) == (0, 0)
        assert after.oldest_pending_age is None
    client = Client(store, registry=Registry())
    assert all(q.queue is None for q in await client.queues())


async def test_damaged_limit_bookkeeping_starts_over_instead_of_stopping_claims(
    store: RedisStore,
) -> None:
    base = store.keys.base(0)
    for suffix in ("qslots", "qrate"):
        await store.client.set(f"{base}{SUFFIX[suffix]}tests.queues.limited", "not ours")
    await store.client.set(f"{base}{SUFFIX['qslots']}tests.queues.rated", "not ours")
    await store.client.set(f"{base}{SUFFIX['qrate']}tests.queues.rated", "not ours")
    async with FlowTestEnv(store=store) as env:
        handles = [await env.start(limited, "a"), await env.start(rated, "b")]
        await env.run_until_idle()
        assert [await h.status() for h in handles] == [RunStatus.COMPLETED] * 2


async def test_a_serving_worker_at_its_cap_waits_for_its_own_slot_without_spinning(
    store: RedisStore,
) -> None:
    polls = 0
    poll = store.poll

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal polls
        polls += 1
        return await poll(*args, **kwargs)

    store.poll = counted  # type: ignore[method-assign]
    registry = Registry(per_worker)
    client = Client(store, registry=registry)
    handles = [await client.start(per_worker, f"r{i}") for i in range(8)]
    worker = Worker(store, registry=registry, concurrency=16)
    serving = asyncio.ensure_future(worker.run())
    try:
        assert [await h.result(timeout=30) for h in handles] == [f"r{i}" for i in range(8)]
    finally:
        await worker.stop()
        await serving
    assert PEAK["all"] == 2
    # each pass claims what the cap allows; a freed slot starts the next pass: no busy loop
    assert polls <= len(handles), polls


async def test_an_event_start_on_a_full_queue_raises_and_a_resend_completes_it(
    store: RedisStore,
) -> None:
    full = Queue("tests.queues.full", max_pending=1)

    @flow(
        name="tests.queues.on_ping", queue=full, on_event="tests.queues.ping", registry=Registry()
    )
    async def on_ping(data: dict[str, Any]) -> str:
        return str(data["n"])

    async with FlowTestEnv(store=store, registry=Registry(on_ping)) as env:
        await env.start(on_ping, {"n": 0})
        with pytest.raises(QueueFull, match=r"tests\.queues\.full"):
            await env.client.send_event("tests.queues.ping", {"n": 1}, event_id="e1")
        await env.run_until_idle()
        [run_id] = await env.client.send_event("tests.queues.ping", {"n": 1}, event_id="e1")
        await env.run_until_idle()
        assert await env.client.handle(run_id).result() == "1"


# -- a queue nobody declared ----------------------------------------------------------------


async def test_a_flow_on_a_queue_nobody_declared_is_named_once_at_the_workers_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    own = Registry()

    @flow(name="tests.queues.newsletter", queue="tests.queues.emails", registry=own)
    async def newsletter(user: str) -> str:
        return user

    @flow(name="tests.queues.report", queue=Queue("tests.queues.reports", concurrency=1),
          registry=own)  # fmt: skip
    async def report(n: int) -> int:
        return n

    @flow(name="tests.queues.plain", registry=own)  # the default queue: nothing to declare
    async def plain(n: int) -> int:
        return n

    caplog.set_level(logging.WARNING, logger="steadyflow.worker")
    async with FlowTestEnv(registry=own) as env:
        await env.start(newsletter, "ada")
        await env.run_until_idle()
        await env.start(newsletter, "grace")
        await env.run_until_idle()

    said = [r.getMessage() for r in caplog.records if r.name == "steadyflow.worker"]
    assert said == [
        "flow tests.queues.newsletter runs on queue 'tests.queues.emails', which no "
        "Queue('tests.queues.emails', ...) in the registry declares: its runs there have "
        "no concurrency or rate limits (declare the queue, or check its name)"
    ]
    declared = Registry(newsletter, Queue("tests.queues.emails", concurrency=2))
    caplog.clear()
    async with FlowTestEnv(registry=declared) as env:
        await env.start(newsletter, "ada")
        await env.run_until_idle()
    assert [r for r in caplog.records if r.name == "steadyflow.worker"] == []
