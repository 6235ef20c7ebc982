"""A run's own keys: its hash (lease, fence), its mailboxes, and what refusals leave alone."""

from __future__ import annotations

import pytest

from sdk.store import Consumed, EventType, Mailbox, RunStatus
from stores._keys import SUFFIX
from stores.redis import RedisStore
from testing.conformance._ids import ODD_IDS
from tests.redis_layout._support import (
    COMPLETED,
    GO,
    OWNER,
    RECOVERY_ERROR,
    T0,
    TTL,
    claim_ids,
    consume,
    mailbox_key,
    new_run,
    run_hash,
    snapshot,
    start_and_claim,
    step_record,
)


async def test_a_claim_writes_its_lease_into_the_run_hash(store: RedisStore) -> None:
    await store.create_run(new_run("r1"))

    await store.claim(OWNER, None, 1, T0 + 3, TTL)

    raw = await run_hash(store, "r1")
    assert raw["lease_owner"] == OWNER
    assert float(raw["lease_exp"]) == T0 + 3 + TTL


async def test_suspending_removes_the_lease_from_the_run_hash(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")

    await store.suspend("r1", claim.run.fence, T0, None, RunStatus.WAITING_FOR_SIGNAL, [], [GO])

    raw = await run_hash(store, "r1")
    assert "lease_owner" not in raw and "lease_exp" not in raw


async def test_the_fence_counts_from_zero_and_every_hand_over_bumps_it(
    store: RedisStore,
) -> None:
    await store.create_run(new_run("r1"))
    assert (await run_hash(store, "r1"))["fence"] == "0"

    (claim,) = await store.claim(OWNER, None, 1, T0, TTL)
    assert claim.run.fence == 1

    await store.release("r1", claim.run.fence)  # +1 to fence out, +1 for the next claim
    (claim,) = await store.claim(OWNER, None, 1, T0, TTL)
    assert claim.run.fence == 3

    # a recovery by poll: +1 to fence out the lost holder, +1 for its own claim
    claims, _ = await store.poll(OWNER, None, 1, T0 + TTL, TTL, 10, RECOVERY_ERROR)
    assert [c.run.fence for c in claims] == [5]


async def test_a_mailbox_key_length_prefixes_the_run_id(store: RedisStore) -> None:
    # Without the length prefix both would be "...mb:r:s:x:s:y".
    await store.create_run(new_run("r"))
    await store.create_run(new_run("r:s:x"))

    await store.signal("r", Mailbox("x:s:y"), '"for r"', None)
    await store.signal("r:s:x", Mailbox("y"), '"for r:s:x"', None)

    assert await store.client.lrange(mailbox_key(store, "r", "s:x:s:y"), 0, -1) == ['"for r"']
    assert await store.client.lrange(mailbox_key(store, "r:s:x", "s:y"), 0, -1) == ['"for r:s:x"']
    assert await store.client.smembers(store.keys.base(0) + SUFFIX["mailboxes"] + "r") == {
        "s:x:s:y"
    }


async def test_signals_and_decisions_live_in_mailboxes_of_their_own(store: RedisStore) -> None:
    await store.create_run(new_run("r1"))

    await store.signal("r1", Mailbox("go"), "1", None)
    await store.signal("r1", Mailbox("go", human=True), "2", None)

    assert await store.client.lrange(mailbox_key(store, "r1", "s:go"), 0, -1) == ["1"]
    assert await store.client.lrange(mailbox_key(store, "r1", "h:go"), 0, -1) == ["2"]


@pytest.mark.parametrize("run_id", ODD_IDS)
async def test_every_key_of_a_run_with_an_odd_id_stays_in_its_partition(
    store: RedisStore, run_id: str
) -> None:
    await store.create_run(new_run(run_id))
    (claim,) = await store.claim(OWNER, None, 1, T0, TTL)
    await store.record(run_id, claim.run.fence, "a#1", step_record("a#1", 0, 1), now=T0,
                       event=COMPLETED)  # fmt: skip
    await store.signal(run_id, GO, '"hi"', "d")
    await store.finish(run_id, claim.run.fence, RunStatus.COMPLETED, T0 + 1, result="1")

    keys = [k async for k in store.client.scan_iter(match=f"{store.keys.prefix}:*")]

    assert len(keys) > 5
    assert all(k.startswith(store.keys.base(0)) for k in keys)


async def test_a_signal_to_an_unknown_run_creates_no_key(store: RedisStore) -> None:
    before = await snapshot(store)

    await store.signal("nope", GO, "1", "d-1")

    assert await snapshot(store) == before
    assert await store.client.exists(mailbox_key(store, "nope", "s:go")) == 0


@pytest.mark.parametrize("end", [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED])
async def test_a_signal_to_a_finished_run_writes_no_key(store: RedisStore, end: RunStatus) -> None:
    claim = await start_and_claim(store, "r1")
    if end is RunStatus.CANCELED:
        await store.cancel("r1", "stop", T0)
    else:
        await store.finish("r1", claim.run.fence, end, T0)
    before = await snapshot(store)

    await store.signal("r1", GO, "1", "d-1")

    assert await snapshot(store) == before  # no mailbox, no mailbox-name set, no dedup entry
    assert await store.client.exists(mailbox_key(store, "r1", "s:go")) == 0


async def test_consume_with_a_stale_fence_leaves_the_mailbox_as_it_was(
    store: RedisStore,
) -> None:
    claim = await start_and_claim(store, "r1")
    await store.signal("r1", GO, "1", None)
    await store.release("r1", claim.run.fence)

    assert await consume(store, "r1", claim.run.fence) == (Consumed.FENCED, None)

    assert await store.client.lrange(mailbox_key(store, "r1", "s:go"), 0, -1) == ["1"]


async def test_derive_run_onto_a_taken_id_writes_no_key(store: RedisStore) -> None:
    claim = await start_and_claim(store, "taken")
    await store.record("taken", claim.run.fence, "x#1", step_record("x#1", 0, 1), now=T0,
                       event=COMPLETED)  # fmt: skip
    before = await snapshot(store)

    await store.derive_run(
        new_run("taken", source_run_id="src"), [("b#1", step_record("b#1", 0))],
        [("c#1", step_record("c#1", 1))], EventType.RUN_REPLAYED, "{}",
    )  # fmt: skip

    assert await snapshot(store) == before
    base = store.keys.base_of("taken")
    assert await store.client.exists(base + SUFFIX["lineage"] + "taken") == 0


async def test_claim_drops_a_queue_entry_whose_run_is_no_longer_ready(
    store: RedisStore,
) -> None:
    await store.create_run(new_run("r1"))
    await store.create_run(new_run("r2"))
    await store.cancel("r1", "x", T0)
    queue = store.keys.base(0) + SUFFIX["queue"] + "default"
    await store.client.zadd(queue, {"r1": 0})  # a stale entry, e.g. from a lost race

    assert await claim_ids(store) == ["r2"]

    assert await store.client.zcard(queue) == 0
