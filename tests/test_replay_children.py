"""Replaying and forking a parent: what happens to the child runs its source started.

By default (``children="reuse"``) a child that completed is not run again: the
copy reuses its recorded result, as it reuses a completed step's. A child that
did not complete, or every child with ``children="replay"``, is replayed as a
new child of the copy (its own recorded steps reused under their policies);
``children="rerun"`` starts every child afresh.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from sdk import RunStatus, current_step, flow, run_child, start_child, step, wait_for
from sdk.errors import InvalidArgument, RunFailed
from stores.redis import RedisStore
from testing import FlowTestEnv

RAN: Counter[str] = Counter()
KEYS: list[str] = []  # the idempotency key of every charge made
BROKEN: dict[str, bool] = {"pack": False}


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> None:
    RAN.clear()
    KEYS.clear()
    BROKEN["pack"] = False


@step(name="tests.rc.charge")
async def charge(line: str) -> str:
    RAN[f"charge {line}"] += 1
    KEYS.append(current_step().idempotency_key)
    return f"charged {line}"


@step(name="tests.rc.quote", replay="reexecute")  # a read: harmless to repeat
async def quote(line: str) -> int:
    RAN[f"quote {line}"] += 1
    return 100 * len(line)


@step(name="tests.rc.pack")
async def pack(line: str) -> str:
    RAN[f"pack {line}"] += 1
    if BROKEN["pack"]:
        raise RuntimeError("the packing station is down")
    return f"packed {line}"


@flow(name="tests.rc.line")
async def line_flow(line: str) -> str:
    cents = await quote(line)
    charged = await charge(line)
    return f"{charged} ({cents}) {await pack(line)}"


@step(name="tests.rc.total")
async def total(lines: list[str]) -> str:
    RAN["total"] += 1
    return "; ".join(lines)


@flow(name="tests.rc.order")
async def order_flow(lines: list[str]) -> str:
    done = await asyncio.gather(*(run_child(line_flow, line) for line in lines))
    return await total(list(done))


@flow(name="tests.rc.out_of_order")
async def out_of_order_flow(lines: list[str]) -> list[str]:
    handles = [await start_child(line_flow, line) for line in lines]
    return [await h.result() for h in reversed(handles)]  # awaited last first


@flow(name="tests.rc.nested")
async def nested_flow(lines: list[str]) -> str:
    return str(await run_child(order_flow, lines))


@flow(name="tests.rc.waiting_line")
async def waiting_line_flow(line: str) -> str:
    charged = await charge(line)
    return f"{charged}, {await wait_for('shipped')}"


@flow(name="tests.rc.waiting_order")
async def waiting_order_flow(line: str) -> str:
    handle = await start_child(waiting_line_flow, line)
    return str(await handle.result())


async def ran_order(env: FlowTestEnv, run_id: str = "order-1") -> str:
    handle = await env.start(order_flow, ["cup", "mug"], run_id=run_id)
    await env.run_until_idle()
    result: str = await handle.result()
    RAN.clear()
    KEYS.clear()
    return result


async def test_replaying_a_parent_reuses_its_completed_children(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        expected = await ran_order(env)

        copy = await env.client.replay("order-1", actor="ops")
        await env.run_until_idle()

        assert await copy.result() == expected
        assert RAN == {}  # no step of the parent or of a child ran again
        assert await env.client.list_runs(parent_run_id=copy.run_id) == []  # no new child
        reused = [
            (e.step_key, e.data)
            for e in await env.client.events(copy.run_id)
            if e.type == "side_effect.reused"
        ]
        assert reused == [
            ("~child:tests.rc.line#1",
             {"child_run_id": "order-1~child:tests.rc.line#1", "source_run_id": "order-1"}),
            ("~child:tests.rc.line#2",
             {"child_run_id": "order-1~child:tests.rc.line#2", "source_run_id": "order-1"}),
            ("tests.rc.total#1", {"idempotency_key": "order-1:tests.rc.total#1",
                                  "source_run_id": "order-1"}),
        ]  # fmt: skip


async def test_replaying_with_children_replay_replays_each_child_under_its_policies(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store) as env:
        expected = await ran_order(env)

        copy = await env.client.replay("order-1", children="replay")
        await env.run_until_idle()

        assert await copy.result() == expected
        # in each new child the read ran again; the charge and the packing were reused
        assert RAN == {"quote cup": 1, "quote mug": 1}
        kids = await env.client.list_runs(parent_run_id=copy.run_id)
        assert sorted((k.source_run_id, k.status) for k in kids) == [
            ("order-1~child:tests.rc.line#1", RunStatus.COMPLETED),
            ("order-1~child:tests.rc.line#2", RunStatus.COMPLETED),
        ]
        assert {e.type for e in await env.client.events(kids[0].run_id)} >= {
            "run.replayed", "side_effect.reused",
        }  # fmt: skip


async def test_replaying_with_children_rerun_runs_every_child_again(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        expected = await ran_order(env)

        copy = await env.client.replay("order-1", children="rerun")
        await env.run_until_idle()

        assert await copy.result() == expected
        assert {f"{what} {line}": 1 for what in ("quote", "charge", "pack")
                       for line in ("cup", "mug")} == RAN  # fmt: skip
        assert len(await env.client.list_runs(parent_run_id=copy.run_id)) == 2


async def test_a_child_that_failed_in_the_source_is_replayed_and_its_steps_reused(
    store: RedisStore,
) -> None:
    BROKEN["pack"] = True
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(order_flow, ["cup"], run_id="order-2")
        await env.run_until_idle()
        with pytest.raises(RunFailed, match="ChildFailed"):
            await handle.result()
        BROKEN["pack"] = False  # fixed
        RAN.clear()
        KEYS.clear()

        copy = await env.client.replay("order-2")
        await env.run_until_idle()

        assert await copy.result() == "charged cup (300) packed cup"
        # the failed child is replayed: its charge is reused, the failed packing runs
        # again; the parent's total, never reached in the source, runs
        assert RAN == {"quote cup": 1, "pack cup": 1, "total": 1}
        (kid,) = await env.client.list_runs(parent_run_id=copy.run_id)
        assert kid.source_run_id == "order-2~child:tests.rc.line#1"


async def test_handles_awaited_out_of_order_each_get_their_own_childs_result() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(out_of_order_flow, ["cup", "mug", "bowl"], run_id="ooo")
        await env.run_until_idle()
        expected = await handle.result()
        RAN.clear()

        copy = await env.client.replay("ooo")
        await env.run_until_idle()

        assert await copy.result() == expected
        assert RAN == {}


@pytest.mark.parametrize("children", ["reuse", "replay"])
async def test_grandchildren_follow_the_same_option(children: str) -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(nested_flow, ["cup"], run_id="top")
        await env.run_until_idle()
        expected = await handle.result()
        RAN.clear()

        copy = await env.client.replay("top", children=children)
        await env.run_until_idle()

        assert await copy.result() == expected
        # replayed all the way down: only the grandchild's read runs again
        assert ({} if children == "reuse" else {"quote cup": 1}) == RAN


async def test_a_fork_of_a_parent_waiting_on_a_child_replays_the_child(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(waiting_order_flow, "cup", run_id="order-3")
        await env.run_until_idle()
        assert await handle.status() == RunStatus.WAITING_FOR_SIGNAL  # on its child

        fork = await env.client.fork("order-3")  # its head: the child has not ended
        await env.run_until_idle()

        # the fork's handle names a new child of its own, a replay of the source's
        (kid,) = await env.client.list_runs(parent_run_id=fork.run_id)
        assert (kid.source_run_id, kid.status) == (
            "order-3~child:tests.rc.waiting_line#1", RunStatus.WAITING_FOR_SIGNAL,
        )  # fmt: skip
        assert RAN == {"charge cup": 1}  # the child's charge was reused
        await env.client.signal(kid.run_id, "shipped", "by boat")
        await env.run_until_idle()
        assert await fork.result() == "charged cup, by boat"
        assert KEYS == ["order-3~child:tests.rc.waiting_line#1:tests.rc.charge#1"]

        # the source is untouched: its own child still reports to it
        await env.client.signal("order-3~child:tests.rc.waiting_line#1", "shipped", "by air")
        await env.run_until_idle()
        assert await handle.result() == "charged cup, by air"


async def test_a_fork_between_a_start_and_its_result_reuses_the_child_that_completed(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(waiting_order_flow, "cup", run_id="order-4")
        await env.run_until_idle()
        await env.client.signal("order-4~child:tests.rc.waiting_line#1", "shipped", "by air")
        await env.run_until_idle()
        assert await handle.result() == "charged cup, by air"
        waiting = [c for c in await env.client.checkpoints("order-4")
                   if c.kind == "waiting_for_signal"]  # fmt: skip
        RAN.clear()

        # from where it waited on the child: the child has completed since
        fork = await env.client.fork("order-4", checkpoint_id=waiting[0].checkpoint_id)
        await env.run_until_idle()

        assert await fork.result() == "charged cup, by air"
        assert RAN == {}
        assert await env.client.list_runs(parent_run_id=fork.run_id) == []


async def test_an_unknown_children_option_is_refused_and_creates_nothing() -> None:
    async with FlowTestEnv() as env:
        await ran_order(env)
        before = await env.client.list_runs()
        for call in (env.client.replay, env.client.fork):
            with pytest.raises(InvalidArgument, match="children must be one of"):
                await call("order-1", children="all")
        assert await env.client.list_runs() == before


SUFFIX: dict[str, str] = {"line": ""}


@flow(name="tests.rc.changing")
async def changing_flow(line: str) -> str:
    return str(await run_child(line_flow, line + SUFFIX["line"]))


async def test_a_reused_child_started_with_other_arguments_fails_with_idempotency_conflict() -> (
    None
):
    SUFFIX["line"] = ""
    async with FlowTestEnv() as env:
        await env.start(changing_flow, "cup", run_id="order-5")
        await env.run_until_idle()
        RAN.clear()
        SUFFIX["line"] = "-large"  # the code now starts the child with other arguments

        copy = await env.client.replay("order-5")
        await env.run_until_idle()

        with pytest.raises(RunFailed, match="IdempotencyConflict") as info:
            await copy.result()
        assert "order-5~child:tests.rc.line#1" in str(info.value)
        assert RAN == {}  # neither reused nor run again
    SUFFIX["line"] = ""


async def test_a_child_deleted_since_is_started_afresh(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        expected = await ran_order(env)
        await env.client.delete("order-1~child:tests.rc.line#1")

        copy = await env.client.replay("order-1")
        await env.run_until_idle()

        assert await copy.result() == expected
        assert RAN == {"quote cup": 1, "charge cup": 1, "pack cup": 1}  # the mug is reused
