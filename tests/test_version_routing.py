"""Version routing: a run executes on the flow version it started on.

During a rolling deploy old workers finish old runs and new workers take new
ones; one worker may serve several versions of one flow; `Client.resume(...,
version=)` moves a run onto another version, authorized and audited.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from sdk import Registry, RunStatus, current_run, flow, step, wait_for
from sdk.errors import (
    Forbidden,
    InvalidArgument,
    InvalidTransition,
    RegistryConflict,
    RunFailed,
)
from sdk.errors import NonDeterminismError as NonDeterminism
from sdk.model._registry import flow_def_of
from sdk.store import Store
from testing import FakeClock, FlowTestEnv

NAME = "tests.version_routing.greet"
ran: list[str] = []


@step
async def hello(who: str) -> str:
    return f"hello {who}"


@step
async def shout(text: str) -> str:
    return text.upper() + "!"


async def body_v1(who: str) -> str:
    ran.append(f"v1:{current_run().flow_version}")
    text = await hello(who)
    await wait_for("go")
    return text


async def body_v2(who: str) -> str:
    ran.append(f"v2:{current_run().flow_version}")
    text = await hello(who)
    await wait_for("go")
    return await shout(text)  # a new step after the wait: v1's parked runs cannot take it


REG = Registry()
greet_v1 = flow(name=NAME, version="2024-06-01", registry=REG)(body_v1)
greet_v2 = flow(name=NAME, version="2024-07-15", registry=REG)(body_v2)


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> None:
    ran.clear()


@pytest_asyncio.fixture(name="deploy")
async def deploy_fixture(store: Store) -> AsyncIterator[tuple[FlowTestEnv, FlowTestEnv]]:
    """An old worker (v1 only) and a new one (v2 only) on one store and one clock."""
    clock = FakeClock()
    async with (
        FlowTestEnv(clock, store, flows=[greet_v1], registry=REG) as old,
        FlowTestEnv(clock, store, flows=[greet_v2], registry=REG) as new,
    ):
        yield old, new


def test_a_name_holds_several_versions_and_the_newest_is_current() -> None:
    assert set(REG.versions(NAME)) == {"2024-06-01", "2024-07-15"}
    assert REG.flow(NAME).version == "2024-07-15"
    assert REG.find_version(NAME, "2024-06-01") is not None
    assert REG.find_version(NAME, None) is None

    natural = Registry()
    for version in ("v9", None, "v10", "v2"):
        flow(name="tests.version_routing.n", version=version, registry=natural)(
            _fresh(f"n_{version}")
        )
    assert list(natural.versions("tests.version_routing.n")) == [None, "v2", "v9", "v10"]
    assert natural.flow("tests.version_routing.n").version == "v10"


def test_a_second_function_at_a_taken_version_raises() -> None:
    registry = Registry()
    flow(name="tests.version_routing.t", version="1", registry=registry)(_fresh("a"))
    with pytest.raises(RegistryConflict, match=r"at version '1' is already registered"):
        flow(name="tests.version_routing.t", version="1", registry=registry)(_fresh("b"))


def test_one_function_decorated_under_two_versions_gives_two_flows() -> None:
    registry = Registry()
    one = flow(name="tests.version_routing.same", version="1", registry=registry)(body_v1)
    two = flow(name="tests.version_routing.same", version="2", registry=registry)(body_v1)
    assert (flow_def_of(one), flow_def_of(two)) == (
        registry.find_version("tests.version_routing.same", "1"),
        registry.find_version("tests.version_routing.same", "2"),
    )
    assert flow_def_of(body_v1) is None  # the function itself is not a flow


def _fresh(name: str):  # type: ignore[no-untyped-def]
    async def fn() -> None: ...

    fn.__qualname__ = fn.__name__ = name
    return fn


async def test_old_workers_finish_old_runs_and_new_workers_take_new_ones(
    deploy: tuple[FlowTestEnv, FlowTestEnv],
) -> None:
    old, new = deploy
    parked = await old.client.start(greet_v1, "ada")
    fresh = await new.client.start(greet_v2, "bob")
    assert (await new.client.get(parked.run_id)).flow_version == "2024-06-01"
    assert (await new.client.get(fresh.run_id)).flow_version == "2024-07-15"

    await new.run_until_idle()  # the new worker takes only the new run
    assert ran == ["v2:2024-07-15"]
    assert (await new.client.get(parked.run_id)).status is RunStatus.PENDING
    await old.run_until_idle()
    assert ran == ["v2:2024-07-15", "v1:2024-06-01"]

    for run in (parked, fresh):
        await new.client.signal(run.run_id, "go", None)
    await new.run_until_idle()  # the parked v1 run stays for a v1 worker
    assert (await new.client.get(parked.run_id)).status is RunStatus.RUNNING
    assert await fresh.result() == "HELLO BOB!"
    await old.run_until_idle()
    assert await parked.result() == "hello ada"


async def test_one_worker_serves_every_registered_version_of_a_name(store: Store) -> None:
    async with FlowTestEnv(store=store, registry=REG) as env:
        one = await env.client.start(greet_v1, "ada")
        two = await env.client.start(NAME, "bob")  # by name: the current version
        await env.run_until_idle()
        for run in (one, two):
            await env.client.signal(run.run_id, "go", None)
        await env.run_until_idle()
        assert await one.result() == "hello ada"
        assert await two.result() == "HELLO BOB!"
        assert set(ran) == {"v1:2024-06-01", "v2:2024-07-15"}
        beat = env.worker._heartbeat.beat()  # what its heartbeat registers (Client.workers)
        assert {f"{NAME}@2024-06-01", f"{NAME}@2024-07-15"} <= set(beat.flows)


async def test_resume_with_a_version_moves_a_parked_run_onto_the_new_code(
    deploy: tuple[FlowTestEnv, FlowTestEnv],
) -> None:
    old, new = deploy
    run = await old.client.start(greet_v1, "ada")
    await old.run_until_idle()  # parked on the wait, on v1
    await new.client.resume(run.run_id, version="2024-07-15", actor="ops")
    record = await new.client.get(run.run_id)
    assert record.flow_version == "2024-07-15"

    await new.client.signal(run.run_id, "go", None)
    await old.run_until_idle()  # the old worker no longer takes it
    assert (await new.client.get(run.run_id)).status is not RunStatus.COMPLETED
    await new.run_until_idle()
    assert await run.result() == "HELLO ADA!"  # v2 replayed v1's journal, then went on
    assert ran == ["v1:2024-06-01", "v2:2024-07-15"]

    events = [e for e in await new.client.events(run.run_id) if e.type == "run.resumed"]
    (resumed,) = events
    assert resumed.data is not None
    data = _data(resumed.data)
    assert data["version"] == "2024-07-15" and data["from_version"] == "2024-06-01"
    assert data["actor"] == "ops"


async def test_a_run_stuck_pending_on_an_unserved_version_is_moved_and_keeps_its_place(
    deploy: tuple[FlowTestEnv, FlowTestEnv],
) -> None:
    old, new = deploy
    stuck = await old.client.start(greet_v1, "ada")  # the v1 workers are gone
    behind = await new.client.start(greet_v2, "bob")
    await new.client.resume(stuck.run_id, version="2024-07-15")
    assert (await new.client.get(stuck.run_id)).status is RunStatus.PENDING
    await new.run_until_idle()
    assert ran == ["v2:2024-07-15", "v2:2024-07-15"]
    assert (await new.client.get(stuck.run_id)).status is RunStatus.WAITING_FOR_SIGNAL
    assert (await new.client.get(behind.run_id)).status is RunStatus.WAITING_FOR_SIGNAL


async def test_resume_with_a_version_refuses_a_running_run_and_bad_versions(
    deploy: tuple[FlowTestEnv, FlowTestEnv],
) -> None:
    old, new = deploy
    run = await old.client.start(greet_v1, "ada")
    await old.run_until_idle()
    await old.client.signal(run.run_id, "go", None)
    await old.run_until_idle()
    assert await run.result() == "hello ada"
    with pytest.raises(InvalidArgument, match="resume\\(\\): version"):
        await new.client.resume(run.run_id, version="")
    done = await new.client.get(run.run_id)
    assert done.status is RunStatus.COMPLETED and done.flow_version == "2024-06-01"
    with pytest.raises(InvalidTransition):
        await new.client.resume(run.run_id, version="2024-07-15")
    assert (await new.client.get(run.run_id)).flow_version == "2024-06-01"


class OnlyOps:
    def can(self, actor: str, action: str, run: object) -> bool:
        return actor == "ops"


async def test_moving_a_run_to_another_version_is_authorized_and_audited(store: Store) -> None:
    async with FlowTestEnv(store=store, flows=[greet_v1], registry=REG) as env:
        run = await env.client.start(greet_v1, "ada")
        await env.run_until_idle()
        guarded = type(env.client)(env.store, authorizer=OnlyOps(), clock=env.clock, registry=REG)
        with pytest.raises(Forbidden):
            await guarded.resume(run.run_id, version="2024-07-15", actor="mallory")
        assert (await env.client.get(run.run_id)).flow_version == "2024-06-01"
        await guarded.resume(run.run_id, version="2024-07-15", actor="ops")
        assert (await env.client.get(run.run_id)).flow_version == "2024-07-15"
        said = [
            (e.type, _data(e.data).get("actor"), _data(e.data).get("version"))
            for e in await env.client.events(run.run_id)
            if e.type in ("auth.denied", "run.resumed")
        ]
        assert said == [("auth.denied", "mallory", None), ("run.resumed", "ops", "2024-07-15")]


def _data(data: object) -> dict[str, object]:
    loaded = json.loads(data) if isinstance(data, str) else data
    assert isinstance(loaded, dict)
    return loaded


async def test_a_parked_run_replayed_on_a_version_that_diverges_fails_on_non_determinism(
    store: Store,
) -> None:
    registry = Registry()

    async def other(who: str) -> str:
        await shout(who)  # a different first step
        await wait_for("go")
        return who

    v1 = flow(name="tests.version_routing.d", version="1", registry=registry)(body_v1)
    flow(name="tests.version_routing.d", version="2", registry=registry)(other)
    async with FlowTestEnv(store=store, registry=registry) as env:
        run = await env.client.start(v1, "ada")
        await env.run_until_idle()
        await env.client.resume(run.run_id, version="2")
        await env.client.signal(run.run_id, "go", None)
        await env.run_until_idle()
        with pytest.raises(RunFailed) as failed:
            await run.result()
        error = failed.value.error
        assert error.reason == "non_determinism" and error.type.endswith(NonDeterminism.__name__)
        # the fix names the version the run is on
        assert "@flow(name='tests.version_routing.d', version='2')" in error.message
