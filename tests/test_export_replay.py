"""`Client.export` and `testing.replay`: a run's journal out as JSON, replayed on current code."""

from __future__ import annotations

import asyncio
import json
import socket
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from examples import checkout as checkout_example
from examples.checkout import Order, checkout, gateway
from examples.hello import hello
from examples.orders import order, warehouse
from sdk import RunStatus, flow, step, wait_for
from sdk._core._types import ErrorInfo
from sdk.errors import InvalidArgument, NonDeterminismError, RunNotFound
from sdk.worker._worker import Worker
from stores.redis import RedisStore
from testing import FakeClock, FlowTestEnv, ReplayPoint, load_exports, replay
from tests.docsnippets import DOCS, section_code

START = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)
GOLDEN = Path(__file__).resolve().parent / "golden_exports"
RUNS: Counter[str] = Counter()
# Which code of the flow is "deployed": "v1" (the recorded one) or a changed variant.
CODE: dict[str, str] = {"version": "v1"}


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> Iterator[None]:
    RUNS.clear()
    CODE["version"] = "v1"
    yield
    CODE["version"] = "v1"


@step
async def pack(item: str) -> str:
    RUNS["pack"] += 1
    return f"packed {item}"


@step
async def audit() -> str:
    RUNS["audit"] += 1
    return "audited"


@step
async def label(text: str) -> str:
    RUNS["label"] += 1
    return f"{text}, labelled"


@flow(name="tests.export.parcel")
async def parcel(item: str, email: str) -> str:
    packed = await pack(item)
    if CODE["version"] == "inserted":
        await audit()  # a step inserted before the wait the recorded run is parked on
    address: dict[str, Any] = await wait_for("address")
    if CODE["version"] == "removed":
        return packed  # returns before the recorded label step
    text = await label(f"{packed} to {address['city']}")
    if CODE["version"] == "appended":
        await audit()  # after the recorded end
    return text.upper() if CODE["version"] == "shouting" else text


async def parked_and_finished(env: FlowTestEnv) -> tuple[dict[str, Any], dict[str, Any]]:
    """Exports of one parcel run: parked on its wait, then finished."""
    await env.start(parcel, "book", "ada@example.com", run_id="parcel-1")
    await env.run_until_idle()
    parked = await env.client.export("parcel-1")
    await env.client.signal("parcel-1", "address", {"city": "Paris", "email": "ada@example.com"})
    await env.run_until_idle()
    assert (await env.client.get("parcel-1")).status is RunStatus.COMPLETED
    return parked, await env.client.export("parcel-1")


def through_json(exported: dict[str, Any]) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(json.dumps(exported))
    return loaded


# -- export ---------------------------------------------------------------------------


async def test_an_export_round_trips_through_json(store: RedisStore) -> None:
    async with FlowTestEnv(clock=FakeClock(START), store=store) as env:
        parked, finished = await parked_and_finished(env)
    for exported in (parked, finished):
        assert through_json(exported) == exported
        assert (exported["steadyflow_export"], exported["format"]) == ("run", 1)
        assert exported["run_id"] == "parcel-1"
        assert exported["record"]["flow"] == "tests.export.parcel"
        assert exported["args"] is not None
    assert parked["record"]["status"] == "waiting_for_signal"
    assert [(r["key"], r["state"]) for r in parked["journal"]] == [
        ("pack#1", "ok"), ("~wait:address#1", "pending"),
    ]  # fmt: skip
    assert [(r["key"], r["state"]) for r in finished["journal"]] == [
        ("pack#1", "ok"), ("~wait:address#1", "ok"), ("label#1", "ok"),
    ]  # fmt: skip
    assert finished["journal"][1]["value"] == {"city": "Paris", "email": "ada@example.com"}
    assert finished["record"]["result"] == "packed book to Paris, labelled"
    types = [e["type"] for e in finished["events"]]
    assert types[0] == "run.created" and types[-1] == "run.completed"
    assert "signal.received" in types
    assert [c["kind"] for c in finished["checkpoints"]][-1] == "run_finished"


