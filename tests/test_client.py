"""The client: idempotent start, argument checks, reading runs, errors for callers."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import attrs
import pytest

from sdk import Client, RunStatus, Worker, flow, step, wait_for
from sdk.errors import (
    IdempotencyConflict,
    InvalidTransition,
    RunFailed,
    RunNotFound,
    SerializationError,
    SteadyflowError,
)
from stores.redis import RedisStore
from testing import FakeClock, FlowTestEnv
from tests.conftest import PrivateRedis

RUNS: Counter[str] = Counter()
START = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> None:
    RUNS.clear()


@attrs.frozen
class Invoice:
    number: str
    total: Decimal


@step
async def bill(customer: str, cents: int) -> Invoice:
    RUNS[customer] += 1
    return Invoice(f"INV-{customer}", Decimal(cents) / 100)


@flow(name="tests.client.billing", version="2024-05")
async def billing(customer: str, cents: int) -> Invoice:
    return await bill(customer, cents)


@flow(name="tests.client.waiting")
async def waiting() -> Any:
    return await wait_for("go")


@flow(name="tests.client.any_arg")
async def any_arg(value: Any) -> Any:
    return value


@flow(name="tests.client.unannotated")
async def unannotated(value):  # type: ignore[no-untyped-def]  # no annotation on purpose
    return value


class Boom(Exception):
    pass


class Opaque:
    """Nothing the journal can store."""


@step
async def explode(message: str) -> None:
    raise Boom(message)


@flow(name="tests.client.exploding")
async def exploding() -> None:
    await explode("the flux capacitor")


@flow(name="tests.client.flow_error")
async def flow_error() -> None:
    raise KeyError("missing")


@flow(name="tests.client.opaque_result")
async def opaque_result():  # type: ignore[no-untyped-def]
    return Opaque()


async def store_keys(env: FlowTestEnv) -> list[str]:
    """The keys under the env's prefix, but the layout (the partition count a
    store's first script call records for the deployment)."""
    store = env.store
    assert isinstance(store, RedisStore)
    layout = store.keys.layout()
    return [k async for k in store.client.scan_iter(match=f"{store.keys.prefix}:*") if k != layout]


# -- idempotent start ---------------------------------------------------------------


async def test_starting_the_same_run_id_with_the_same_args_returns_the_same_run(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store) as env:
        first = await env.start(billing, "ada", 1250, run_id="bill-ada")
        second = await env.start(billing, "ada", 1250, run_id="bill-ada")
        assert first.run_id == second.run_id == "bill-ada"
        await env.run_until_idle()
        third = await env.start(billing, "ada", 1250, run_id="bill-ada")  # after it finished
        await env.run_until_idle()
        assert await third.result() == Invoice("INV-ada", Decimal("12.5"))
        assert len(await env.client.list_runs()) == 1
    assert RUNS == {"ada": 1}


