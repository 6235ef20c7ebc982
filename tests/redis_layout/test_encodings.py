"""How the Redis store encodes what it keeps: JSON spliced, never decoded, in Lua.

Real Redis's ``cjson`` turns ``[]`` into ``{}``, rounds numbers to 14 digits
and makes ``cjson.null`` truthy, and fakeredis's Lua does not: the scripts
keep JSON opaque (splice, store as strings). These pin the bytes on both.
"""

from __future__ import annotations

import pytest

from sdk.store import EventType, StepEvent
from stores._codec import splice_prefix
from stores._keys import SUFFIX
from stores.redis import RedisStore
from tests.redis_layout._support import (
    COMPLETED,
    GO,
    PAYLOADS,
    RECOVERY_ERROR,
    T0,
    TTL,
    consume,
    start_and_claim,
    step_record,
    wait_record,
)


@pytest.mark.parametrize("payload", [p for _, p in PAYLOADS], ids=[i for i, _ in PAYLOADS])
async def test_consume_splices_the_payload_into_the_record_byte_for_byte(
    store: RedisStore, payload: str
) -> None:
    claim = await start_and_claim(store, "r1")
    await store.signal("r1", GO, payload, None)

    await consume(store, "r1", claim.run.fence)

    raw = await store.client.hget(store.keys.journal("r1"), "~wait:go#1")
    assert raw == splice_prefix(wait_record("~wait:go#1", 0)) + payload + "}"


async def test_events_are_stream_entries_with_only_the_fields_they_have(
    store: RedisStore,
) -> None:
    claim = await start_and_claim(store, "r1")
    failed = StepEvent(EventType.STEP_FAILED, '{"big":12345678901234567890}')
    await store.record("r1", claim.run.fence, "s#1", step_record("s#1", 0), now=T0 + 1,
                       event=failed)  # fmt: skip
    await store.tick(T0 + TTL + 2, 10, RECOVERY_ERROR)

    entries = await store.client.xrange(store.keys.events("r1"))

    assert [fields for _, fields in entries] == [  # type: ignore[union-attr]
        {"type": "run.created", "at": repr(T0)},
        {"type": "run.started", "at": repr(T0)},
        {"type": "step.failed", "at": repr(T0 + 1), "step": "s#1",
         "data": '{"big":12345678901234567890}'},
        {"type": "run.lease_expired", "at": repr(T0 + TTL + 2)},
    ]  # fmt: skip


async def test_a_step_checkpoint_lives_in_its_journal_write_mark(store: RedisStore) -> None:
    # A completed step's checkpoint is final: "seq:id:at" in its js: entry, not a
    # stream entry; run-level checkpoints are stream entries.
    claim = await start_and_claim(store, "r1")
    await store.record("r1", claim.run.fence, "~now#1", step_record("~now#1", 0), now=T0)
    await store.record("r1", claim.run.fence, "s#1", step_record("s#1", 1), now=T0 + 2,
                       event=COMPLETED)  # fmt: skip

    marks = await store.client.hgetall(store.keys.base(0) + SUFFIX["jseq"] + "r1")
    stream = await store.client.xrange(store.keys.checkpoints("r1"))

    assert marks == {"~now#1": "1", "s#1": f"2:2:{T0 + 2!r}"}
    assert [fields for _, fields in stream] == [  # type: ignore[union-attr]
        {"id": "1", "kind": "run_started", "step": "", "status": "running", "at": repr(T0),
         "seq": "0"},
    ]  # fmt: skip
    run = await store.client.hgetall(store.keys.run("r1"))
    assert (run["jseq"], run["cp_n"]) == ("2", "2")