async def test_exporting_an_unknown_run_raises_run_not_found(store: RedisStore) -> None:
    async with FlowTestEnv(clock=FakeClock(START), store=store) as env:
        with pytest.raises(RunNotFound):
            await env.client.export("no-such-run")


async def test_the_redact_hook_replaces_every_payload_leaf_and_keeps_the_run_replayable() -> None:
    seen: list[tuple[str | int, ...]] = []

    def redact(path: tuple[str | int, ...], value: Any) -> Any:
        seen.append(path)
        return "***" if path[-1] == "email" or value == "ada@example.com" else value

    async with FlowTestEnv(clock=FakeClock(START)) as env:
        await parked_and_finished(env)
        exported = await env.client.export("parcel-1", redact=redact)
    text = json.dumps(exported)
    assert "ada@example.com" not in text
    assert exported["journal"][1]["value"] == {"city": "Paris", "email": "***"}
    assert ("journal", "~wait:address#1", "value", "email") in seen
    assert ("journal", "label#1", "value") in seen
    assert ("record", "result") in seen
    assert any(p[0] == "args" for p in seen)
    assert ("events", exported["events"][0]["event_id"], "data", "flow") in seen
    # structure is not a payload: keys, kinds and states are never shown to the hook
    assert not any(p[-1] in ("key", "kind", "state", "pos") for p in seen)

    report = await replay(parcel, through_json(exported))
    assert report.same_point
    assert RUNS == {"pack": 1, "label": 1}  # the recorded run's; the replay ran none


async def test_a_redact_hook_that_returns_no_json_is_refused() -> None:
    async with FlowTestEnv(clock=FakeClock(START)) as env:
        await parked_and_finished(env)
        with pytest.raises(InvalidArgument, match="not JSON data"):
            await env.client.export("parcel-1", redact=lambda path, value: object())


# -- replay -----------------------------------------------------------------------------


