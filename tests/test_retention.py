"""Retention: delete_on_success, per-flow retention of finished runs, Client.delete.

Finished runs are kept by default. Failed runs are kept until deleted
explicitly, and nothing ever deletes a run that has not finished.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from sdk import Client, Decision, RunRecord, RunStatus, flow, step, wait_for
from sdk.errors import Forbidden, InvalidTransition, RunFailed, RunNotFound
from sdk.model._flowdef import RESULT_GRACE
from stores._keys import RUN_SUFFIXES, SHARED_SUFFIXES, SUFFIX
from stores.redis import RedisStore
from testing import FlowTestEnv
from tests.redis_layout._support import FeedRecorder, snapshot

HOUR = 3600.0


@step(name="tests.retention.double")
async def double(n: int) -> int:
    return n * 2


@step(name="tests.retention.explode")
async def explode() -> None:
    raise ValueError("boom")


@flow(name="tests.retention.ephemeral", delete_on_success=True)
async def ephemeral(n: int) -> dict[str, int]:
    return {"n": await double(n)}


@flow(name="tests.retention.ephemeral_waiting", delete_on_success=True)
async def ephemeral_waiting() -> Any:
    return await wait_for("go")


@flow(name="tests.retention.ephemeral_failing", delete_on_success=True)
async def ephemeral_failing() -> None:
    await explode()


@flow(name="tests.retention.kept", retention=timedelta(hours=1))
async def kept(n: int) -> int:
    return await double(n)


@flow(name="tests.retention.kept_waiting", retention=HOUR)
async def kept_waiting() -> Any:
    return await wait_for("go")


@flow(name="tests.retention.kept_failing", retention=HOUR)
async def kept_failing() -> None:
    await explode()


@flow(name="tests.retention.plain")
async def plain(n: int) -> int:
    return await double(n)


async def keys_naming(store: RedisStore, run_id: str) -> set[str]:
    """Every key of the store whose name contains `run_id`."""
    return {k async for k in store.client.scan_iter(match=store.keys.pattern()) if run_id in k}


def store_of(env: FlowTestEnv) -> RedisStore:
    assert isinstance(env.store, RedisStore)
    return env.store


# -- delete_on_success --------------------------------------------------------------------


async def test_delete_on_success_leaves_no_key_of_the_run_once_the_grace_ends() -> None:
    async with FlowTestEnv() as env:
        store = store_of(env)
        handle = await env.start(ephemeral, 21, run_id="eph-run-1")
        await env.run_until_idle()

        # At once: nothing but the tombstone and the done notice for result().
        assert await keys_naming(store, "eph-run-1") == {
            store.keys.gone("eph-run-1"), store.keys.done("eph-run-1")
        }  # fmt: skip
        assert await handle.result() == {"n": 42}

        await env.advance(RESULT_GRACE + 1)

        assert await keys_naming(store, "eph-run-1") == set()
        with pytest.raises(RunNotFound):
            await handle.result()


async def test_a_waiting_result_returns_the_result_of_a_run_deleted_on_success(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(ephemeral_waiting)
        await env.run_until_idle()
        blocked = asyncio.Event()
        wait_finished = env.store.wait_finished

        async def watched(run_id: str, timeout: float) -> bool:
            blocked.set()
            return await wait_finished(run_id, timeout)

        monkeypatch.setattr(env.store, "wait_finished", watched)
        waiter = asyncio.create_task(handle.result(timeout=30))
        await asyncio.wait_for(blocked.wait(), 10)

        await env.client.signal(handle.run_id, "go", {"ok": True})
        await env.run_until_idle()

        assert await asyncio.wait_for(waiter, 10) == {"ok": True}


async def test_a_run_deleted_on_success_is_gone_for_every_reader_but_result() -> None:
    async with FlowTestEnv() as env:
        rec = await FeedRecorder.start(store_of(env))
        handle = await env.start(ephemeral, 1)
        await env.run_until_idle()

        with pytest.raises(RunNotFound):
            await env.client.get(handle.run_id)
        with pytest.raises(RunNotFound):
            await env.client.events(handle.run_id)
        with pytest.raises(RunNotFound):
            await env.client.signal(handle.run_id, "go")
        assert await env.client.list_runs() == []
        assert await handle.result() == {"n": 2}
        deleted = [t for t, _ in await rec.of(handle.run_id)]
        assert deleted[-2:] == ["run.completed", "run.deleted"]


async def test_delete_on_success_keeps_failed_runs() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(ephemeral_failing)
        await env.run_until_idle()
        await env.advance(timedelta(days=30))

        rec = await env.client.get(handle.run_id)
        assert rec.status is RunStatus.FAILED
        assert len(await env.client.events(handle.run_id)) > 0
        with pytest.raises(RunFailed):
            await handle.result()


async def test_delete_on_success_keeps_canceled_runs() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(ephemeral_waiting)
        await env.run_until_idle()
        await env.client.cancel(handle.run_id, reason="not needed")
        await env.advance(timedelta(days=30))

        assert (await env.client.get(handle.run_id)).status is RunStatus.CANCELED


async def test_a_run_id_deleted_on_success_can_be_started_again() -> None:
    async with FlowTestEnv() as env:
        await env.start(ephemeral, 1, run_id="again")
        await env.run_until_idle()

        handle = await env.start(ephemeral, 5, run_id="again")  # within the grace period

        assert (await env.client.get("again")).status is RunStatus.PENDING
        await env.run_until_idle()
        assert await handle.result(timeout=10) == {"n": 10}


# -- retention --------------------------------------------------------------------------


async def test_retention_deletes_a_completed_run_only_after_its_deadline() -> None:
    async with FlowTestEnv() as env:
        store = store_of(env)
        rec = await FeedRecorder.start(store)
        handle = await env.start(kept, 2, run_id="kept-run-1")
        await env.run_until_idle()
        assert await handle.result() == 4

        await env.advance(HOUR - 1)
        assert (await env.client.get("kept-run-1")).status is RunStatus.COMPLETED

        await env.advance(2)
        with pytest.raises(RunNotFound):
            await env.client.get("kept-run-1")
        assert await keys_naming(store, "kept-run-1") == set()
        assert ("run.deleted", {"reason": "retention"}) in await rec.of("kept-run-1")


async def test_retention_deletes_a_canceled_run_after_its_deadline() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(kept_waiting)
        await env.run_until_idle()
        await env.client.cancel(handle.run_id, reason="changed my mind", grace=0)

        await env.advance(HOUR - 1)
        assert (await env.client.get(handle.run_id)).status is RunStatus.CANCELED

        await env.advance(2)
        with pytest.raises(RunNotFound):
            await env.client.get(handle.run_id)


async def test_retention_never_deletes_a_failed_run() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(kept_failing)
        await env.run_until_idle()

        await env.advance(timedelta(days=365))

        assert (await env.client.get(handle.run_id)).status is RunStatus.FAILED


async def test_retention_never_deletes_a_run_that_has_not_finished() -> None:
    async with FlowTestEnv(flows=[kept_waiting]) as env:
        waiting = await env.start(kept_waiting)
        pending = await env.start(kept, 1)  # no worker here serves it: stays pending
        await env.run_until_idle()

        await env.advance(timedelta(days=365))

        assert await waiting.status() is RunStatus.WAITING_FOR_SIGNAL
        assert await pending.status() is RunStatus.PENDING


async def test_a_resumed_run_is_no_longer_due_for_deletion() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(kept_waiting)
        await env.run_until_idle()
        await env.client.cancel(handle.run_id, reason="oops", grace=0)
        await env.client.resume(handle.run_id)
        await env.run_until_idle()

        await env.advance(HOUR * 2)

        assert await handle.status() is RunStatus.WAITING_FOR_SIGNAL
        await env.client.signal(handle.run_id, "go", 7)
        await env.run_until_idle()
        assert await handle.result() == 7


async def test_runs_are_kept_by_default() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(plain, 1)
        await env.run_until_idle()

        await env.advance(timedelta(days=365))

        assert (await env.client.get(handle.run_id)).status is RunStatus.COMPLETED


def test_retention_must_be_a_non_negative_duration() -> None:
    async def body() -> None:
        return None

    with pytest.raises(ValueError, match="retention"):
        flow(name="tests.retention.bad", retention=-1)(body)
    with pytest.raises(TypeError, match="retention"):
        flow(name="tests.retention.bad", retention="1h")(body)  # type: ignore[call-overload]


# -- Client.delete --------------------------------------------------------------------------


@pytest.mark.parametrize("outcome", ["completed", "failed", "canceled"])
async def test_delete_of_a_finished_run_deletes_every_key_of_it(outcome: str) -> None:
    async with FlowTestEnv() as env:
        store = store_of(env)
        rec = await FeedRecorder.start(store)
        if outcome == "completed":
            await env.start(plain, 1, run_id="to-delete")
        elif outcome == "failed":
            await env.start(kept_failing, run_id="to-delete")
        else:
            await env.start(kept_waiting, run_id="to-delete")
            await env.run_until_idle()
            await env.client.signal("to-delete", "unread", 1, dedup_id="d-1")  # a mailbox
            await env.client.cancel("to-delete", reason="done with it")
        await env.run_until_idle()
        assert (await env.client.get("to-delete")).status.value == outcome
        assert len(await keys_naming(store, "to-delete")) >= 5
        other = await env.start(plain, 9)

        await env.client.delete("to-delete")

        assert await keys_naming(store, "to-delete") == set()
        with pytest.raises(RunNotFound):
            await env.client.get("to-delete")
        with pytest.raises(RunNotFound):
            await env.client.delete("to-delete")
        assert [r.run_id for r in await env.client.list_runs()] == [other.run_id]
        assert ("run.deleted", {"reason": "deleted", "actor": None}) in await rec.of("to-delete")


@pytest.mark.parametrize(
    "status",
    [RunStatus.PENDING, RunStatus.RUNNING, RunStatus.WAITING_FOR_SIGNAL,
     RunStatus.WAITING_FOR_HUMAN],
)  # fmt: skip
async def test_delete_of_a_run_that_has_not_finished_raises_and_deletes_nothing(
    status: RunStatus,
) -> None:
    async with FlowTestEnv() as env:
        if status is RunStatus.PENDING:
            handle = await env.start(plain, 1)
        elif status is RunStatus.RUNNING:
            handle = await env.start(plain, 1)
            env.crash_at("tests.retention.double#1", when="before")  # the lease stays
        elif status is RunStatus.WAITING_FOR_SIGNAL:
            handle = await env.start(kept_waiting)
        else:
            handle = await env.start(human_gate)
        if status is not RunStatus.PENDING:
            await env.run_until_idle()
        assert await handle.status() is status
        before = await snapshot(store_of(env))

        with pytest.raises(InvalidTransition, match="deleted") as caught:
            await env.client.delete(handle.run_id)

        assert await snapshot(store_of(env)) == before
    assert (caught.value.current, caught.value.requested) == (status, None)
    assert caught.value.action == "delete"
    assert "cancel it first" in str(caught.value)


@flow(name="tests.retention.human_gate", retention=HOUR)
async def human_gate() -> bool:
    decision: Decision = await wait_for("ok", human=True)
    return decision.approved


class OnlyOps:
    def can(self, actor: str, action: str, run: RunRecord) -> bool:
        return actor == "ops"


async def test_delete_is_authorized_and_a_refusal_is_audited() -> None:
    async with FlowTestEnv() as env:
        rec = await FeedRecorder.start(store_of(env))
        handle = await env.start(plain, 1)
        await env.run_until_idle()
        client = Client(env.store, OnlyOps(), clock=env.clock)

        with pytest.raises(Forbidden, match="mallory"):
            await client.delete(handle.run_id, actor="mallory")
        with pytest.raises(Forbidden, match="needs an actor"):
            await client.delete(handle.run_id)

        events = await client.events(handle.run_id)
        denied = [e.data for e in events if e.type == "auth.denied"]
        assert denied == [
            {"actor": "mallory", "action": "delete"}, {"actor": None, "action": "delete"}
        ]  # fmt: skip
        assert (await client.get(handle.run_id)).status is RunStatus.COMPLETED

        await client.delete(handle.run_id, actor="ops")

        with pytest.raises(RunNotFound):
            await client.get(handle.run_id)
        assert ("run.deleted", {"reason": "deleted", "actor": "ops"}) in await rec.of(handle.run_id)


def test_every_key_suffix_is_either_a_runs_own_or_shared() -> None:
    # A new per-run key must be listed in RUN_SUFFIXES, or deleting a run leaks it.
    assert set(RUN_SUFFIXES).isdisjoint(SHARED_SUFFIXES)
    assert {*RUN_SUFFIXES, *SHARED_SUFFIXES, "mailbox"} == set(SUFFIX)
