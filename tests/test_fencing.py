"""Fencing: an activation whose lease was taken over (or whose run was canceled) cannot write."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

from sdk import Client, RunStatus, Worker, flow, step
from sdk.errors import RunCanceled
from sdk.store import Consumed, Mailbox, Parked, Refusal, Refused
from stores.redis import RedisStore
from testing import FakeClock
from tests.redis_layout._support import (
    RECOVERY_ERROR,
    T0,
    TTL,
    consume,
    journal_of,
    new_run,
    step_record,
)

WAKE = 5.0  # generous bound on in-process hand-offs; nothing measures speed

# -- store level ------------------------------------------------------------------------


async def test_writes_of_an_activation_whose_lease_was_taken_over_are_refused(
    store: RedisStore,
) -> None:
    await store.create_run(new_run("r1"), "")
    (a,) = await store.claim("worker-a", None, 1, T0, TTL)
    assert await store.record("r1", a.run.fence, "s#1", step_record("s#1", 0, "a"))
    assert (await store.tick(T0 + TTL, 10, RECOVERY_ERROR)).recovered == 1
    (b,) = await store.claim("worker-b", None, 1, T0 + TTL, TTL)
    assert b.run.fence > a.run.fence

    fenced = Refused(Refusal.FENCED)
    assert not await store.record("r1", a.run.fence, "s#2", step_record("s#2", 1, "a"))
    assert await consume(store, "r1", a.run.fence) == (Consumed.FENCED, None)
    assert (
        await store.suspend(
            "r1", a.run.fence, T0, None, RunStatus.WAITING_FOR_SIGNAL, [], [Mailbox("go")]
        )
        is Parked.FENCED
    )
    assert await store.finish("r1", a.run.fence, RunStatus.COMPLETED, T0 + TTL, result='"a"') == (
        fenced
    )
    assert await store.renew([("r1", a.run.fence)], T0 + 5 * TTL) == ["r1"]
    await store.release("r1", a.run.fence)  # ignored: B still holds the run

    assert await store.record("r1", b.run.fence, "s#2", step_record("s#2", 1, "b"))
    assert (
        await store.finish("r1", b.run.fence, RunStatus.COMPLETED, T0 + TTL, result='"b"') is None
    )

    assert await journal_of(store, "r1") == {
        "s#1": step_record("s#1", 0, "a"),  # written while A still held the lease
        "s#2": step_record("s#2", 1, "b"),
    }
    stored = await store.get_run("r1")
    assert stored is not None
    assert stored.status is RunStatus.COMPLETED
    assert stored.result == '"b"'


async def test_old_owner_cannot_overwrite_a_step_the_new_owner_recorded(
    store: RedisStore,
) -> None:
    await store.create_run(new_run("r1"), "")
    (a,) = await store.claim("worker-a", None, 1, T0, TTL)
    await store.tick(T0 + TTL, 10, RECOVERY_ERROR)
    (b,) = await store.claim("worker-b", None, 1, T0 + TTL, TTL)
    assert await store.record("r1", b.run.fence, "s#1", step_record("s#1", 0, "b"))

    assert not await store.record("r1", a.run.fence, "s#1", step_record("s#1", 0, "a"))

    assert await journal_of(store, "r1") == {"s#1": step_record("s#1", 0, "b")}


# -- end to end: two in-process workers on one store ---------------------------------------


class Gate:
    """Holds the first execution of `charge` until the test releases it."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.calls: list[str] = []


GATE: list[Gate] = []  # the current test's gate; flows are module-level, so state is too


@pytest.fixture(name="gate")
def gate_fixture() -> Iterator[Gate]:
    GATE[:] = [Gate()]
    try:
        yield GATE[0]
    finally:
        GATE.clear()


@step
async def charge(tag: str) -> str:
    gate = GATE[0]
    gate.calls.append(f"charge:{tag}")
    attempt = sum(c == f"charge:{tag}" for c in gate.calls)
    if attempt == 1:
        gate.started.set()
        await gate.release.wait()
    return f"attempt-{attempt}"


@step
async def ship(tag: str) -> None:
    GATE[0].calls.append(f"ship:{tag}")


@flow(name="tests.fencing.charge_then_ship")
async def charge_then_ship(tag: str) -> str:
    charged = await charge(tag)
    await ship(tag)
    return charged


@flow(name="tests.fencing.swallows_errors")
async def swallows_errors(tag: str) -> str:
    try:
        charged = await charge(tag)
    except Exception:  # a flow may swallow LeaseLost; the engine must not care
        charged = "swallowed"
    await ship(tag)
    return charged


def lease_lost_lines(caplog: pytest.LogCaptureFixture, run_id: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "steadyflow.worker"
        and r.levelno == logging.WARNING
        and "lease lost" in r.getMessage()
        and run_id in r.getMessage()
    ]


@pytest.mark.parametrize("flow_fn", [charge_then_ship, swallows_errors])
async def test_worker_whose_lease_was_taken_over_cannot_record_its_late_step(
    memory_store: RedisStore,
    gate: Gate,
    caplog: pytest.LogCaptureFixture,
    flow_fn: object,
) -> None:
    caplog.set_level(logging.WARNING, logger="steadyflow.worker")
    clock = FakeClock(T0)  # not started: only the workers read it
    client = Client(memory_store, clock=clock)
    # A 30 s lease heartbeats every 10 real seconds: A does not renew during the test.
    worker_a = Worker(memory_store, clock=clock, lease_ttl=30, name="worker-a")
    worker_b = Worker(memory_store, clock=clock, lease_ttl=30, name="worker-b")
    handle = await client.start(flow_fn, "order-1", run_id="fenced-run")  # type: ignore[arg-type]
    a_task = asyncio.create_task(worker_a.run_until_idle())
    await asyncio.wait_for(gate.started.wait(), WAKE)

    clock.advance(31)  # A's lease expires while its step is still running
    await worker_b.run_until_idle()  # recovers the run, re-runs the step, completes it
    assert await handle.result(timeout=WAKE) == "attempt-2"

    gate.release.set()  # A's step returns now, far too late
    await asyncio.wait_for(a_task, WAKE)

    record = await client.get("fenced-run")
    assert record.status is RunStatus.COMPLETED
    assert record.result == "attempt-2"
    journal = await journal_of(memory_store, "fenced-run")
    assert set(journal) == {"charge#1", "ship#1"}
    assert '"attempt-2"' in journal["charge#1"]
    assert gate.calls == ["charge:order-1", "charge:order-1", "ship:order-1"]  # A never shipped
    assert lease_lost_lines(caplog, "fenced-run")


async def test_cancel_while_a_step_runs_keeps_its_result_out_of_the_journal(
    memory_store: RedisStore, gate: Gate, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="steadyflow.worker")
    client = Client(memory_store)
    worker = Worker(memory_store, lease_ttl=30, name="worker-a")
    handle = await client.start(charge_then_ship, "order-2", run_id="canceled-run")
    task = asyncio.create_task(worker.run_until_idle())
    await asyncio.wait_for(gate.started.wait(), WAKE)

    await client.cancel("canceled-run", reason="customer called", grace=0)
    gate.release.set()
    await asyncio.wait_for(task, WAKE)

    with pytest.raises(RunCanceled):
        await handle.result(timeout=WAKE)
    record = await client.get("canceled-run")
    assert record.status is RunStatus.CANCELED
    assert record.reason == "customer called"
    assert await journal_of(memory_store, "canceled-run") == {}
    assert gate.calls == ["charge:order-2"]  # the step ran once; nothing after it
    assert lease_lost_lines(caplog, "canceled-run")
