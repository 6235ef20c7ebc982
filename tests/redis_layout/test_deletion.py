"""Deleting runs leaves no key behind: every key of the run, and its index entries.

Deleting removes a run's record, journal, logs, mailboxes, dedup ids, lineage
and done notice, and its entries in every index; it never touches a run that
has not finished. Deadlines are arguments, never Redis key TTLs.
"""

from __future__ import annotations

import json

import pytest

from sdk.store import Delivery, EventType, Mailbox, NewIntent, RunStatus
from stores._keys import SUFFIX
from stores.redis import RedisStore
from tests.redis_layout._support import (
    GO,
    OWNER,
    RECOVERY_ERROR,
    T0,
    TTL,
    indexed,
    keys_naming,
    new_run,
    recording,
    snapshot,
    start_and_claim,
    step_record,
)

ERROR = json.dumps({"type": "builtins:ValueError", "message": "bad", "reason": "step_failed"})


async def busy_finished_run(store: RedisStore, run_id: str, status: RunStatus) -> None:
    """A run that used every kind of key: journal, lineage, mailboxes, dedup ids, events."""
    await store.derive_run(
        new_run(run_id, source_run_id="src"), [("a#0", step_record("a#0", 0))],
        [("b#1", step_record("b#1", 1))], EventType.RUN_REPLAYED, "{}",
    )  # fmt: skip
    (claim,) = await store.claim(OWNER, None, 1, T0, TTL)
    await store.record(run_id, claim.run.fence, "a#1", step_record("a#1", 2, 1), now=T0)
    await store.signal(run_id, Mailbox("unread"), '"x"', "dedup-1", now=T0)
    await store.signal(run_id, Mailbox("other", human=True), '"y"', None, now=T0)
    if status is RunStatus.CANCELED:
        await store.cancel(run_id, "no", T0 + 1)
    elif status is RunStatus.COMPLETED:
        await store.finish(run_id, claim.run.fence, status, T0 + 1, result="1")
    else:
        await store.finish(run_id, claim.run.fence, status, T0 + 1, error=ERROR)


@pytest.mark.parametrize("status", [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED])
async def test_delete_of_a_finished_run_removes_every_key_and_index_entry(
    store: RedisStore, status: RunStatus
) -> None:
    await busy_finished_run(store, "r-del-1", status)
    await store.create_run(new_run("other"))
    k, base = store.keys, store.keys.base(0)
    kinds = {key.removeprefix(base).split(":", 1)[0] for key in await keys_naming(store, "r-del-1")}
    assert {"run", "j", "mb", "mbn", "dd", "ev", "cp", "ln", "js", "done"} <= kinds

    await store.delete("r-del-1", T0 + 2)

    assert await keys_naming(store, "r-del-1") == set()
    assert await indexed(store, "r-del-1") == set()
    assert await store.client.exists(k.run("other")) == 1


async def test_delete_of_a_run_that_has_not_finished_writes_nothing(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")
    await store.suspend("r1", claim.run.fence, T0, None, RunStatus.WAITING_FOR_SIGNAL, [], [GO])
    before = await snapshot(store)

    await store.delete("r1", T0 + 5)

    assert await snapshot(store) == before


async def test_a_deleted_run_leaves_no_key_behind_its_old_workers_late_writes(
    store: RedisStore,
) -> None:
    claim = await start_and_claim(store, "r1")
    await store.finish("r1", claim.run.fence, RunStatus.COMPLETED, T0, result="1")
    await store.delete("r1", T0)

    await store.record("r1", claim.run.fence, "a#1", step_record("a#1", 0), now=T0)
    await store.renew([("r1", claim.run.fence)], T0 + TTL)
    await store.release("r1", claim.run.fence)

    assert await keys_naming(store, "r1") == set()


async def test_delete_on_success_keeps_only_the_tombstone_and_the_done_notice(
    store: RedisStore,
) -> None:
    claim = await start_and_claim(store, "r-dos")
    await store.signal("r-dos", Mailbox("late"), '"x"', "d1", now=T0)

    async with recording(store) as feed:
        await store.finish("r-dos", claim.run.fence, RunStatus.COMPLETED, T0 + 1, result="1",
                           delete_until=T0 + 301)  # fmt: skip

        deleted = await feed.of("r-dos")
    k = store.keys
    assert await keys_naming(store, "r-dos") == {k.gone("r-dos"), k.done("r-dos")}
    assert await indexed(store, "r-dos") == {"expiry"}
    assert await store.client.zscore(k.expiry(0), "r-dos") == T0 + 301
    assert ("run.deleted", {"reason": "delete_on_success"}) in deleted

    await store.tick(T0 + 301, 10, RECOVERY_ERROR)
    assert await keys_naming(store, "r-dos") == set()
    assert await indexed(store, "r-dos") == set()


async def test_expiry_deletes_every_key_and_announces_why(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r-exp")
    await store.finish("r-exp", claim.run.fence, RunStatus.COMPLETED, T0 + 1, result="1",
                       retention=60.0)  # fmt: skip

    async with recording(store) as feed:
        await store.tick(T0 + 61, 10, RECOVERY_ERROR)

        deleted = await feed.of("r-exp")
    assert await keys_naming(store, "r-exp") == set()
    assert await indexed(store, "r-exp") == set()
    assert ("run.deleted", {"reason": "retention"}) in deleted


async def test_an_undelivered_intent_outlives_its_deleted_run_until_it_is_settled(
    store: RedisStore,
) -> None:
    claim = await start_and_claim(store, "r1")
    out = [NewIntent("email", f"r1:s#1:{n}", f'{{"n":{n}}}') for n in (1, 2)]
    await store.record("r1", claim.run.fence, "s#1", step_record("s#1", 0), now=T0, intents=out)
    (first, second), _ = await store.claim_intents(["email"], 10, T0, 30.0)
    await store.settle_intent(first, Delivery.SENT, T0)
    await store.finish("r1", claim.run.fence, RunStatus.COMPLETED, T0 + 1, result="null")

    await store.delete("r1", T0 + 2)

    assert not await store.client.exists(store.keys.intent(0, first.intent_id))
    assert await store.client.exists(store.keys.intent(0, second.intent_id))
    (again,), _ = await store.claim_intents(["email"], 10, T0 + 30, 30.0)
    await store.settle_intent(again, Delivery.SENT, T0 + 30)
    assert not await store.client.exists(store.keys.intent(0, second.intent_id))
    assert not await store.client.exists(store.keys.events("r1"))  # no event log recreated


async def test_deletion_deadlines_are_never_redis_key_ttls(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")
    await store.finish("r1", claim.run.fence, RunStatus.COMPLETED, T0 + 1, result="1",
                       delete_until=T0 + 301)  # fmt: skip
    await store.create_run(new_run("r2", retention=60.0))
    await store.cancel("r2", "no", T0)

    keys = [key async for key in store.client.scan_iter(match=store.keys.pattern())]

    assert keys
    assert [key for key in keys if await store.client.ttl(key) != -1] == []
    assert SUFFIX["gone"] in "".join(keys)
