"""Run record format 2 (`RunOptions`, tracing, checkpoints, lineage) and the
upgrade on read of format-1 records, proved with golden files.

``tests/golden/run_v1_{completed,failed,waiting}.json`` hold every key of one
run as the first release wrote them (commit 6867f51, run record format 1): the
run hash, its journal and the partition keys the run sat in (status index,
waits, ...), for the flows `order` and `approval` below, with the same names,
steps and arguments. They were written by running those flows on that commit's
code with ``FakeClock(2030-01-01T08:00Z)`` and advancing 5 s before the worker
ran. Never edit them: later versions must read and continue these runs.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sdk import (
    ErrorInfo,
    RunOptions,
    RunRecord,
    RunStatus,
    Versions,
    WaitingOn,
    WaitKind,
    flow,
    step,
    wait_for,
)
from sdk._core._waiting import current
from sdk.client._runs import run_record
from sdk.errors import InvalidTransition
from stores.redis import RedisStore
from testing import FakeClock, FlowTestEnv

GOLDEN = Path(__file__).parent / "golden"
V1_START = datetime(2030, 1, 1, 8, 0, tzinfo=UTC)  # the golden runs' clock
START = datetime(2031, 6, 1, 12, 0, tzinfo=UTC)  # later: these runs are upgraded now

# Fields format 2 added to the run hash; a format-1 hash has none of them.
V2_FIELDS = {"thread_id", "trace_id", "environment", "versions", "policy_snapshot_id",
             "checkpoint_head", "resume_from_checkpoint_id", "source_run_id",
             "source_checkpoint_id", "cp_n", "jseq"}  # fmt: skip

CALLS: Counter[str] = Counter()
DECLINE: set[str] = set()


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> None:
    CALLS.clear()
    DECLINE.clear()


# -- the flows of the golden runs (names, steps and keys must not change) ----------


@step
async def reserve(order_id: str) -> str:
    CALLS["reserve"] += 1
    return f"res-{order_id}"


@step
async def charge(order_id: str) -> str:
    CALLS["charge"] += 1
    if order_id in DECLINE:
        raise ValueError(f"card declined for {order_id}")
    return f"ch-{order_id}"


@step
async def ship(order_id: str) -> str:
    CALLS["ship"] += 1
    return f"ship-{order_id}"


@flow(name="tests.run_v1.order", version="3")
async def order(order_id: str) -> dict[str, str]:
    reservation = await reserve(order_id)
    charged = await charge(order_id)
    return {"reservation": reservation, "charge": charged}


@flow(name="tests.run_v1.approval")
async def approval(order_id: str) -> dict[str, Any]:
    reservation = await reserve(order_id)
    decision = await wait_for("approved")
    shipped = await ship(order_id)
    return {"reservation": reservation, "decision": decision, "shipment": shipped}


# -- golden loading -------------------------------------------------------------------


def golden(stage: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((GOLDEN / f"run_v1_{stage}.json").read_text())
    return doc


async def load_v1(store: RedisStore, stage: str) -> str:
    """Write a golden format-1 run into `store`, key by key; returns its run id."""
    doc = golden(stage)
    run_id: str = doc["run_id"]
    c = store.client
    await c.hset(store.keys.run(run_id), mapping=doc["run"])
    if doc["journal"]:
        await c.hset(store.keys.journal(run_id), mapping=doc["journal"])
    base = store.keys.base_of(run_id)
    for suffix, entry in doc["other_keys"].items():
        key, kind, value = base + suffix, entry["type"], entry["value"]
        if kind == "hash":
            await c.hset(key, mapping=value)
        elif kind == "set":
            await c.sadd(key, *value)
        elif kind == "zset":
            await c.zadd(key, {member: score for member, score in value})
        elif kind == "list":
            await c.rpush(key, *value)
        else:
            assert kind == "string", kind
            await c.set(key, value)
    return run_id


def assert_v2_defaults(rec: RunRecord) -> None:
    assert rec.format_version == 1  # the stored version: upgraded on read, not rewritten
    assert rec.trace_id == rec.run_id
    assert rec.thread_id is None
    assert rec.environment is None
    assert rec.versions == Versions()
    assert rec.versions.capabilities == ()
    assert rec.versions.bindings == {}
    assert rec.versions.registry_ref is None
    assert rec.policy_snapshot_id is None
    assert rec.checkpoint_head is None
    assert rec.resume_from_checkpoint_id is None
    assert rec.source_run_id is None
    assert rec.source_checkpoint_id is None


@pytest.mark.parametrize("stage", ["completed", "failed", "waiting"])
def test_the_golden_files_hold_format_1_run_hashes(stage: str) -> None:
    doc = golden(stage)
    assert doc["format_version"] == 1
    assert doc["run"]["v"] == "1"
    assert doc["run"]["id"] == doc["run_id"]
    assert not V2_FIELDS & set(doc["run"])
    assert not {"lease_owner", "lease_exp"} & set(doc["run"])


# -- reading format-1 records -------------------------------------------------------------


async def test_a_v1_completed_run_reads_with_v2_defaults_and_everything_else_intact(
    store: RedisStore,
) -> None:
    run_id = await load_v1(store, "completed")
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        rec = await env.client.get(run_id)
        stored = await store.get_run(run_id)
        listed = await env.client.list_runs(status="completed")
        result = await env.client.handle(run_id).result()
        checkpoints = await env.client.checkpoints(run_id)
        events = await env.client.events(run_id)

    assert_v2_defaults(rec)
    assert stored is not None
    assert run_record(stored) == rec  # a plain JSON result: the same through both readers
    assert stored.format_version == 1
    assert stored.args == '{"args":["o-1"],"kwargs":{},"types":{}}'
    assert (rec.run_id, rec.flow, rec.flow_version) == (run_id, "tests.run_v1.order", "3")
    assert (rec.status, rec.queue, rec.priority, rec.tenant_id) == (
        RunStatus.COMPLETED, "default", -2, "acme",
    )  # fmt: skip
    assert rec.created_at == V1_START
    assert rec.started_at == rec.finished_at == V1_START + timedelta(seconds=5)
    assert rec.current_step_id == "charge#1"
    assert rec.result == {"reservation": "res-o-1", "charge": "ch-o-1"}
    assert (rec.error, rec.reason, rec.recoveries) == (None, None, 0)
    assert listed == [rec]
    assert result == {"reservation": "res-o-1", "charge": "ch-o-1"}
    assert checkpoints == [] and events == []  # format 1 kept no log


async def test_a_v1_failed_run_reads_with_its_error(store: RedisStore) -> None:
    run_id = await load_v1(store, "failed")
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        rec = await env.client.get(run_id)

    assert_v2_defaults(rec)
    assert (rec.status, rec.queue, rec.priority, rec.tenant_id) == (
        RunStatus.FAILED, "billing", 0, None,
    )  # fmt: skip
    assert rec.error == ErrorInfo(
        "builtins:ValueError", "card declined for o-2", "charge#1", "step_failed"
    )
    assert rec.reason == "step_failed"
    assert rec.result is None
    assert rec.finished_at == V1_START + timedelta(seconds=5)


async def test_a_v1_waiting_run_reads_with_v2_defaults(store: RedisStore) -> None:
    run_id = await load_v1(store, "waiting")
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        rec = await env.client.get(run_id)

    assert_v2_defaults(rec)
    assert (rec.status, rec.flow, rec.tenant_id) == (
        RunStatus.WAITING_FOR_SIGNAL, "tests.run_v1.approval", "acme",
    )  # fmt: skip
    assert rec.finished_at is None
    assert rec.current_step_id == "reserve#1"
    assert rec.waiting_on == ()  # parked before the record kept what it waits on


async def test_what_a_v1_waiting_run_waits_on_comes_from_its_journal(store: RedisStore) -> None:
    run_id = await load_v1(store, "waiting")
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        rec = await env.client.get(run_id)
        waits = current(rec, await env.client.export(run_id))
        assert await env.client.list_runs(waiting_on="signal") == []  # the filter reads the record

    assert waits == [WaitingOn(WaitKind.SIGNAL, "approved")]


# -- continuing format-1 runs with the new engine ---------------------------------------------


async def test_a_v1_waiting_run_completes_after_a_signal(store: RedisStore) -> None:
    run_id = await load_v1(store, "waiting")
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        await env.client.signal(run_id, "approved", {"by": "ada"})
        await env.run_until_idle()
        result = await env.client.handle(run_id).result()
        rec = await env.client.get(run_id)
        events = await env.client.events(run_id)
        checkpoints = await env.client.checkpoints(run_id)

    assert result == {"reservation": "res-o-3", "decision": {"by": "ada"},
                      "shipment": "ship-o-3"}  # fmt: skip
    assert CALLS == {"ship": 1}  # reserve#1 came from the v1 journal
    assert rec.status is RunStatus.COMPLETED
    assert rec.trace_id == run_id
    # it had started under format 1: no run.started now
    assert [(e.type, e.step_key) for e in events] == [
        ("signal.received", None), ("wait.completed", "~wait:approved#1"),
        ("step.completed", "ship#1"), ("run.completed", None),
    ]  # fmt: skip
    assert [(c.checkpoint_id, c.kind, c.step_key) for c in checkpoints] == [
        ("1", "step_completed", "ship#1"), ("2", "run_finished", None),
    ]  # fmt: skip
    assert rec.checkpoint_head == "2"
    assert all(e.correlation["tenant_id"] == "acme" for e in events)


async def test_a_v1_failed_run_resumes_to_completion(store: RedisStore) -> None:
    run_id = await load_v1(store, "failed")
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        await env.client.resume(run_id, actor="ops")
        resumed = await env.client.get(run_id)
        await env.run_until_idle()
        result = await env.client.handle(run_id).result()
        events = await env.client.events(run_id)

    assert resumed.status is RunStatus.RUNNING
    assert resumed.resume_from_checkpoint_id is None  # no checkpoint was ever taken
    assert result == {"reservation": "res-o-2", "charge": "ch-o-2"}
    assert CALLS == {"charge": 1}  # only the failed step runs again
    assert [e.type for e in events] == [
        "run.resumed", "step.completed", "run.completed",
    ]  # fmt: skip
    assert events[0].data["actor"] == "ops"


async def test_a_v1_waiting_run_can_be_canceled_and_resumed(store: RedisStore) -> None:
    run_id = await load_v1(store, "waiting")
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        await env.client.cancel(run_id, reason="on hold", actor="ops", grace=0)
        canceled = await env.client.get(run_id)
        await env.client.resume(run_id, actor="ops")
        await env.client.signal(run_id, "approved", "ok")
        await env.run_until_idle()
        result = await env.client.handle(run_id).result()

    assert (canceled.status, canceled.reason) == (RunStatus.CANCELED, "on hold")
    assert canceled.checkpoint_head == "1"  # its run_finished checkpoint
    assert result["decision"] == "ok"
    assert CALLS == {"ship": 1}


async def test_a_v1_completed_run_stays_terminal(store: RedisStore) -> None:
    run_id = await load_v1(store, "completed")
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        with pytest.raises(InvalidTransition):
            await env.client.cancel(run_id, reason="too late")
        with pytest.raises(InvalidTransition):
            await env.client.resume(run_id)
        with pytest.raises(InvalidTransition):
            await env.client.signal(run_id, "approved", 1)
        rec = await env.client.get(run_id)

    assert rec.status is RunStatus.COMPLETED
    assert await env.client.events(run_id) == []


# -- format 2: RunOptions ---------------------------------------------------------------------


@flow(name="tests.run_record_v2.simple")
async def simple(n: int) -> int:
    return n + 1


@flow(name="tests.run_record_v2.waits")
async def waits() -> Any:
    return await wait_for("go")


FULL = RunOptions(
    thread_id="thread-9",
    trace_id="trace-9",
    environment="staging",
    versions=Versions(
        capabilities=("search", "refund"),
        bindings={"model": "m-2031-06", "tool": "refunds@3"},
        registry_ref="registry://deploy/42",
    ),
    policy_snapshot_id="policy-7",
)


async def test_run_options_are_recorded_on_the_run(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(simple, 1, tenant_id="acme", options=FULL)
        pending = await env.client.get(handle.run_id)
        await env.run_until_idle()
        done = await env.client.get(handle.run_id)
        (listed,) = await env.client.list_runs()

    for rec in (pending, done, listed):
        assert rec.format_version == 2
        assert rec.thread_id == "thread-9"
        assert rec.trace_id == "trace-9"
        assert rec.environment == "staging"
        assert rec.versions == FULL.versions
        assert rec.versions.capabilities == ("search", "refund")
        assert rec.policy_snapshot_id == "policy-7"
        assert rec.tenant_id == "acme"
        assert (rec.source_run_id, rec.source_checkpoint_id) == (None, None)
    assert pending.checkpoint_head is None
    assert done.checkpoint_head == "2"  # run_started, run_finished
    assert done.result == 2


async def test_a_run_started_without_options_gets_the_defaults(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(simple, 1, run_id="plain-run")
        rec = await env.client.get(handle.run_id)

    assert rec.format_version == 2
    assert rec.trace_id == "plain-run"
    assert (rec.thread_id, rec.environment, rec.policy_snapshot_id) == (None, None, None)
    assert rec.versions == Versions()
    assert (rec.checkpoint_head, rec.resume_from_checkpoint_id) == (None, None)


async def test_partial_options_leave_the_rest_at_their_defaults() -> None:
    async with FlowTestEnv(FakeClock(START)) as env:
        handle = await env.start(
            simple, 1, run_id="r-1", options=RunOptions(versions=Versions(registry_ref="ref-1"))
        )
        rec = await env.client.get(handle.run_id)

    assert rec.trace_id == "r-1"
    assert rec.versions == Versions(registry_ref="ref-1")
    assert rec.thread_id is None


def test_versions_keep_capabilities_as_a_tuple() -> None:
    assert Versions(capabilities=["a", "b"]).capabilities == ("a", "b")
    assert Versions(capabilities=["a"]) == Versions(capabilities=("a",))


@pytest.mark.parametrize("bad", [{"trace_id": "t"}, "trace-1", Versions()])
async def test_options_that_are_not_run_options_are_a_type_error_and_nothing_starts(
    bad: Any,
) -> None:
    async with FlowTestEnv() as env:
        with pytest.raises(TypeError, match="RunOptions"):
            await env.start(simple, 1, run_id="never", options=bad)
        assert await env.client.list_runs() == []


def test_a_flow_parameter_named_options_is_refused_at_decoration() -> None:
    with pytest.raises(TypeError, match="options"):

        @flow(name="tests.run_record_v2.clashing")
        async def clashing(options: dict[str, str]) -> None:
            return None


async def test_the_trace_id_is_kept_through_a_wait_and_a_resume(store: RedisStore) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        handle = await env.start(waits, options=RunOptions(trace_id="t-1", thread_id="th-1"))
        await env.run_until_idle()
        await env.client.cancel(handle.run_id, reason="pause", grace=0)
        await env.client.resume(handle.run_id)
        await env.client.signal(handle.run_id, "go", "ada")
        await env.run_until_idle()
        assert await handle.result() == "ada"
        rec = await env.client.get(handle.run_id)
        events = await env.client.events(handle.run_id)

    assert (rec.trace_id, rec.thread_id) == ("t-1", "th-1")
    assert {e.correlation["trace_id"] for e in events} == {"t-1"}
