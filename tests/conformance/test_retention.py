"""Retention at the store protocol: delete, delete on success, expiry of finished runs.

Deleting removes every key of a run (record, journal, logs, mailboxes, dedup
ids, lineage, done notice) and its entries in every index. It never touches a
run that has not finished. Deadlines are arguments (the injected clock), never
Redis key TTLs: a `tick` at or after the deadline deletes, one before keeps.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

from sdk._types import RunStatus
from sdk.errors import InvalidTransition, LeaseLost, RunNotFound
from stores._keys import SUFFIX
from stores.redis import RedisStore
from tests.conformance._support import (
    OWNER,
    RECOVERY_ERROR,
    T0,
    TTL,
    FeedRecorder,
    claim_ids,
    new_run,
    snapshot,
    start_and_claim,
    status_index,
    status_of,
    step_record,
)

DAY = 86_400.0
ERROR = json.dumps({"type": "builtins:ValueError", "message": "bad", "reason": "step_failed"})


async def keys_naming(store: RedisStore, run_id: str) -> set[str]:
    """Every key of this store whose name contains `run_id`."""
    return {k async for k in store.client.scan_iter(match=store.keys.pattern()) if run_id in k}


async def indexed(store: RedisStore, run_id: str) -> set[str]:
    """The partition-wide indexes that still hold `run_id`."""
    k = store.keys
    holding = {st for st, ids in (await status_index(store)).items() if run_id in ids}
    for name, key in (
        ("runs", k.all_runs(0)),
        ("expiry", k.expiry(0)),
        ("timers", k.base(0) + SUFFIX["timers"]),
        ("leases", k.base(0) + SUFFIX["leases"]),
        ("queue", k.base(0) + SUFFIX["queue"] + "default"),
    ):
        if await store.client.zscore(key, run_id) is not None:
            holding.add(name)
    return holding


async def complete(
    store: RedisStore, run_id: str, *, retention: float | None = None,
    delete_until: float | None = None,
) -> None:  # fmt: skip
    """Start, claim and complete a run at T0 + 1."""
    claim = await start_and_claim(store, run_id)
    await store.finish(
        run_id, claim.run.fence, RunStatus.COMPLETED, T0 + 1, {"result": '{"n":1}'},
        retention=retention, delete_until=delete_until,
    )  # fmt: skip


async def busy_finished_run(store: RedisStore, run_id: str, status: RunStatus) -> None:
    """A run that used every kind of key: journal, mailboxes, dedup ids, events."""
    claim = await start_and_claim(store, run_id)
    fence = claim.run.fence
    await store.record(run_id, fence, "a#1", step_record("a#1", 0, 1), now=T0)
    await store.signal(run_id, "s:unread", '"x"', "dedup-1", now=T0)
    await store.signal(run_id, "h:other", '"y"', None, now=T0)
    await store.client.hset(store.keys.base_of(run_id) + SUFFIX["lineage"] + run_id, "b#1", "{}")
    if status is RunStatus.CANCELED:
        await store.cancel(run_id, "no", T0 + 1)
    else:
        fields = {"result": "1"} if status is RunStatus.COMPLETED else {"error": ERROR}
        await store.finish(run_id, fence, status, T0 + 1, fields)


# -- explicit delete --------------------------------------------------------------


@pytest.mark.parametrize("status", [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED])
async def test_delete_of_a_finished_run_removes_every_key_and_index_entry(
    store: RedisStore, status: RunStatus
) -> None:
    rec = await FeedRecorder.start(store)
    await busy_finished_run(store, "r-del-1", status)
    await store.create_run(new_run("other"))
    assert len(await keys_naming(store, "r-del-1")) >= 8  # the run really had keys

    await store.delete("r-del-1", T0 + 2, event_data='{"actor":"ops"}')

    assert await keys_naming(store, "r-del-1") == set()
    assert await indexed(store, "r-del-1") == set()
    assert await store.get_run("r-del-1") is None
    assert await store.get_tombstone("r-del-1") is None
    assert await status_of(store, "other") is RunStatus.PENDING  # others untouched
    assert ("run.deleted", {"actor": "ops"}) in await rec.of("r-del-1")


@pytest.mark.parametrize("how", ["pending", "running", "waiting", "replaying"])
async def test_delete_of_an_unfinished_run_is_refused_and_deletes_nothing(
    store: RedisStore, how: str
) -> None:
    if how == "pending":
        await store.create_run(new_run("r1"))
    else:
        claim = await start_and_claim(store, "r1")
        if how == "waiting":
            await store.suspend(
                "r1", claim.run.fence, T0, None, RunStatus.WAITING_FOR_SIGNAL, [], ["s:go"]
            )
        elif how == "replaying":
            await store.tick(T0 + TTL + 1, 10, RECOVERY_ERROR)
    before = await snapshot(store)
    expected = (await status_of(store, "r1")).value

    with pytest.raises(InvalidTransition) as caught:
        await store.delete("r1", T0 + 5)

    assert caught.value.current == expected
    assert (caught.value.requested, caught.value.action) == (None, "delete")
    assert "cancel it first" in str(caught.value)
    assert await snapshot(store) == before


async def test_delete_of_an_unknown_run_raises_run_not_found(store: RedisStore) -> None:
    with pytest.raises(RunNotFound):
        await store.delete("nope", T0)


async def test_a_deleted_run_refuses_late_writes_of_its_old_worker(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")
    await store.finish("r1", claim.run.fence, RunStatus.COMPLETED, T0, {"result": "1"})
    await store.delete("r1", T0)

    with pytest.raises(LeaseLost):
        await store.record("r1", claim.run.fence, "a#1", step_record("a#1", 0), now=T0)
    assert await store.renew([("r1", claim.run.fence)], T0 + TTL) == ["r1"]
    assert await keys_naming(store, "r1") == set()


async def test_a_deleted_run_id_can_be_started_again(store: RedisStore) -> None:
    await complete(store, "r1")
    await store.delete("r1", T0 + 2)

    outcome = await store.create_run(new_run("r1", created_at=T0 + 3))

    assert outcome.created
    assert await status_of(store, "r1") is RunStatus.PENDING


# -- delete on success ---------------------------------------------------------------


async def test_finish_with_delete_until_leaves_only_the_result_tombstone(
    store: RedisStore,
) -> None:
    rec = await FeedRecorder.start(store)
    claim = await start_and_claim(store, "r-dos")
    await store.signal("r-dos", "s:late", '"x"', "d1", now=T0)
    await store.finish(
        "r-dos", claim.run.fence, RunStatus.COMPLETED, T0 + 1,
        {"result": '{"total":12345678901234567890}', "result_type": "m:T"},
        delete_until=T0 + 301,
    )  # fmt: skip

    k = store.keys
    assert await keys_naming(store, "r-dos") == {k.gone("r-dos"), k.done("r-dos")}
    assert await indexed(store, "r-dos") == {"expiry"}
    assert await store.get_run("r-dos") is None
    tomb = await store.get_tombstone("r-dos")
    assert tomb is not None
    assert tomb.record.status is RunStatus.COMPLETED
    assert tomb.raw_result == '{"total":12345678901234567890}'
    assert tomb.result_type == "m:T"
    assert tomb.args == ""  # the arguments are not kept
    assert await store.wait_finished("r-dos", 1.0) is True
    assert [t for t, _ in await rec.of("r-dos")][-2:] == [
        "run.completed", "run.deleted"
    ]  # fmt: skip


async def test_the_result_tombstone_goes_when_its_grace_ends(store: RedisStore) -> None:
    await complete(store, "r-dos", delete_until=T0 + 301)

    await store.tick(T0 + 300, 10, RECOVERY_ERROR)
    assert await store.get_tombstone("r-dos") is not None

    await store.tick(T0 + 301, 10, RECOVERY_ERROR)
    assert await store.get_tombstone("r-dos") is None
    assert await keys_naming(store, "r-dos") == set()
    assert await indexed(store, "r-dos") == set()


async def test_delete_until_does_not_delete_a_failed_run(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")
    await store.finish(
        "r1", claim.run.fence, RunStatus.FAILED, T0 + 1, {"error": ERROR}, delete_until=T0 + 2
    )

    await store.tick(T0 + 10 * DAY, 10, RECOVERY_ERROR)
    assert await status_of(store, "r1") is RunStatus.FAILED
    assert await store.get_tombstone("r1") is None


async def test_starting_a_run_id_again_clears_the_tombstone_of_its_deleted_run(
    store: RedisStore,
) -> None:
    await complete(store, "r1", delete_until=T0 + 301)

    assert (await store.create_run(new_run("r1", created_at=T0 + 2))).created

    assert await store.get_tombstone("r1") is None
    assert await store.wait_finished("r1", 0.05) is False  # the new run has not finished
    await store.tick(T0 + 400, 10, RECOVERY_ERROR)  # the old grace deadline passes
    assert await status_of(store, "r1") is RunStatus.PENDING
    assert await claim_ids(store, now=T0 + 400) == ["r1"]


# -- expiry -----------------------------------------------------------------------------


async def test_a_completed_run_is_deleted_at_its_retention_deadline_not_before(
    store: RedisStore,
) -> None:
    rec = await FeedRecorder.start(store)
    await complete(store, "r-exp", retention=DAY)
    stored: Any = await store.client.hget(store.keys.run("r-exp"), "expires_at")
    assert float(stored) == T0 + 1 + DAY

    await store.tick(T0 + DAY, 10, RECOVERY_ERROR)
    assert await status_of(store, "r-exp") is RunStatus.COMPLETED

    await store.tick(T0 + 1 + DAY, 10, RECOVERY_ERROR)
    assert await store.get_run("r-exp") is None
    assert await keys_naming(store, "r-exp") == set()
    assert await indexed(store, "r-exp") == set()
    assert ("run.deleted", {"reason": "retention"}) in await rec.of("r-exp")


async def test_a_failed_run_never_expires(store: RedisStore) -> None:
    await store.create_run(attrs.evolve(new_run("r1"), retention=60.0))
    [claim] = await store.claim(OWNER, None, 1, T0, TTL)
    await store.finish(
        "r1", claim.run.fence, RunStatus.FAILED, T0 + 1, {"error": ERROR}, retention=60.0
    )

    await store.tick(T0 + 10 * DAY, 10, RECOVERY_ERROR)

    assert await status_of(store, "r1") is RunStatus.FAILED
    assert "expiry" not in await indexed(store, "r1")


async def test_a_run_failed_by_lease_recoveries_never_expires(store: RedisStore) -> None:
    await store.create_run(attrs.evolve(new_run("r1"), retention=60.0))
    await store.claim(OWNER, None, 1, T0, TTL)

    await store.tick(T0 + TTL + 1, 0, RECOVERY_ERROR)  # max_recoveries=0: fails at once
    await store.tick(T0 + 10 * DAY, 0, RECOVERY_ERROR)

    assert await status_of(store, "r1") is RunStatus.FAILED


async def test_a_canceled_run_expires_after_the_retention_recorded_at_start(
    store: RedisStore,
) -> None:
    await store.create_run(attrs.evolve(new_run("r1"), retention=60.0))
    await store.create_run(new_run("r2"))  # no retention: kept
    await store.cancel("r1", "no", T0 + 5)
    await store.cancel("r2", "no", T0 + 5)

    await store.tick(T0 + 64, 10, RECOVERY_ERROR)
    assert await status_of(store, "r1") is RunStatus.CANCELED

    await store.tick(T0 + 65, 10, RECOVERY_ERROR)
    assert await store.get_run("r1") is None
    assert await status_of(store, "r2") is RunStatus.CANCELED


async def test_the_workers_retention_applies_when_none_was_recorded_at_start(
    store: RedisStore,
) -> None:
    await complete(store, "r1", retention=10.0)  # started without a retention

    await store.tick(T0 + 11, 10, RECOVERY_ERROR)

    assert await store.get_run("r1") is None


async def test_unfinished_runs_never_expire(store: RedisStore) -> None:
    await store.create_run(attrs.evolve(new_run("waiting"), retention=1.0))
    await store.create_run(attrs.evolve(new_run("pending"), retention=1.0))
    [claim] = await store.claim(OWNER, None, 1, T0, TTL)  # FIFO: "waiting"
    await store.suspend(
        "waiting", claim.run.fence, T0, None, RunStatus.WAITING_FOR_SIGNAL, [], ["s:go"]
    )

    await store.tick(T0 + 10 * DAY, 10, RECOVERY_ERROR)

    assert await status_of(store, "waiting") is RunStatus.WAITING_FOR_SIGNAL
    assert await status_of(store, "pending") is RunStatus.PENDING


async def test_resuming_a_canceled_run_cancels_its_expiry(store: RedisStore) -> None:
    await store.create_run(attrs.evolve(new_run("r1"), retention=60.0))
    await store.cancel("r1", "oops", T0 + 1)

    await store.resume("r1", None, now=T0 + 2)
    assert "expiry" not in await indexed(store, "r1")
    await store.tick(T0 + DAY, 10, RECOVERY_ERROR)

    assert await status_of(store, "r1") is RunStatus.RUNNING
    assert await store.client.hget(store.keys.run("r1"), "expires_at") is None
    assert "expiry" not in await indexed(store, "r1")


@pytest.mark.parametrize("status", [RunStatus.PENDING, RunStatus.FAILED])
async def test_a_stray_expiry_entry_never_deletes_a_pending_or_failed_run(
    store: RedisStore, status: RunStatus
) -> None:
    if status is RunStatus.PENDING:
        await store.create_run(new_run("r1"))
    else:
        claim = await start_and_claim(store, "r1")
        await store.finish("r1", claim.run.fence, RunStatus.FAILED, T0, {"error": ERROR})
    await store.client.zadd(store.keys.expiry(0), {"r1": T0})  # e.g. written by hand

    await store.tick(T0 + 1, 10, RECOVERY_ERROR)

    assert await status_of(store, "r1") is status
    assert "expiry" not in await indexed(store, "r1")  # the stray entry is dropped


async def test_one_tick_deletes_at_most_its_limit(store: RedisStore) -> None:
    for i in range(5):
        await store.create_run(attrs.evolve(new_run(f"r{i}"), retention=1.0))
        await store.cancel(f"r{i}", "no", T0)

    await store.tick(T0 + 2, 10, RECOVERY_ERROR, limit=3)
    left = [i for i in range(5) if await store.get_run(f"r{i}") is not None]
    assert len(left) == 2

    await store.tick(T0 + 2, 10, RECOVERY_ERROR, limit=3)
    assert [i for i in range(5) if await store.get_run(f"r{i}") is not None] == []