async def test_starting_the_same_run_id_with_other_args_is_a_conflict(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        await env.start(billing, "ada", 1250, run_id="bill-ada")
        before = await env.client.get("bill-ada")
        with pytest.raises(IdempotencyConflict):
            await env.start(billing, "ada", 9999, run_id="bill-ada")
        with pytest.raises(IdempotencyConflict):
            await env.start(waiting, run_id="bill-ada")  # another flow
        assert await env.client.get("bill-ada") == before


async def test_keyword_order_does_not_make_a_start_a_different_call() -> None:
    async with FlowTestEnv() as env:
        await env.start(billing, customer="gus", cents=5, run_id="kw")
        again = await env.start(billing, cents=5, customer="gus", run_id="kw")
        await env.run_until_idle()
        assert await again.result() == Invoice("INV-gus", Decimal("0.05"))
    assert RUNS == {"gus": 1}


async def test_keyword_and_positional_arguments_are_both_stored() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(billing, "bob", cents=300)
        await env.run_until_idle()
        assert await handle.result() == Invoice("INV-bob", Decimal("3"))


# -- arguments that cannot be stored ------------------------------------------------


@pytest.mark.parametrize("target", [any_arg, unannotated], ids=["any", "unannotated"])
async def test_an_unserializable_argument_is_rejected_before_anything_is_written(
    target: Any,
) -> None:
    async with FlowTestEnv() as env:
        with pytest.raises(SerializationError, match="argument 'value'"):
            await env.start(target, Opaque(), run_id="r-opaque")
        with pytest.raises(RunNotFound):
            await env.client.get("r-opaque")
        assert await store_keys(env) == []


async def test_arguments_that_do_not_fit_the_signature_are_rejected() -> None:
    async with FlowTestEnv() as env:
        with pytest.raises(TypeError, match=r"tests\.client\.billing"):
            await env.start(billing, "ada", run_id="r-short")
        with pytest.raises(RunNotFound):
            await env.client.get("r-short")


@pytest.mark.parametrize("option", ["run_id", "priority", "queue", "tenant_id"])
def test_reserved_option_names_are_rejected_as_flow_parameters(option: str) -> None:
    namespace: dict[str, Any] = {}
    exec(f"async def clashing({option}): return None", namespace)
    with pytest.raises(TypeError, match=option):
        flow(name=f"tests.client.clash_{option}")(namespace["clashing"])


def test_a_flow_must_be_an_async_function() -> None:
    def not_async() -> None:
        return None

    with pytest.raises(TypeError, match="async def"):
        flow(name="tests.client.not_async")(not_async)  # type: ignore[arg-type]


async def test_priority_must_be_in_range() -> None:
    async with FlowTestEnv() as env:
        for bad in (4096, -4096, True, 1.5):
            with pytest.raises(ValueError, match="priority"):
                await env.start(waiting, priority=bad)
        assert await store_keys(env) == []


# -- results and errors ----------------------------------------------------------


async def test_result_with_a_timeout_raises_timeout_error_for_a_waiting_run() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(waiting)
        await env.run_until_idle()
        with pytest.raises(TimeoutError) as info:
            await handle.result(timeout=0.05)
        assert type(info.value) is TimeoutError
        assert handle.run_id in str(info.value)


async def test_result_with_a_timeout_ends_at_it_when_the_store_would_wait_longer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Redis ends a blocking read at its next cron tick (up to 100 ms late at
    # hz 10): the last wait of result(timeout=) is ended at the deadline instead.
    async with FlowTestEnv() as env:
        handle = await env.start(waiting)
        await env.run_until_idle()

        async def late(run_id: str, timeout: float) -> bool:
            await asyncio.Event().wait()  # ends only when cut off
            return False

        monkeypatch.setattr(env.store, "wait_finished", late)
        task = asyncio.create_task(handle.result(timeout=0.05))
        done, _ = await asyncio.wait({task}, timeout=5.0)
        if not done:
            task.cancel()
        assert task in done, "result(timeout=0.05) waited as long as the store did"
        with pytest.raises(TimeoutError):
            task.result()


async def test_result_after_a_wait_cut_at_its_deadline_on_real_redis(
    private_redis: PrivateRedis,
) -> None:
    # At hz 1 an idle Redis ends a blocking read up to a second late, so the wait
    # is cut by the client and its connection closed (the next wait opens
    # another: Redis counts it); the waits after a cut still work.
    store = RedisStore.from_url(private_redis.url, prefix="cut")
    try:
        await store.client.config_set("hz", 1)
        client = Client(store)
        handle = await client.start(waiting)
        opened = (await store.client.info("stats"))["total_connections_received"]
        for _ in range(3):
            with pytest.raises(TimeoutError):
                await handle.result(timeout=0.05)
        reopened = (await store.client.info("stats"))["total_connections_received"] - opened
        assert reopened >= 2  # the first wait's connection, and one after a cut at least
        await client.signal(handle.run_id, "go", 7)
        waiter = asyncio.create_task(handle.result(timeout=30))
        await Worker(store).run_until_idle()
        assert await asyncio.wait_for(waiter, 10.0) == 7
    finally:
        await store.close()


async def test_result_waits_for_the_run_to_finish() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(waiting)
        await env.run_until_idle()
        waiter = asyncio.create_task(handle.result(timeout=30))
        await asyncio.sleep(0)  # the waiter is blocked on the run's finish notice
        assert not waiter.done()
        await env.client.signal(handle.run_id, "go", "finally")
        await env.run_until_idle()
        assert await asyncio.wait_for(waiter, timeout=30) == "finally"


async def test_run_failed_carries_the_run_id_and_error_details() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(exploding, run_id="explodes")
        await env.run_until_idle()
        with pytest.raises(RunFailed) as info:
            await handle.result()
        record = await env.client.get("explodes")
    exc = info.value
    assert isinstance(exc, SteadyflowError)
    assert exc.run_id == "explodes"
    assert exc.error.type == f"{Boom.__module__}:Boom"
    assert exc.error.message == "the flux capacitor"
    assert exc.error.step_key == "explode#1"
    assert exc.error.reason == "step_failed"
    assert "Boom" in str(exc) and "the flux capacitor" in str(exc)
    assert record.error == exc.error
    assert record.reason == "step_failed"


async def test_an_error_in_flow_code_fails_the_run_with_reason_flow_error() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(flow_error)
        await env.run_until_idle()
        with pytest.raises(RunFailed) as info:
            await handle.result()
    assert info.value.error.type == "builtins:KeyError"
    assert info.value.error.step_key is None
    assert info.value.error.reason == "flow_error"


async def test_an_unserializable_flow_result_fails_the_run() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(opaque_result)
        await env.run_until_idle()
        with pytest.raises(RunFailed) as info:
            await handle.result()
    err = info.value.error
    assert (err.type, err.reason, err.step_key) == (
        "sdk.errors:SerializationError",
        "serialization_error",
        None,
    )
    assert "tests.client.opaque_result" in err.message


async def test_the_result_is_rebuilt_into_the_flows_return_type() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(billing, "cy", 99)
        await env.run_until_idle()
        result = await handle.result()
        record = await env.client.get(handle.run_id)
    assert result == Invoice("INV-cy", Decimal("0.99"))
    assert type(result) is Invoice
    assert record.result == result


# -- unknown runs ------------------------------------------------------------------


async def test_an_unknown_run_id_raises_run_not_found_everywhere() -> None:
    async with FlowTestEnv() as env:
        client = env.client
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: client.get("nope"),
            lambda: client.signal("nope", "go"),
            lambda: client.approve("nope", "go", actor="a"),
            lambda: client.cancel("nope", reason="x"),
            lambda: client.resume("nope"),
            lambda: client.handle("nope").result(timeout=1),
        ]
        for call in calls:
            with pytest.raises(RunNotFound) as info:
                await call()
            assert isinstance(info.value, LookupError)
            assert "nope" in str(info.value)
        assert await store_keys(env) == []


# -- reading runs ------------------------------------------------------------------


async def test_the_run_record_carries_what_was_started_and_when() -> None:
    async with FlowTestEnv(clock=FakeClock(START)) as env:
        handle = await env.start(
            billing, "dee", 1, run_id="rec", priority=7, queue="billing", tenant_id="acme"
        )
        pending = await env.client.get("rec")
        assert (pending.status, pending.started_at, pending.finished_at) == ("pending", None, None)
        env.clock.advance(5)
        await env.run_until_idle()
        record = await env.client.get(handle.run_id)
    assert record.flow == "tests.client.billing"
    assert record.flow_version == "2024-05"
    assert (record.queue, record.priority, record.tenant_id) == ("billing", 7, "acme")
    assert record.status is RunStatus.COMPLETED
    assert record.created_at == START
    assert record.started_at == START + timedelta(seconds=5)
    assert record.finished_at == START + timedelta(seconds=5)
    assert record.current_step_id == "bill#1"


async def test_list_runs_filters_by_status_and_flow() -> None:
    async with FlowTestEnv() as env:
        done = [await env.start(billing, name, 1) for name in ("a", "b")]
        env.clock.advance(1)
        parked = await env.start(waiting)
        await env.run_until_idle()
        env.clock.advance(1)
        queued = await env.start(waiting)

        def ids(records: list[Any]) -> set[str]:
            return {r.run_id for r in records}

        client = env.client
        assert ids(await client.list_runs(status="completed")) == {h.run_id for h in done}
        assert ids(await client.list_runs(status=RunStatus.WAITING_FOR_SIGNAL)) == {parked.run_id}
        assert ids(await client.list_runs(status="pending")) == {queued.run_id}
        assert ids(await client.list_runs(flow=waiting)) == {parked.run_id, queued.run_id}
        assert ids(await client.list_runs(flow="tests.client.billing")) == ids(
            await client.list_runs(flow=billing)
        )
        assert ids(await client.list_runs(status="completed", flow=waiting)) == set()
        newest_first = await client.list_runs()
        assert [r.run_id for r in newest_first[:2]] == [queued.run_id, parked.run_id]
        assert len(await client.list_runs(limit=2)) == 2
        assert await client.list_runs(status="failed") == []


async def test_a_flow_can_be_started_by_its_registered_name() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start("tests.client.billing", "eve", 200)
        await env.run_until_idle()
        assert await handle.result() == Invoice("INV-eve", Decimal("2"))


async def test_signal_to_a_finished_run_raises_and_writes_nothing() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(billing, "fay", 1)
        await env.run_until_idle()
        before = sorted(await store_keys(env))
        with pytest.raises(InvalidTransition):
            await env.client.signal(handle.run_id, "go", {"x": 1}, dedup_id="d-1")
        assert sorted(await store_keys(env)) == before


@flow(name="tests.client.two_params")
async def two_params(a: int, b: int) -> int:
    return a + b


async def test_positional_and_keyword_starts_of_the_same_call_are_one_run() -> None:
    async with FlowTestEnv() as env:
        first = await env.start(two_params, 1, b=2, run_id="same-call")
        second = await env.start(two_params, a=1, b=2, run_id="same-call")
        third = await env.start(two_params, b=2, a=1, run_id="same-call")
        assert first.run_id == second.run_id == third.run_id
        with pytest.raises(IdempotencyConflict):
            await env.start(two_params, 2, b=1, run_id="same-call")


LEASE_GATE: dict[str, asyncio.Event] = {}


@step
async def held_until_released() -> None:
    LEASE_GATE["entered"].set()
    await LEASE_GATE["release"].wait()


@flow(name="tests.client.leased")
async def leased() -> None:
    await held_until_released()
    await wait_for("done")


async def test_the_record_names_the_worker_holding_the_lease_while_it_executes(
    store: RedisStore,
) -> None:
    LEASE_GATE.update(entered=asyncio.Event(), release=asyncio.Event())
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(leased)
        busy = asyncio.create_task(env.run_until_idle())
        await LEASE_GATE["entered"].wait()
        executing = await env.client.get(handle.run_id)
        assert executing.lease_owner == env.worker.owner == "flow-test-env"
        assert executing.lease_expires_at == env.clock.now() + timedelta(
            seconds=env.worker.lease_ttl
        )
        LEASE_GATE["release"].set()
        await busy
        parked = await env.client.get(handle.run_id)
        assert parked.status is RunStatus.WAITING_FOR_SIGNAL
        assert (parked.lease_owner, parked.lease_expires_at) == (None, None)
