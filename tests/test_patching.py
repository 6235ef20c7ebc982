"""Versioning by patches: `patched` / `deprecate_patch`, and the non-determinism diff.

Each "deployment" is a `Registry` of its own that registers the flow name
``tests.patching.order`` with another function; an env per deployment on one
store plays a worker running that code.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from sdk import Registry, deprecate_patch, flow, patched, step, wait_for
from sdk.errors import InvalidArgument, NonDeterminismError, NotInRunError
from stores.redis import RedisStore
from testing import FlowTestEnv

NAME = "tests.patching.order"
RUNS: Counter[str] = Counter()


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> None:
    RUNS.clear()


@step
async def reserve(n: int) -> str:
    RUNS["reserve"] += 1
    return f"reserved {n}"


@step
async def check_fraud(n: int) -> bool:
    RUNS["check_fraud"] += 1
    return n < 100


@step
async def charge(n: int) -> str:
    RUNS["charge"] += 1
    return f"charged {n}"


# -- the deployments ---------------------------------------------------------------

V1 = Registry()  # the original code


@flow(name=NAME, registry=V1)
async def order_v1(n: int) -> str:
    await reserve(n)
    await wait_for("go")
    await charge(n)
    return "old path"


V2 = Registry()  # a fraud check added before the wait, behind a patch


@flow(name=NAME, registry=V2)
async def order_v2(n: int) -> str:
    await reserve(n)
    if await patched("fraud-check"):
        await check_fraud(n)
        path = "new path"
    else:
        path = "old path"
    await wait_for("go")
    await charge(n)
    return path


V3 = Registry()  # every old run drained: only the new path, the patch deprecated


@flow(name=NAME, registry=V3)
async def order_v3(n: int) -> str:
    await reserve(n)
    deprecate_patch("fraud-check")
    await check_fraud(n)
    await wait_for("go")
    await charge(n)
    return "new path"


V4 = Registry()  # the fraud check added without a patch: breaks old runs


@flow(name=NAME, registry=V4)
async def order_v4(n: int) -> str:
    await reserve(n)
    await check_fraud(n)
    await wait_for("go")
    await charge(n)
    return "new path"


AFTER = Registry()  # a patch after the point where old runs park


@flow(name=NAME, registry=AFTER)
async def order_after(n: int) -> str:
    await reserve(n)
    await wait_for("go")
    if await patched("fraud-check"):
        await check_fraud(n)
        path = "new path"
    else:
        path = "old path"
    await charge(n)
    return path


MOVED = Registry()  # the patch moved before the first step


@flow(name=NAME, registry=MOVED)
async def order_moved(n: int) -> str:
    path = "new path" if await patched("fraud-check") else "old path"
    await reserve(n)
    await check_fraud(n)
    await wait_for("go")
    await charge(n)
    return path


TWICE = Registry()  # the same change id asked twice


@flow(name=NAME, registry=TWICE)
async def order_twice(n: int) -> str:
    await reserve(n)
    first = await patched("fraud-check")
    if first:
        await check_fraud(n)
    await wait_for("go")
    second = await patched("fraud-check")
    await charge(n)
    return f"{first} {second}"


GATHER_V1 = Registry()


@flow(name=NAME, registry=GATHER_V1)
async def order_gather_v1(n: int) -> str:
    await asyncio.gather(reserve(n), charge(n))
    await wait_for("go")
    return "old path"


GATHER_V2 = Registry()  # a patch asked inside asyncio.gather


@flow(name=NAME, registry=GATHER_V2)
async def order_gather_v2(n: int) -> str:
    new, _, _ = await asyncio.gather(patched("gather-change"), reserve(n), charge(n))
    if new:
        await check_fraud(n)
    await wait_for("go")
    return "new path" if new else "old path"


GATHER_V3 = Registry()  # the gathered patch deprecated


@flow(name=NAME, registry=GATHER_V3)
async def order_gather_v3(n: int) -> str:
    deprecate_patch("gather-change")  # where patched() was: before its siblings' calls
    await asyncio.gather(reserve(n), charge(n))
    await check_fraud(n)
    await wait_for("go")
    return "new path"


# -- helpers -----------------------------------------------------------------------


async def journal_keys(store: RedisStore, run_id: str) -> set[str]:
    keys = await store.client.hkeys(store.keys.journal(run_id))
    return {k.decode() if isinstance(k, bytes) else k for k in keys}


async def park_on(store: RedisStore, registry: Registry, n: int = 7) -> str:
    """Start a run on `registry`'s code; it parks on its wait."""
    async with FlowTestEnv(store=store, registry=registry) as env:
        handle = await env.start(NAME, n)
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_signal"
        return handle.run_id


