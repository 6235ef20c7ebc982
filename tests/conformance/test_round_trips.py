"""The storage rules' costs: one round trip per completed step and per journal load."""

from __future__ import annotations

from stores.redis import RedisStore
from tests.conformance._support import OWNER, T0, TTL, new_run, start_and_claim, step_record


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


async def test_recording_a_step_is_one_round_trip(store: RedisStore, sent: list[str]) -> None:
    claim = await start_and_claim(store, "r1")
    await store.record("r1", claim.run.fence, "s#1", step_record("s#1", 0))
    sent.clear()

    await store.record("r1", claim.run.fence, "s#2", step_record("s#2", 1))

    assert sent == ["EVALSHA"]


async def test_starting_a_run_is_one_round_trip(store: RedisStore, sent: list[str]) -> None:
    await store.create_run(new_run("warm-up"))
    sent.clear()

    await store.create_run(new_run("r1"))

    assert sent == ["EVALSHA"]
