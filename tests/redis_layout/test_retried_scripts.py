"""A connection retry can run a script twice (its first reply lost): no harm done.

`RedisStore.from_url` retries commands on connection errors, so every script
must be safe to run twice. The protocol promises it for `consume` (the kit
checks that); the rest is this store's own promise.
"""

from __future__ import annotations

from sdk.store import NewIntent
from stores.redis import RedisStore
from tests.redis_layout._support import (
    GO,
    T0,
    consume,
    mailbox_key,
    start_and_claim,
    step_record,
)


async def test_recording_a_step_with_its_intents_twice_writes_them_once(
    store: RedisStore,
) -> None:
    claim = await start_and_claim(store, "r1")
    intents = [NewIntent("email", "r1:s#1:1", '{"n":1}')]

    for _ in range(2):
        assert await store.record(
            "r1", claim.run.fence, "s#1", step_record("s#1", 0), now=T0, intents=intents
        )

    taken, _ = await store.claim_intents(["email"], 10, T0, 30.0)
    assert len(taken) == 1
    assert len(await store.intents("r1") or []) == 1


async def test_consume_run_twice_takes_one_signal_off_the_list(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")
    await store.signal("r1", GO, '{"n":1}', None)
    await store.signal("r1", GO, '{"n":2}', None)

    await consume(store, "r1", claim.run.fence)
    await consume(store, "r1", claim.run.fence)

    assert await store.client.lrange(mailbox_key(store, "r1", "s:go"), 0, -1) == ['{"n":2}']


async def test_a_signal_run_twice_with_its_dedup_id_is_kept_once(store: RedisStore) -> None:
    await start_and_claim(store, "r1")

    for _ in range(2):
        await store.signal("r1", GO, "1", "d-1")

    assert await store.client.lrange(mailbox_key(store, "r1", "s:go"), 0, -1) == ["1"]