async def finish_on(store: RedisStore, registry: Registry, run_id: str) -> Any:
    """Signal the parked run and drive it on `registry`'s code; its result."""
    async with FlowTestEnv(store=store, registry=registry) as env:
        await env.client.signal(run_id, "go")
        await env.run_until_idle()
        return await env.client.get(run_id)


# -- the patch lifecycle -----------------------------------------------------------


async def test_an_old_run_parked_before_the_patch_finishes_on_the_old_path(
    store: RedisStore,
) -> None:
    run_id = await park_on(store, V1)
    record = await finish_on(store, V2, run_id)
    assert (record.status, record.result, record.error) == ("completed", "old path", None)
    assert dict(RUNS) == {"reserve": 1, "charge": 1}  # no fraud check, no step ran twice
    assert "~patch:fraud-check" not in await journal_keys(store, run_id)


async def test_a_new_run_takes_the_new_path_and_records_the_marker(store: RedisStore) -> None:
    run_id = await park_on(store, V2)
    assert "~patch:fraud-check" in await journal_keys(store, run_id)
    record = await finish_on(store, V2, run_id)  # a re-activation replays the marker
    assert (record.status, record.result) == ("completed", "new path")
    assert dict(RUNS) == dict(reserve=1, check_fraud=1, charge=1)


async def test_a_run_that_had_not_reached_the_patch_takes_the_new_path(
    store: RedisStore,
) -> None:
    run_id = await park_on(store, V1)
    record = await finish_on(store, AFTER, run_id)
    assert (record.status, record.result) == ("completed", "new path")
    assert "~patch:fraud-check" in await journal_keys(store, run_id)


async def test_deprecate_patch_lets_a_marked_run_replay(store: RedisStore) -> None:
    run_id = await park_on(store, V2)
    record = await finish_on(store, V3, run_id)
    assert (record.status, record.result, record.error) == ("completed", "new path", None)
    assert dict(RUNS) == dict(reserve=1, check_fraud=1, charge=1)


async def test_deprecate_patch_records_nothing_in_a_new_run(store: RedisStore) -> None:
    run_id = await park_on(store, V3)
    assert "~patch:fraud-check" not in await journal_keys(store, run_id)
    record = await finish_on(store, V3, run_id)
    assert (record.status, record.result) == ("completed", "new path")


async def test_a_marker_recorded_at_another_position_is_non_determinism(
    store: RedisStore,
) -> None:
    run_id = await park_on(store, V2)
    record = await finish_on(store, MOVED, run_id)
    assert (record.status, record.reason) == ("failed", "non_determinism")
    assert record.error is not None
    assert record.error.message.splitlines()[0] == (
        f"run {run_id!r}: call #0 is '~patch:fraud-check' but the journal records "
        "'~patch:fraud-check' at another position; flow code changed in a way that "
        "breaks replay"
    )


async def test_the_same_change_id_gets_the_same_answer(store: RedisStore) -> None:
    old = await park_on(store, V1)
    new = await park_on(store, TWICE)
    assert (await finish_on(store, TWICE, old)).result == "False False"
    assert (await finish_on(store, TWICE, new)).result == "True True"


async def test_patched_inside_gather(store: RedisStore) -> None:
    old = await park_on(store, GATHER_V1)
    new = await park_on(store, GATHER_V2)
    assert "~patch:gather-change" in await journal_keys(store, new)
    old_record = await finish_on(store, GATHER_V2, old)
    new_record = await finish_on(store, GATHER_V2, new)
    assert (old_record.status, old_record.result) == ("completed", "old path")
    assert (new_record.status, new_record.result) == ("completed", "new path")
    assert dict(RUNS) == dict(reserve=2, charge=2, check_fraud=1)