async def test_replaying_unchanged_code_on_a_parked_run_reports_the_steps(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(clock=FakeClock(START), store=store) as env:
        parked, _ = await parked_and_finished(env)
    RUNS.clear()
    report = await replay(parcel, through_json(parked))
    assert report.run_id == "parcel-1" and report.flow == "tests.export.parcel"
    assert report.replayed == ("pack#1",)
    waiting = ReplayPoint(RunStatus.WAITING_FOR_SIGNAL, waiting_on=("~wait:address#1",))
    assert report.recorded == waiting
    assert report.reached == waiting
    assert report.same_point
    assert RUNS == {}  # no step body ran


async def test_a_step_inserted_before_the_parked_wait_raises_non_determinism(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(clock=FakeClock(START), store=store) as env:
        parked, finished = await parked_and_finished(env)
    RUNS.clear()
    CODE["version"] = "inserted"
    for exported in (parked, finished):
        with pytest.raises(NonDeterminismError) as info:
            await replay(parcel, through_json(exported))
        assert (info.value.recorded, info.value.called) == ("~wait:address#1", "audit#1")
        assert "'audit#1'" in str(info.value) and "parcel-1" in str(info.value)
    assert RUNS == {}


async def test_replaying_a_finished_run_reaches_the_same_result(store: RedisStore) -> None:
    async with FlowTestEnv(clock=FakeClock(START), store=store) as env:
        _, finished = await parked_and_finished(env)
    RUNS.clear()
    report = await replay(parcel, through_json(finished))
    assert report.replayed == ("pack#1", "~wait:address#1", "label#1")
    assert report.reached == ReplayPoint(
        RunStatus.COMPLETED, result="packed book to Paris, labelled"
    )
    assert report.same_point
    assert RUNS == {}


async def test_code_that_returns_another_result_does_not_reach_the_same_point() -> None:
    async with FlowTestEnv(clock=FakeClock(START)) as env:
        _, finished = await parked_and_finished(env)
    CODE["version"] = "shouting"
    report = await replay(parcel, finished)
    assert report.reached.result == "PACKED BOOK TO PARIS, LABELLED"
    assert not report.same_point


async def test_a_call_after_the_recorded_end_is_stopped_before_its_body_runs() -> None:
    async with FlowTestEnv(clock=FakeClock(START)) as env:
        _, finished = await parked_and_finished(env)
    RUNS.clear()
    CODE["version"] = "appended"
    report = await replay(parcel, finished)
    assert report.reached == ReplayPoint(RunStatus.RUNNING, live=("audit#1",))
    assert not report.same_point
    assert RUNS == {}


async def test_a_removed_step_raises_non_determinism() -> None:
    async with FlowTestEnv(clock=FakeClock(START)) as env:
        _, finished = await parked_and_finished(env)
    CODE["version"] = "removed"
    with pytest.raises(NonDeterminismError) as info:
        await replay(parcel, finished)
    assert (info.value.recorded, info.value.called) == ("label#1", None)


async def test_a_recorded_failure_replays_to_the_same_error() -> None:
    gateway.reset(fail_first=0)
    async with FlowTestEnv(clock=FakeClock(START)) as env:
        await env.start(checkout, Order("Z-0", 0, "z@example.com"), run_id="declined")
        await env.run_until_idle()  # a zero amount is declined: the run fails
        exported = await env.client.export("declined")
    report = await replay(checkout, exported)
    assert report.recorded.status is RunStatus.FAILED
    assert isinstance(report.reached.error, ErrorInfo)
    assert report.reached.error.type == "examples.checkout:CardDeclined"
    assert report.same_point


async def test_replay_needs_no_redis_no_worker_and_makes_no_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with FlowTestEnv(clock=FakeClock(START)) as env:
        parked, _ = await parked_and_finished(env)
    text = json.dumps(parked)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("replay opened a connection or started a worker")

    monkeypatch.setenv("STEADYFLOW_STORE", "redis://127.0.0.1:1/0")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(asyncio.get_running_loop(), "create_connection", refuse)
    monkeypatch.setattr(Worker, "__init__", refuse)
    report = await replay(parcel, json.loads(text))
    assert report.same_point


async def test_what_is_not_an_export_of_the_flow_is_refused() -> None:
    async with FlowTestEnv(clock=FakeClock(START)) as env:
        parked, _ = await parked_and_finished(env)
    with pytest.raises(InvalidArgument, match="marker"):
        await replay(parcel, {"journal": []})
    with pytest.raises(InvalidArgument, match="format 2"):
        await replay(parcel, {**parked, "format": 2})
    with pytest.raises(InvalidArgument, match=r"'tests\.export\.parcel'"):
        await replay(hello, parked)


def test_load_exports_refuses_a_file_that_is_not_an_export(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text('{"hello": 1}')
    with pytest.raises(InvalidArgument, match=r"a\.json"):
        load_exports(tmp_path)


# -- golden exports of the examples -------------------------------------------------------

EXPORTS = load_exports(GOLDEN)


def test_the_golden_exports_cover_parked_and_finished_runs_of_every_example() -> None:
    statuses = {(e["record"]["flow"], e["record"]["status"]) for e in EXPORTS.values()}
    for name in ("examples.hello", "examples.checkout", "examples.orders.order"):
        assert (name, "completed") in statuses
    for name in ("examples.checkout", "examples.orders.order"):
        assert any(f == name and s.startswith("waiting") for f, s in statuses)


@pytest.mark.parametrize("name", EXPORTS)
async def test_every_golden_export_replays_on_the_current_code(name: str) -> None:
    gateway.reset(fail_first=0)
    checkout_example.shipped.clear()
    held = dict(warehouse.holds)
    report = await replay([hello, checkout, order], EXPORTS[name])
    assert report.same_point, report
    # offline: no gateway call, no shipment, no hold
    assert gateway.calls == {} and checkout_example.shipped == [] and warehouse.holds == held


# -- the docs --------------------------------------------------------------------------


@pytest.mark.xdist_group("docs-changing-flows")  # the snippet registers its flow once per process
async def test_the_replaying_production_journals_snippet_runs() -> None:
    page = DOCS / "changing-flows.md"
    namespace: dict[str, Any] = {"__name__": "docs_changing_flows_replay"}
    code = section_code(page, "Replaying production journals")
    exec(compile(code, str(page), "exec"), namespace)
    await namespace["main"]()
