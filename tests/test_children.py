"""Child flows: start_child / run_child / ChildHandle, their ends, lineage and cascades."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, cast

import attrs
import pytest

from sdk import (
    ChildHandle,
    Client,
    RunStatus,
    flow,
    run_child,
    sleep,
    start_child,
    step,
    wait_for,
)
from sdk._core._keys import child_run_id
from sdk.errors import (
    ChildFailed,
    IdempotencyConflict,
    InvalidArgument,
    NotInRunError,
    RunCanceled,
    RunFailed,
)
from stores.redis import RedisStore
from testing import FlowTestEnv
from tests.conftest import PrivateRedis

RUNS: Counter[str] = Counter()


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> None:
    RUNS.clear()


@attrs.frozen
class Quote:
    item: str
    cents: int


@step(name="tests.children.price")
async def price(item: str) -> Quote:
    RUNS[f"price {item}"] += 1
    if item == "bad":
        raise ValueError(f"no price for {item!r}")
    return Quote(item, 100 * len(item))


@flow(name="tests.children.quote")
async def quote(item: str) -> Quote:
    return await price(item)


@flow(name="tests.children.cart")
async def cart(items: list[str]) -> int:
    quotes = await asyncio.gather(*(run_child(quote, i) for i in items))
    RUNS["cart body"] += 1
    return sum(q.cents for q in quotes)


async def test_a_fan_out_of_children_returns_their_typed_results(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(cart, ["a", "bb", "ccc"], run_id="cart-1")
        await env.run_until_idle()
        assert await handle.result() == 600
        kids = await env.client.list_runs(parent_run_id="cart-1")
        assert sorted(k.run_id for k in kids) == [
            "cart-1~child:tests.children.quote#1",
            "cart-1~child:tests.children.quote#2",
            "cart-1~child:tests.children.quote#3",
        ]
        for k in kids:
            assert k.status == RunStatus.COMPLETED
            assert (k.parent_run_id, k.tree_root_run_id) == ("cart-1", "cart-1")
            assert k.trace_id == "cart-1"  # the tree shares the parent's trace
        top = await env.client.get("cart-1")
        assert (top.parent_run_id, top.tree_root_run_id) == (None, None)
        assert await env.client.list_runs(parent_run_id="nobody") == []
        assert await env.client.list_runs(RunStatus.FAILED, parent_run_id="cart-1") == []
        events = await env.client.events("cart-1")
        started = [e.data for e in events if e.type == "child.started"]
        assert [d["child_run_id"] for d in started] == sorted(k.run_id for k in kids)
        assert all(d["created"] for d in started)
        # the child's end is in the parent's log, the parent in the child's
        ends = [e.data for e in events if e.type == "signal.received"]
        assert {d["child_run_id"] for d in ends} == {k.run_id for k in kids}
        created = (await env.client.events(kids[0].run_id))[0]
        assert created.data["parent_run_id"] == "cart-1"
    assert RUNS == {"price a": 1, "price bb": 1, "price ccc": 1, "cart body": 1}


@flow(name="tests.children.careful")
async def careful(items: list[str]) -> list[str]:
    out = []
    for item in items:
        try:
            q = await run_child(quote, item)
            out.append(f"{q.item}={q.cents}")
        except ChildFailed as exc:
            out.append(f"{item} failed: {exc.error.type}: {exc.error.message} @ {exc.run_id}")
    await sleep(60)  # parks: the next activation replays all of the above
    RUNS["careful end"] += 1
    return out


async def test_a_failed_child_raises_child_failed_identically_on_replay(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(careful, ["a", "bad", "cc"], run_id="careful")
        await env.run_until_idle()
        await env.advance(60)
        bad = "careful~child:tests.children.quote#2"
        assert await handle.result() == [
            "a=100",
            f"bad failed: builtins:ValueError: no price for 'bad' @ {bad}",
            "cc=200",
        ]
        rec = await env.client.get(bad)
        assert rec.status == RunStatus.FAILED and rec.error is not None
    assert RUNS["price bad"] == 1 and RUNS["careful end"] == 1


async def test_an_uncaught_child_failure_fails_the_parent(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(cart, ["a", "bad"], run_id="cart-bad")
        await env.run_until_idle()
        with pytest.raises(RunFailed) as info:
            await handle.result()
        assert info.value.error.type == "sdk.errors:ChildFailed"
        assert "cart-bad~child:tests.children.quote#2" in info.value.error.message
        assert issubclass(ChildFailed, RunFailed)


@flow(name="tests.children.hold")
async def hold(name: str) -> str:
    RUNS[f"hold {name}"] += 1
    return str(await wait_for("go"))


@flow(name="tests.children.tree")
async def tree(depth: int) -> str:
    kept = await start_child(hold, f"kept{depth}")
    left = await start_child(hold, f"left{depth}", parent_close="abandon")
    sub = await start_child(tree, depth - 1) if depth > 0 else None
    parts = [await kept.result(), await left.result()]
    if sub is not None:
        parts.append(await sub.result())
    return ",".join(parts)


async def test_canceling_a_parent_cancels_its_children_recursively_but_not_abandoned_ones(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store) as env:
        await env.start(tree, 1, run_id="top")
        await env.run_until_idle()
        sub = "top~child:tests.children.tree#1"  # (keys count calls per flow name)
        assert {r.run_id for r in await env.client.list_runs(parent_run_id=sub)} == {
            f"{sub}~child:tests.children.hold#1",
            f"{sub}~child:tests.children.hold#2",
        }
        assert (await env.client.get(f"{sub}~child:tests.children.hold#1")).tree_root_run_id == (
            "top"
        )
        await env.client.cancel("top", reason="customer left", grace=0)
        await env.run_until_idle()
        status = {
            r.run_id: r.status
            for r in await env.client.list_runs(limit=100)
            if r.run_id.startswith("top")
        }
        assert status == {
            "top": RunStatus.CANCELED,
            "top~child:tests.children.hold#1": RunStatus.CANCELED,
            "top~child:tests.children.hold#2": RunStatus.WAITING_FOR_SIGNAL,  # abandoned
            sub: RunStatus.CANCELED,
            f"{sub}~child:tests.children.hold#1": RunStatus.CANCELED,
            f"{sub}~child:tests.children.hold#2": RunStatus.WAITING_FOR_SIGNAL,
        }
        kept = await env.client.get("top~child:tests.children.hold#1")
        assert kept.reason == "parent run 'top' was canceled: customer left"
        # a request, as Client.cancel makes (the child may clean up); it names the parent
        kept_log = await env.client.events(kept.run_id)
        asked = [e.data for e in kept_log if e.type == "run.cancel_requested"]
        assert asked[0]["parent_run_id"] == "top" and asked[0]["reason"] == kept.reason
        assert kept_log[-1].type == "run.canceled"
        logged = [e.data for e in await env.client.events("top") if e.type == "child.canceled"]
        assert {d["child_run_id"] for d in logged} == {"top~child:tests.children.hold#1", sub}
        # the abandoned child runs on, and ends on its own
        await env.client.signal("top~child:tests.children.hold#2", "go", "done")
        await env.run_until_idle()
        assert (await env.client.get("top~child:tests.children.hold#2")).result == "done"


async def test_a_canceled_child_raises_run_canceled_in_its_parent(store: RedisStore) -> None:
    @flow(name="tests.children.one_hold")
    async def one_hold() -> str:
        try:
            return cast(str, await run_child(hold, "x"))
        except RunCanceled as exc:
            return f"canceled: {exc.reason}"

    async with FlowTestEnv(store=store) as env:
        handle = await env.start(one_hold, run_id="oh")
        await env.run_until_idle()
        await env.client.cancel("oh~child:tests.children.hold#1", reason="not needed", grace=0)
        await env.run_until_idle()
        assert await handle.result() == "canceled: not needed"


@flow(name="tests.children.twice")
async def twice() -> list[Any]:
    h = await start_child(quote, "abc")
    first = await h.result()
    second = await h.result()  # the same outcome, without another wait
    return [h.run_id, first == second, isinstance(h, ChildHandle), repr(h)]


async def test_a_handle_gives_the_same_result_twice_and_knows_its_run(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(twice, run_id="tw")
        await env.run_until_idle()
        cid = "tw~child:tests.children.quote#1"
        assert await handle.result() == [
            cid,
            True,
            True,
            f"ChildHandle({cid!r}, flow='tests.children.quote')",
        ]


@flow(name="tests.children.named")
async def named(child_id: str) -> str:
    q = await run_child("tests.children.quote", "zz", run_id=child_id, priority=-5, queue="default")
    return str(q)


async def test_a_child_by_flow_name_with_its_own_run_id(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(named, "my-child", run_id="nm")
        await env.run_until_idle()
        assert await handle.result() == str(Quote("zz", 200))
        rec = await env.client.get("my-child")
        assert (rec.parent_run_id, rec.priority) == ("nm", -5)
        # the id is taken by a run with other arguments: the start fails, journaled
        other = await env.start(named, "my-child", run_id="nm2")
        await env.client.delete("my-child")
        await env.start(quote, "other", run_id="my-child")
        await env.run_until_idle()
        with pytest.raises(RunFailed) as info:
            await other.result()
        assert info.value.error.type == "sdk.errors:IdempotencyConflict"
        assert "'my-child' already exists" in info.value.error.message
        assert IdempotencyConflict.__name__ in info.value.error.type


async def test_start_child_checks_its_arguments_and_where_it_is_called(store: RedisStore) -> None:
    with pytest.raises(NotInRunError):
        await start_child(quote, "a")

    @step(name="tests.children.in_step")
    async def in_step() -> None:
        await start_child(quote, "a")

    @flow(name="tests.children.bad_args")
    async def bad_args(which: str) -> str:
        try:
            if which == "close":
                await start_child(quote, "a", parent_close="kill")
            elif which == "id":
                await start_child(quote, "a", run_id="x~g1")
            elif which == "flow":
                await start_child(print, "a")
            elif which == "step":
                await in_step()
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        return "ok"

    async with FlowTestEnv(store=store) as env:
        for which in ("close", "id", "flow"):
            await env.start(bad_args, which, run_id=f"ba-{which}")
        await env.start(bad_args, "step", run_id="ba-step")
        await env.run_until_idle()
        close = await env.client.get("ba-close")
        assert close.result.startswith("InvalidArgument: start_child(): parent_close")
        assert "'~g<number>'" in (await env.client.get("ba-id")).result
        assert "is not a @flow function" in (await env.client.get("ba-flow")).result
        in_a_step = (await env.client.get("ba-step")).result
        assert "start_child() cannot be used inside a @step" in in_a_step
    assert InvalidArgument.__name__ == "InvalidArgument"


def test_default_child_ids_are_deterministic_and_bounded() -> None:
    assert child_run_id("p", "~child:f#2") == "p~child:f#2"
    assert child_run_id("p~g3", "~child:f#1") == "p~g3~child:f#1"
    long = child_run_id("p" * 250, "~child:f#1")
    assert len(long) <= 256 and long == child_run_id("p" * 250, "~child:f#1")
    assert long != child_run_id("p" * 250, "~child:f#2")


class _DiesAfterStart(RedisStore):
    """A store whose first journal write of started children fails (the activation
    stops, as a worker killed between the two writes would)."""

    failed = False

    async def record_many(self, *args: Any, **kwargs: Any) -> bool:
        if not self.failed:
            self.failed = True
            raise ConnectionError("the worker died before journaling its children")
        return await super().record_many(*args, **kwargs)


async def test_an_activation_stopped_between_start_and_journal_starts_no_child_twice(
    store: RedisStore,
) -> None:
    flaky = _DiesAfterStart(store.client, prefix=store.keys.prefix)
    async with FlowTestEnv(store=flaky, lease_ttl=5) as env:
        handle = await env.start(cart, ["a", "bb"], run_id="flaky")
        await env.run_until_idle()
        # both children were created; the parent holds no record of them yet
        assert len(await env.client.list_runs(parent_run_id="flaky")) == 2
        await env.advance(6)  # its lease expires: the next activation starts them again
        assert await handle.result() == 300
        kids = await env.client.list_runs(parent_run_id="flaky")
        assert len(kids) == 2
        started = [e.data for e in await env.client.events("flaky") if e.type == "child.started"]
        assert [d["created"] for d in started] == [False, False]  # found, not made again
    assert RUNS["price a"] == RUNS["price bb"] == 1


async def test_children_on_other_partitions(partitioned: RedisStore) -> None:
    async with FlowTestEnv(store=partitioned) as env:
        items = [f"i{n}" for n in range(24)]
        handle = await env.start(cart, items, run_id="spread")
        await env.run_until_idle()
        assert await handle.result() == sum(100 * len(i) for i in items)
        kids = await env.client.list_runs(parent_run_id="spread")
        keys = partitioned.keys
        assert len({keys.partition(k.run_id) for k in kids}) > 1
        assert len(kids) == 24


@flow(name="tests.children.wide")
async def wide(n: int) -> int:
    quotes = await asyncio.gather(*(run_child(quote, f"w{i}") for i in range(n)))
    return len(quotes)


async def test_a_fan_out_of_1000_children_starts_them_in_one_batch(store: RedisStore) -> None:
    calls: Counter[str] = Counter()

    class Counting(RedisStore):
        async def create_runs(self, *a: Any, **kw: Any) -> Any:
            calls["create_runs"] += 1
            return await super().create_runs(*a, **kw)

        async def record_many(self, *a: Any, **kw: Any) -> Any:
            calls["record_many"] += 1
            return await super().record_many(*a, **kw)

    counting = Counting(store.client, prefix=store.keys.prefix)
    n = 100 if store.describe()["store"] == "memory://" else 1000  # (fakeredis: ~10 ms a child)
    async with FlowTestEnv(store=counting) as env:
        handle = await env.start(wide, n, run_id="wide")
        await env.run_until_idle()
        assert await handle.result() == n
    assert calls == {"create_runs": 1, "record_many": 1}


async def test_current_run_client_is_a_client_on_the_workers_store(store: RedisStore) -> None:
    from sdk import current_run

    @step(name="tests.children.use_client")
    async def use_client() -> str:
        client = current_run().client
        assert isinstance(client, Client)
        h = await client.start(quote, "side", run_id="unrelated")
        return h.run_id

    @flow(name="tests.children.uses_client")
    async def uses_client() -> str:
        return await use_client()

    async with FlowTestEnv(store=store) as env:
        handle = await env.start(uses_client, run_id="uc")
        await env.run_until_idle()
        assert await handle.result() == "unrelated"
        rec = await env.client.get("unrelated")
        assert rec.parent_run_id is None  # a client's run is not a child


async def test_a_fan_out_on_a_server_that_lost_its_scripts(private_redis: PrivateRedis) -> None:
    store = RedisStore.from_url(private_redis.url, prefix="flushed")
    try:
        async with FlowTestEnv(store=store) as env:
            handle = await env.start(wide, 20, run_id="flushed")
            await store.client.script_flush()  # a restarted or flushed server
            await env.run_until_idle()
            assert await handle.result() == 20
    finally:
        await store.close()


@step(name="tests.children.undo")
async def undo(what: str) -> str:
    RUNS[f"undo {what}"] += 1
    return f"undone {what}"


@flow(name="tests.children.compensating")
async def compensating(items: list[str]) -> str:
    handles = [await start_child(hold, item) for item in items]
    try:
        return ",".join(await asyncio.gather(*(h.result() for h in handles)))
    except asyncio.CancelledError:
        await undo("all")  # compensation, journaled; then the children are canceled
        raise


async def test_a_parent_canceled_while_it_waits_for_children_cleans_up_then_cascades(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(compensating, ["x", "y"], run_id="comp")
        await env.run_until_idle()
        await env.client.cancel("comp", reason="stop", grace=60)
        await env.run_until_idle()
        with pytest.raises(RunCanceled):
            await handle.result()
        kids = await env.client.list_runs(parent_run_id="comp")
        assert {k.status for k in kids} == {RunStatus.CANCELED}
        assert {k.reason for k in kids} == {"parent run 'comp' was canceled: stop"}
        await env.advance(120)  # nothing runs again
    assert RUNS["undo all"] == 1  # once, though the flow body ran in several activations