async def test_deprecate_patch_where_the_patch_was_gathered(store: RedisStore) -> None:
    run_id = await park_on(store, GATHER_V2)
    record = await finish_on(store, GATHER_V3, run_id)
    assert (record.status, record.result, record.error) == ("completed", "new path", None)
    assert dict(RUNS) == {"reserve": 1, "charge": 1, "check_fraud": 1}


@pytest.mark.parametrize("source", [V1, V2], ids=["old-run", "new-run"])
async def test_client_replay_gives_the_source_runs_answer(
    store: RedisStore, source: Registry
) -> None:
    run_id = await park_on(store, source)
    finished = await finish_on(store, V2, run_id)
    async with FlowTestEnv(store=store, registry=V2) as env:
        replay = await env.client.replay(run_id)
        await env.run_until_idle()
        await env.client.signal(replay.run_id, "go")  # waits wait again in a replay
        await env.run_until_idle()
        assert await replay.result() == finished.result
    marked = "~patch:fraud-check" in await journal_keys(store, replay.run_id)
    assert marked == (finished.result == "new path")


async def test_invalid_change_ids_raise_invalid_argument() -> None:
    for bad in ("", "a\nb", 42, "x" * 10_000):
        with pytest.raises(InvalidArgument):
            patched(bad)  # type: ignore[arg-type, unused-coroutine]
        with pytest.raises(InvalidArgument):
            deprecate_patch(bad)  # type: ignore[arg-type]
    with pytest.raises(NotInRunError):
        patched("fine")  # type: ignore[unused-coroutine]


async def test_an_invalid_change_id_in_a_flow_is_the_flows_error(store: RedisStore) -> None:
    registry = Registry()

    @flow(name="tests.patching.invalid", registry=registry)
    async def invalid() -> str:
        try:
            await patched("")
        except InvalidArgument as exc:
            return str(exc)
        return "accepted"

    async with FlowTestEnv(store=store, registry=registry) as env:
        handle = await env.start("tests.patching.invalid")
        await env.run_until_idle()
        assert "patched(): change_id must be a non-empty string" in await handle.result()


# -- the non-determinism diff ----------------------------------------------------------


async def test_the_divergence_message_is_a_diff_of_recorded_and_called_calls(
    store: RedisStore,
) -> None:
    run_id = await park_on(store, V1)
    async with FlowTestEnv(store=store, registry=V4) as env:
        await env.client.signal(run_id, "go")
        await env.run_until_idle()
        record = await env.client.get(run_id)
    error = record.error
    assert record.status == "failed" and record.reason == "non_determinism"
    assert error is not None and error.type.endswith("NonDeterminismError")
    lines = error.message.splitlines()
    assert lines[0] == (
        f"run {run_id!r}: call #1 is 'check_fraud#1' but the journal records "
        "'~wait:go#1' there; flow code changed in a way that breaks replay"
    )
    assert lines[1].split() == ["pos", "recorded", "called"]
    assert lines[2].split() == ["0", "reserve#1", "reserve#1"]
    assert lines[3].split() == [">", "1", "~wait:go#1", "check_fraud#1"]
    assert "if await patched('<change-id>'):" in lines[4]
    assert "version the flow" in lines[4]


def test_the_diff_shows_a_few_calls_around_the_position() -> None:
    journal = {p: f"s{p}#1" for p in range(10)}
    calls = [f"s{p}#1" for p in range(6)] + ["other#1"]
    err = NonDeterminismError("r", 6, "s6#1", "other#1", journal=journal, calls=calls)
    rows = [line.split() for line in str(err).splitlines()[2:-1]]
    assert rows == [
        ["3", "s3#1", "s3#1"],
        ["4", "s4#1", "s4#1"],
        ["5", "s5#1", "s5#1"],
        [">", "6", "s6#1", "other#1"],
        ["7", "s7#1", "-"],
        ["8", "s8#1", "-"],
        ["9", "s9#1", "-"],
    ]
    assert (err.run_id, err.position, err.recorded, err.called) == ("r", 6, "s6#1", "other#1")


def test_a_removed_call_shows_where_the_flow_returned() -> None:
    err = NonDeterminismError("r", 1, "b#1", None, journal={0: "a#1", 1: "b#1"}, calls=["a#1"])
    lines = str(err).splitlines()
    assert lines[0].startswith("run 'r': the flow returned before call #1")
    assert lines[3].split() == [">", "1", "b#1", "(the", "flow", "returned)"]
