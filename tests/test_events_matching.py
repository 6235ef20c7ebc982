"""Events matched by a key: ``wait_for_event``, ``Client.send_event`` and
``@flow(on_event=...)`` (issue 9)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sdk import Client, RunRecord, RunStatus, flow, step, wait_for, wait_for_event
from sdk.errors import (
    Forbidden,
    InvalidArgument,
    NotInRunError,
    RunFailed,
    SerializationError,
    WaitTimeout,
)
from sdk.model._events import event_mailbox, tokens_for
from sdk.store import EventDelivered
from stores.redis import RedisStore
from testing import FlowTestEnv

CALLS: list[str] = []


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> None:
    CALLS.clear()


@step
async def note(label: str) -> str:
    CALLS.append(label)
    return label


@flow(name="tests.events.await_payment")
async def await_payment(order_id: str) -> Any:
    await note(f"waiting {order_id}")
    data = await wait_for_event("payment.succeeded", match={"order_id": order_id})
    await note(f"paid {order_id}")
    return data


@flow(name="tests.events.await_two_fields")
async def await_two_fields(tenant: str, order_id: str) -> Any:
    return await wait_for_event("order.shipped", match={"tenant": tenant, "order_id": order_id})


@flow(name="tests.events.await_any")
async def await_any() -> Any:
    return await wait_for_event("ping")


@flow(name="tests.events.await_with_timeout")
async def await_with_timeout(order_id: str) -> Any:
    try:
        return await wait_for_event("payment.succeeded", match={"order_id": order_id}, timeout=60)
    except WaitTimeout as exc:
        return f"timed out: {exc.name}"


@flow(name="tests.events.await_twice")
async def await_twice(order_id: str) -> Any:
    first = await wait_for_event("step.done", match={"order_id": order_id})
    second = await wait_for_event("step.done", match={"order_id": order_id})
    return [first, second]


@flow(name="tests.events.race")
async def race(order_id: str) -> Any:
    event = asyncio.ensure_future(wait_for_event("payment.succeeded", match={"order_id": order_id}))
    signal = asyncio.ensure_future(wait_for("cancel"))
    done, _ = await asyncio.wait({event, signal}, return_when=asyncio.FIRST_COMPLETED)
    return ["event" if event in done else "signal", done.pop().result()]


@flow(name="tests.events.on_order_created", on_event="order.created")
async def on_order_created(data: dict[str, Any]) -> str:
    await note(f"created {data['order_id']}")
    return str(data["order_id"])


async def waiting(env: FlowTestEnv, flow_fn: Any, *args: Any) -> str:
    handle = await env.start(flow_fn, *args)
    await env.run_until_idle()
    assert await handle.status() == "waiting_for_signal"
    return handle.run_id


# -- delivery ---------------------------------------------------------------------------


async def test_an_event_reaches_only_the_runs_whose_match_it_satisfies(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        a = await waiting(env, await_payment, "o-1")
        b = await waiting(env, await_payment, "o-2")
        sent = await env.client.send_event("payment.succeeded", {"order_id": "o-1", "amount": 30})
        assert sent == [a]
        await env.run_until_idle()
        assert await env.client.handle(a).result() == {"order_id": "o-1", "amount": 30}
        assert await env.client.handle(b).status() == "waiting_for_signal"
        assert await env.client.send_event("payment.succeeded", {"order_id": "o-3"}) == []
        assert await env.client.send_event("payment.failed", {"order_id": "o-2"}) == []
        await env.run_until_idle()
        assert await env.client.handle(b).status() == "waiting_for_signal"
    assert CALLS == ["waiting o-1", "waiting o-2", "paid o-1"]


async def test_a_match_on_several_fields_needs_all_of_them_equal(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        run = await waiting(env, await_two_fields, "acme", "o-1")
        client = env.client
        assert await client.send_event("order.shipped", {"tenant": "acme", "order_id": "o-2"}) == []
        assert (
            await client.send_event("order.shipped", {"tenant": "other", "order_id": "o-1"}) == []
        )
        assert await client.send_event("order.shipped", {"order_id": "o-1"}) == []
        # values compare as JSON: a number is not its string
        assert await client.send_event("order.shipped", {"tenant": "acme", "order_id": 1}) == []
        data = {"tenant": "acme", "order_id": "o-1", "carrier": "ups"}
        assert await client.send_event("order.shipped", data) == [run]
        await env.run_until_idle()
        assert await client.handle(run).result() == data


async def test_a_wait_without_match_gets_any_event_of_its_name(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        run = await waiting(env, await_any)
        assert await env.client.send_event("ping", {"text": "hello"}) == [run]
        await env.run_until_idle()
        assert await env.client.handle(run).result() == {"text": "hello"}


async def test_data_no_wait_could_match_is_refused_and_nothing_is_delivered(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store) as env:
        run = await waiting(env, await_any)
        # a filter matches fields of an object: a string, a number, a list has none
        for data in ("notadict", 7, [1, 2], True):
            with pytest.raises(InvalidArgument, match=r"data of event 'ping' must be a JSON obj"):
                await env.client.send_event("ping", data)
        assert (await env.client.get(run)).status is RunStatus.WAITING_FOR_SIGNAL
        assert await env.client.send_event("ping") == [run]  # no data at all: null
        await env.run_until_idle()
        assert await env.client.handle(run).result() is None


async def test_the_same_event_id_is_delivered_once_per_run(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        run = await waiting(env, await_twice, "o-1")
        other = await waiting(env, await_twice, "o-1")
        event = {"order_id": "o-1", "n": 1}
        assert await env.client.send_event("step.done", event, event_id="hook-1") == sorted(
            [run, other]
        )
        await env.run_until_idle()  # both take it and wait again, for the next event
        assert await env.client.send_event("step.done", event, event_id="hook-1") == []
        await env.run_until_idle()
        assert await env.client.handle(run).status() == "waiting_for_signal"
        second = {"order_id": "o-1", "n": 2}
        assert await env.client.send_event("step.done", second, event_id="hook-2") == sorted(
            [run, other]
        )
        await env.run_until_idle()
        assert await env.client.handle(run).result() == [event, second]
        assert await env.client.handle(other).result() == [event, second]


async def test_a_repeated_send_before_the_run_takes_it_delivers_nothing_more(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store) as env:
        run = await waiting(env, await_twice, "o-1")
        for _ in range(3):  # a webhook retried before the worker ran
            await env.client.send_event("step.done", {"order_id": "o-1"}, event_id="hook-1")
        await env.run_until_idle()
        assert await env.client.handle(run).status() == "waiting_for_signal"  # one, not two
        events = [e for e in await env.client.events(run) if e.type == "event.delivered"]
        assert len(events) == 1


async def test_an_event_sent_before_the_wait_began_is_missed(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(await_payment, "o-1")
        assert await env.client.send_event("payment.succeeded", {"order_id": "o-1"}) == []
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_signal"
        assert await env.client.send_event("payment.succeeded", {"order_id": "o-1", "n": 2}) == [
            handle.run_id
        ]
        await env.run_until_idle()
        assert await handle.result() == {"order_id": "o-1", "n": 2}


async def test_a_finished_wait_leaves_the_index(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        run = await waiting(env, await_payment, "o-1")
        assert await env.client.send_event("payment.succeeded", {"order_id": "o-1"}) == [run]
        await env.run_until_idle()
        assert await env.client.send_event("payment.succeeded", {"order_id": "o-1"}) == []
        assert await store.event_listeners(["anything"]) == []
        keys = [k async for k in store.client.scan_iter(match=f"{store.keys.prefix}:*evi:*")]
        assert keys == []  # the run was taken off its filter's index


# -- timeouts, replay, races --------------------------------------------------------------


async def test_a_wait_for_event_times_out_with_wait_timeout(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(await_with_timeout, "o-1")
        await env.run_until_idle()
        await env.advance(61)
        await env.run_until_idle()
        assert await handle.result() == "timed out: payment.succeeded"
        # the timed-out wait no longer listens
        assert await env.client.send_event("payment.succeeded", {"order_id": "o-1"}) == []
        types = [e.type for e in await env.client.events(handle.run_id)]
        assert "wait.timed_out" in types


async def test_a_replay_returns_the_recorded_event_data(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        run = await waiting(env, await_payment, "o-1")
        await env.client.send_event("payment.succeeded", {"order_id": "o-1", "amount": 7})
        await env.run_until_idle()
        assert await env.client.handle(run).result() == {"order_id": "o-1", "amount": 7}
        replay = await env.client.replay(run)
        await env.run_until_idle()
        # the replay re-executes from the first checkpoint: it waits again
        assert await replay.status() == "waiting_for_signal"
        fork = await env.client.fork(run)
        await env.run_until_idle()
        assert await fork.result() == {"order_id": "o-1", "amount": 7}
    assert CALLS == ["waiting o-1", "paid o-1"]  # nothing ran again


async def test_a_woken_run_replays_the_event_it_took(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        run = await waiting(env, await_twice, "o-1")
        await env.client.send_event("step.done", {"order_id": "o-1", "n": 1})
        await env.run_until_idle()
        # the second activation replayed the first wait from the journal
        await env.client.send_event("step.done", {"order_id": "o-1", "n": 2})
        await env.run_until_idle()
        assert await env.client.handle(run).result() == [
            {"order_id": "o-1", "n": 1},
            {"order_id": "o-1", "n": 2},
        ]


async def test_a_wait_for_event_races_a_signal(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        by_event = await waiting(env, race, "o-1")
        by_signal = await waiting(env, race, "o-2")
        assert await env.client.send_event("payment.succeeded", {"order_id": "o-1"}) == [by_event]
        await env.client.signal(by_signal, "cancel", "stop")
        await env.run_until_idle()
        assert await env.client.handle(by_event).result() == ["event", {"order_id": "o-1"}]
        assert await env.client.handle(by_signal).result() == ["signal", "stop"]


# -- flows started by events ----------------------------------------------------------------


async def test_on_event_starts_one_run_per_event_id(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        data = {"order_id": "o-9"}
        started = await env.client.send_event("order.created", data, event_id="e-1")
        assert started == ["tests.events.on_order_created:e-1"]
        assert await env.client.send_event("order.created", data, event_id="e-1") == []
        other = await env.client.send_event("order.created", {"order_id": "o-10"})
        assert len(other) == 1 and other[0] != started[0]
        await env.run_until_idle()
        assert await env.client.handle(started[0]).result() == "o-9"
        created = (await env.client.events(started[0]))[0]
        assert created.type == "run.created"
        assert created.data is not None
        assert created.data["event"] == "order.created" and created.data["event_id"] == "e-1"
    assert sorted(CALLS) == ["created o-10", "created o-9"]


def test_an_on_event_flow_must_take_one_argument() -> None:
    with pytest.raises(InvalidArgument, match="one argument"):

        @flow(name="tests.events.bad", on_event="x")
        async def bad(a: int, b: int) -> None: ...

    with pytest.raises(InvalidArgument, match="on_event"):

        @flow(name="tests.events.bad2", on_event="")
        async def bad2(data: Any) -> None: ...


# -- the event log and authorization ----------------------------------------------------------


async def test_a_delivery_is_in_the_run_event_log_with_its_ids(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(await_payment, "o-1", tenant_id="t-1")
        await env.run_until_idle()
        await env.client.send_event("payment.succeeded", {"order_id": "o-1"}, event_id="hook-7")
        [event] = [e for e in await env.client.events(handle.run_id) if e.type == "event.delivered"]
        assert event.data == {"name": "payment.succeeded", "event_id": "hook-7", "actor": None}
        assert event.correlation["run_id"] == handle.run_id
        assert event.correlation["tenant_id"] == "t-1"


class OnlyAlice:
    def can(self, actor: str, action: str, run: RunRecord) -> bool:
        return actor == "alice"


async def test_send_event_is_authorized_per_run(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        run = await waiting(env, await_payment, "o-1")
        client = Client(store, OnlyAlice(), clock=env.clock)
        with pytest.raises(Forbidden):
            await client.send_event("payment.succeeded", {"order_id": "o-1"})
        assert await client.send_event("payment.succeeded", {"order_id": "o-1"}, actor="bob") == []
        types = [e.type for e in await env.client.events(run)]
        assert types[-1] == "auth.denied"
        got = await client.send_event("payment.succeeded", {"order_id": "o-1"}, actor="alice")
        assert got == [run]


# -- arguments ------------------------------------------------------------------------------


async def test_arguments_are_checked_before_anything_is_sent(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        with pytest.raises(InvalidArgument, match="name"):
            await env.client.send_event("", {})
        with pytest.raises(InvalidArgument, match="event_id"):
            await env.client.send_event("x", {}, event_id="")
        with pytest.raises(SerializationError):
            await env.client.send_event("x", {"when": {1, 2}})
        with pytest.raises(SerializationError):
            await env.client.send_event("x", ("a", "tuple"))


@flow(name="tests.events.bad_match")
async def bad_match(match: Any) -> None:
    await wait_for_event("x", match=match)


@flow(name="tests.events.bad_match_value")
async def bad_match_value() -> None:
    await wait_for_event("x", match={"a": {1, 2}})  # a set is not JSON


async def failure(env: FlowTestEnv, flow_fn: Any, *args: Any) -> str:
    handle = await env.start(flow_fn, *args)
    await env.run_until_idle()
    with pytest.raises(RunFailed) as info:
        await handle.result()
    return f"{info.value.error.type}: {info.value.error.message}"


async def test_a_bad_match_fails_the_run_with_a_clear_error() -> None:
    async with FlowTestEnv() as env:
        assert "InvalidArgument: " in await failure(env, bad_match, ["order_id"])
        assert "match field" in await failure(env, bad_match, {"": 1})
        assert "SerializationError: " in await failure(env, bad_match_value)


def test_wait_for_event_outside_a_run_raises() -> None:
    with pytest.raises(NotInRunError):
        wait_for_event("x")  # type: ignore[unused-coroutine]


# -- partitions --------------------------------------------------------------------------


async def test_runs_in_several_partitions_get_their_events(partitioned: RedisStore) -> None:
    async with FlowTestEnv(store=partitioned) as env:
        runs = [await waiting(env, await_payment, f"o-{i}") for i in range(12)]
        assert len({partitioned.keys.partition(r) for r in runs}) > 1
        shared = [await waiting(env, await_any) for _ in range(6)]
        assert len({partitioned.keys.partition(r) for r in shared}) > 1
        for i, run in enumerate(runs):
            got = await env.client.send_event("payment.succeeded", {"order_id": f"o-{i}"})
            assert got == [run]
        assert await env.client.send_event("ping", {"n": 1}, event_id="p") == sorted(shared)
        assert await env.client.send_event("ping", {"n": 1}, event_id="p") == []
        await env.run_until_idle()
        for i, run in enumerate(runs):
            assert await env.client.handle(run).result() == {"order_id": f"o-{i}"}
        for run in shared:
            assert await env.client.handle(run).result() == {"n": 1}


async def test_a_send_cut_short_is_completed_by_sending_it_again(partitioned: RedisStore) -> None:
    async with FlowTestEnv(store=partitioned) as env:
        runs = sorted([await waiting(env, await_any) for _ in range(6)])
        # a sender that crashed after reading the index and delivering to one run
        [(token, first), *_] = await partitioned.event_listeners(
            tokens_for("ping", {"v": "x"}, await partitioned.event_shapes("ping"))
        )
        reply = await partitioned.deliver_event(
            first, token, event_mailbox(token), '{"v":"x"}', f"~event:{token}:e-1",
            now=env.clock.time(), event_data="{}",
        )  # fmt: skip
        assert reply is EventDelivered.DELIVERED
        again = await env.client.send_event("ping", {"v": "x"}, event_id="e-1")
        assert again == [r for r in runs if r != first]
        await env.run_until_idle()
        for run in runs:
            assert await env.client.handle(run).result() == {"v": "x"}
