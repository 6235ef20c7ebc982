"""continue_as_new: a run that goes on with new arguments and an empty journal."""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

import pytest

from sdk import continue_as_new, current_step, flow, step, wait_for
from sdk.errors import InvalidArgument, NotInRunError, RunFailed
from stores import Store
from stores.redis import RedisStore
from testing import FlowTestEnv

RUNS: Counter[str] = Counter()
KEYS: list[str] = []


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> None:
    RUNS.clear()
    KEYS.clear()


@step(name="tests.can.add")
async def add(total: int, n: int) -> int:
    RUNS[f"add {n}"] += 1
    KEYS.append(current_step().idempotency_key)
    return total + n


@flow(name="tests.can.counter")
async def counter(n: int, total: int = 0, until: int = 50) -> int:
    total = await add(total, n)
    total = await add(total, 1000)
    if n + 1 >= until:
        return total
    await continue_as_new(n + 1, total=total, until=until)
    raise AssertionError("continue_as_new returned")


async def _journal_len(store: Store, run_id: str) -> int:
    lin = await store.read_lineage(run_id)
    assert lin is not None
    return len(lin.journal)


async def test_a_loop_that_continues_50_times_keeps_a_bounded_journal(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(counter, 0, run_id="loop")
        await env.run_until_idle()
        # the original handle follows the chain to the last generation's result
        assert await handle.result() == sum(range(50)) + 50 * 1000
        assert await _journal_len(store, "loop") == 2
        rec = await env.client.get("loop")
        assert rec.status == "completed"
        for g in (0, 17, 48):
            assert await _journal_len(store, f"loop~g{g}") == 2
            old = await env.client.get(f"loop~g{g}")
            assert old.status == "completed"
            assert old.reason == "continued_as_new"
            assert old.flow == "tests.can.counter"
        assert await env.store.get_run("loop~g49") is None
        # a handle of an archived generation follows the chain too
        assert await env.client.handle("loop~g3").result() == await handle.result()
        listed = {r.run_id for r in await env.client.list_runs(flow=counter, limit=1000)}
        assert listed == {"loop", *(f"loop~g{g}" for g in range(49))}
        events = await env.client.events("loop", limit=10_000)
        moves = [e for e in events if e.type == "run.continued_as_new"]
        assert len(moves) == 49
        assert moves[0].data == {"generation": 1, "archived_as": "loop~g0"}
        last = (await env.client.events("loop~g3"))[-1]
        assert last.type == "run.continued_as_new"
        assert last.data == {"generation": 3, "continued_as": "loop"}
    assert RUNS["add 0"] == 1 and RUNS["add 49"] == 1 and RUNS["add 1000"] == 50
    # each generation's steps have idempotency keys of their own
    assert len(set(KEYS)) == len(KEYS) == 100


async def test_an_archived_generation_keeps_its_arguments_and_checkpoints() -> None:
    async with FlowTestEnv() as env:
        await env.start(counter, 0, until=3, run_id="short")
        await env.run_until_idle()
        g1 = await env.store.get_run("short~g1")
        assert g1 is not None
        fd = env.client._core.flow_def(counter)
        assert fd.decode_args(g1.args, env.client.serializer)[0] == [1]  # type: ignore[union-attr]
        kinds = [c.kind for c in await env.client.checkpoints("short~g1")]
        assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
        kinds = [c.kind for c in await env.client.checkpoints("short")]
        assert kinds[0] == "run_started" and kinds[-1] == "run_finished"


@flow(name="tests.can.listener")
async def listener(seen: list[Any]) -> list[Any]:
    payload = await wait_for("item")
    seen = [*seen, payload]
    if payload == "stop":
        return seen
    await continue_as_new(seen)
    return []


async def test_signals_reach_the_next_generation(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(listener, [], run_id="inbox")
        await env.run_until_idle()
        assert await env.client.signal("inbox", "item", 1) is True
        # two signals land before the next generation runs: both stay queued for it
        await env.client.signal("inbox", "item", 2)
        await env.client.signal("inbox", "item", 3, dedup_id="d3")
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_signal"
        # dedup ids belong to the logical run: a repeat across generations is dropped
        assert await env.client.signal("inbox", "item", 3, dedup_id="d3") is False
        await env.client.signal("inbox", "item", "stop")
        await env.run_until_idle()
        assert await handle.result() == [1, 2, 3, "stop"]
        assert (await env.client.get("inbox~g2")).status == "completed"


async def test_a_crash_before_the_continue_replays_to_the_same_point() -> None:
    async with FlowTestEnv() as env:
        env.crash_at("tests.can.add#2", "after")  # the last step before the continue
        handle = await env.start(counter, 0, until=2, run_id="crashy")
        await env.run_until_idle()
        assert await env.store.get_run("crashy~g0") is None
        await env.advance(60)  # the lease expires; the run recovers
        await env.run_until_idle()
        assert await handle.result() == 0 + 1 + 2000
        assert RUNS["add 1000"] == 3  # the cut-off attempt ran again, once
        assert await env.store.get_run("crashy~g1") is None
        assert await _journal_len(env.store, "crashy") == 2


async def test_a_store_outage_at_the_continue_write_loses_and_duplicates_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with FlowTestEnv() as env:
        real = env.store.continue_as_new
        calls: list[str] = []

        async def down_once(run_id: str, *args: Any) -> Any:
            calls.append(run_id)
            if len(calls) == 1:
                raise ConnectionError("redis went away")
            return await real(run_id, *args)

        monkeypatch.setattr(env.store, "continue_as_new", down_once)
        handle = await env.start(counter, 0, until=2, run_id="outage")
        await env.run_until_idle()
        assert await env.store.get_run("outage~g0") is None
        await env.advance(60)
        await env.run_until_idle()
        assert await handle.result() == 1 + 2000
        assert RUNS == {"add 0": 1, "add 1": 1, "add 1000": 2}
        assert len(calls) == 2


@step(name="tests.can.tail")
async def tail(total: int) -> int:
    RUNS["tail"] += 1
    return total * 10


@flow(name="tests.can.phases")
async def phases(phase: int, total: int = 0) -> int:
    if phase == 0:
        total = await add(total, 7)
        await continue_as_new(1, total)
    return await tail(total)


async def test_a_crash_in_the_next_generation_replays_that_generation_only() -> None:
    async with FlowTestEnv() as env:
        env.crash_at("tests.can.tail#1", "after")
        handle = await env.start(phases, 0, run_id="later")
        await env.run_until_idle()
        assert await handle.status() == "running"
        assert (await env.client.get("later~g0")).status == "completed"
        await env.advance(60)
        await env.run_until_idle()
        assert await handle.result() == 70
        assert RUNS == {"add 7": 1, "tail": 2}


@flow(name="tests.can.bad")
async def bad_args(n: int) -> int:
    if n == 0:
        with contextlib.suppress(InvalidArgument):
            await continue_as_new(1, 2, 3)
        try:
            await continue_as_new(object())
        except Exception as exc:
            return -len(type(exc).__name__)
    return n


async def test_arguments_are_checked_like_a_start() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(bad_args, 0)
        await env.run_until_idle()
        assert await handle.result() == -len("SerializationError")
        assert await env.store.get_run(f"{handle.run_id}~g0") is None


async def test_continue_as_new_outside_a_flow_is_refused() -> None:
    with pytest.raises(NotInRunError):
        await continue_as_new(1)


@step(name="tests.can.inner")
async def inner() -> None:
    await continue_as_new(1)


@flow(name="tests.can.from_step")
async def from_step() -> None:
    await inner()


async def test_continue_as_new_inside_a_step_is_refused() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(from_step)
        await env.run_until_idle()
        with pytest.raises(RunFailed, match="NotInRunError"):
            await handle.result()


async def test_replay_and_fork_of_a_continued_run(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        await env.start(counter, 0, until=3, run_id="src")
        await env.run_until_idle()
        assert RUNS["add 1000"] == 3
        # replaying the run replays its last generation (its arguments, its journal)
        replayed = await env.client.replay("src")
        await env.run_until_idle()
        assert await replayed.result() == 0 + 1 + 2 + 3000
        # an archived generation is a run of its own: fork it, and the fork
        # continues as new under its own id
        forked = await env.client.fork("src~g0")
        await env.run_until_idle()
        assert await forked.result() == 0 + 1 + 2 + 3000
        assert (await env.client.get(f"{forked.run_id}~g0")).reason == "continued_as_new"
        # recorded steps were reused, not run again; the fork's next generations ran theirs
        assert RUNS["add 0"] == 1


@flow(name="tests.can.kept", retention=60)
async def kept(n: int) -> int:
    if n < 2:
        await continue_as_new(n + 1)
    return n


async def test_archived_generations_are_deleted_after_the_flow_retention() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(kept, 0, run_id="kept")
        await env.run_until_idle()
        assert await handle.result() == 2
        assert await env.store.get_run("kept~g1") is not None
        await env.advance(61)
        await env.run_until_idle()
        assert await env.store.get_run("kept~g0") is None
        assert await env.store.get_run("kept~g1") is None


async def test_a_run_claimed_again_before_its_last_activation_ended_stays_tracked(
    store: RedisStore,
) -> None:
    # A continue re-queues the run before its activation's task is done: a poll
    # in between (another run finishing, on a busy worker) claims the next
    # generation. The old task's end used to untrack the new activation: its
    # lease was no longer renewed, its slot not counted, and run_until_idle
    # could return with it still running. Here the poll is made to fall there.
    async with FlowTestEnv(store=store) as env:
        tracked: list[bool] = []
        continue_as_new_call = env.store.continue_as_new

        async def continue_then_poll(run_id: str, *args: Any, **kwargs: Any) -> Any:
            tracked.append(run_id in env.worker._inflight)  # its activation is running
            done = await continue_as_new_call(run_id, *args, **kwargs)
            await env.worker._poller.poll()  # claims the next generation at once
            return done

        env.store.continue_as_new = continue_then_poll  # type: ignore[method-assign]
        handle = await env.start(counter, 0, until=4, run_id="reclaimed")
        await env.run_until_idle()
        assert await handle.result(timeout=2) == 0 + 1 + 2 + 3 + 4000
        assert tracked == [True] * 3  # one per continue (generations 0 to 2)
        assert not env.worker._inflight


async def test_archived_generations_are_readable_on_a_partitioned_store(
    partitioned: RedisStore,
) -> None:
    # An archive is written by the script that runs in its run's partition; its id
    # ("<run>~g<n>") must lead readers there, whatever it hashes to on its own.
    async with FlowTestEnv(store=partitioned) as env:
        for run_id in ("a", "b", "d", "e"):
            handle = await env.start(counter, 0, until=3, run_id=run_id)
            await env.run_until_idle()
            assert await handle.result() == 3 + 3 * 1000
            for g in (0, 1):
                old = await env.client.get(f"{run_id}~g{g}")
                assert (old.status, old.reason) == ("completed", "continued_as_new")
                assert partitioned.keys.partition(f"{run_id}~g{g}") == (
                    partitioned.keys.partition(run_id)
                )
