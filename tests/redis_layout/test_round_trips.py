"""The Redis store's promise under the protocol's: each call is one round trip (one EVALSHA).

The kit counts calls of the protocol (`testing.conformance`); these count what
goes over the wire, on every connection the store has.
"""

from __future__ import annotations

import pytest

from sdk.store import NewIntent, RunStatus
from stores.redis import RedisStore
from tests.redis_layout._support import (
    COMPLETED,
    GO,
    OWNER,
    T0,
    TTL,
    consume,
    count_sent,
    new_run,
    pending_wait,
    start_and_claim,
    step_record,
)


async def test_claim_loads_a_long_journal_in_one_round_trip(
    store: RedisStore, sent: list[str]
) -> None:
    claim = await start_and_claim(store, "r1")
    for i in range(200):
        await store.record("r1", claim.run.fence, f"s#{i + 1}", step_record(f"s#{i + 1}", i))
    await store.release("r1", claim.run.fence)
    sent.clear()  # scripts are loaded by now

    (again,) = await store.claim(OWNER, None, 1, T0, TTL)

    assert len(again.journal) == 200
    assert sent == ["EVALSHA"]


async def test_recording_a_step_is_one_round_trip_with_or_without_its_event(
    store: RedisStore, sent: list[str]
) -> None:
    claim = await start_and_claim(store, "r1")
    await store.record("r1", claim.run.fence, "s#1", step_record("s#1", 0))
    sent.clear()

    await store.record("r1", claim.run.fence, "s#2", step_record("s#2", 1))
    await store.record("r1", claim.run.fence, "s#3", step_record("s#3", 2), now=T0,
                       event=COMPLETED)  # fmt: skip

    assert sent == ["EVALSHA", "EVALSHA"]


async def test_recording_a_step_with_its_intents_is_one_round_trip(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    claim = await start_and_claim(store, "r1")
    await store.record("r1", claim.run.fence, "w#1", step_record("w#1", 0), now=T0,
                       intents=[NewIntent("email", "k0", "{}")])  # fmt: skip
    sent = count_sent(store, monkeypatch)

    two = [NewIntent("email", "k1", "{}"), NewIntent("sms", "k2", "{}")]
    await store.record("r1", claim.run.fence, "s#1", step_record("s#1", 1), now=T0, intents=two)

    assert sent == ["EVALSHA"]


async def test_marking_a_step_is_one_round_trip(store: RedisStore, sent: list[str]) -> None:
    claim = await start_and_claim(store, "r1")
    await store.mark("r1", claim.run.fence, "warm-up#1", T0)
    sent.clear()

    await store.mark("r1", claim.run.fence, "s#1", T0 + 3)

    assert sent == ["EVALSHA"]


async def test_starting_a_run_is_one_round_trip(store: RedisStore, sent: list[str]) -> None:
    await store.create_run(new_run("warm-up"))
    sent.clear()

    await store.create_run(new_run("r1"))

    assert sent == ["EVALSHA"]


async def test_waiting_costs_one_round_trip_per_call(store: RedisStore, sent: list[str]) -> None:
    claim = await start_and_claim(store, "r1")
    await store.signal("r1", GO, "1", None)
    await consume(store, "r1", claim.run.fence, key="~wait:warm#1")
    await store.suspend("warm-up", 0, T0, None, RunStatus.WAITING_FOR_SIGNAL, [], [])
    await store.finish("warm-up", 0, RunStatus.COMPLETED, T0)
    sent.clear()

    await store.signal("r1", GO, "2", None)
    await consume(store, "r1", claim.run.fence)
    await store.suspend("r1", claim.run.fence, T0, T0 + 5, RunStatus.WAITING_FOR_SIGNAL,
                        [("~wait:go#2", pending_wait("~wait:go#2", 1))], [GO])  # fmt: skip
    await store.finish("r1", claim.run.fence, RunStatus.COMPLETED, T0)  # fenced out: refused

    assert sent == ["EVALSHA"] * 4
