"""The outbox at the store protocol: intents written with their step, leased, settled.

`record_out` is `record` plus the step's intents in the same script; a claim
leases due intents (an unsettled one is due again when its lease ends); only
the newest delivery may report a failure; canceling a run cancels its pending
intents; deleting a run keeps its undelivered intents until they are settled.
"""

from __future__ import annotations

import json

import pytest

from sdk._outbox import NewIntent
from sdk._types import RunStatus
from sdk.errors import LeaseLost
from stores._protocol import IntentClaim
from stores.redis import RedisStore
from tests.conformance._support import (
    T0,
    count_sent,
    journal_of,
    start_and_claim,
    status_of,
    step_record,
)
from tests.conformance.test_events import TRICKY

LEASE = 30.0


def intent(run_id: str, n: int, channel: str = "email", payload: str = '"hi"') -> NewIntent:
    key = f"{run_id}:s#1:{n}"
    body = (
        f'{{"run_id":{json.dumps(run_id)},"step_key":"s#1","channel":{json.dumps(channel)},'
        f'"payload":{payload},"idempotency_key":{json.dumps(key)},"created_at":{T0}}}'
    )
    return NewIntent(channel, key, body)


async def recorded(store: RedisStore, run_id: str, *intents: NewIntent) -> int:
    """Start and claim `run_id`, record step s#1 with `intents`; the run's fence."""
    claim = await start_and_claim(store, run_id)
    await store.record_out(run_id, claim.run.fence, "s#1", step_record("s#1", 0), intents, now=T0)
    return claim.run.fence


async def claim(store: RedisStore, now: float = T0, *channels: str) -> list[IntentClaim]:
    claims, _ = await store.claim_intents(list(channels) or ["email"], 100, now, LEASE)
    return claims


async def statuses(store: RedisStore, run_id: str) -> list[str]:
    rows = await store.intents(run_id)
    assert rows is not None
    return [h["status"] for _, h in rows]


async def event_types(store: RedisStore, run_id: str) -> list[str]:
    return [e.fields["type"] for e in await store.events(run_id, None, 1000)]


async def test_record_out_writes_the_step_and_its_intents_in_one_round_trip(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await start_and_claim(store, "r1")
    await store.record_out("r1", first.run.fence, "w#1", step_record("w#1", 0), [intent("r1", 0)])
    sent = count_sent(store, monkeypatch)
    out = [intent("r1", 1, payload=TRICKY), intent("r1", 2, channel="sms")]
    await store.record_out("r1", first.run.fence, "s#1", step_record("s#1", 1), out, now=T0)
    assert sent == ["EVALSHA"]
    monkeypatch.undo()

    assert "s#1" in await journal_of(store, "r1")
    taken = await claim(store, T0, "email", "sms")
    assert [c.body for c in taken] == [intent("r1", 0).body, out[0].body, out[1].body]
    assert [(c.run_id, c.delivery, c.failures) for c in taken] == [("r1", 1, 0)] * 3
    assert (await event_types(store, "r1")).count("side_effect.recorded") == 3


async def test_record_out_with_a_stale_fence_writes_neither_the_step_nor_its_intents(
    store: RedisStore,
) -> None:
    fence = await recorded(store, "r1")
    with pytest.raises(LeaseLost):
        await store.record_out("r1", fence + 1, "s#2", step_record("s#2", 1), [intent("r1", 1)])
    assert "s#2" not in await journal_of(store, "r1")
    assert await claim(store) == []
    assert await store.intents("r1") == []


async def test_record_out_run_twice_writes_its_intents_once(store: RedisStore) -> None:
    # A connection retry re-runs a script whose reply was lost.
    claim_ = await start_and_claim(store, "r1")
    for _ in range(2):
        await store.record_out(
            "r1", claim_.run.fence, "s#1", step_record("s#1", 0), [intent("r1", 1)], now=T0
        )
    assert len(await claim(store)) == 1


async def test_a_claimed_intent_is_leased_and_delivered_again_when_its_lease_ends(
    store: RedisStore,
) -> None:
    await recorded(store, "r1", intent("r1", 1))
    claims, next_due = await store.claim_intents(["email"], 10, T0, LEASE)
    assert [c.delivery for c in claims] == [1]
    assert next_due == T0 + LEASE

    assert await claim(store, T0 + LEASE - 0.001) == []
    (again,) = await claim(store, T0 + LEASE)
    assert (again.intent_id, again.delivery, again.body) == (
        claims[0].intent_id, 2, claims[0].body,
    )  # fmt: skip


async def test_a_claim_takes_only_due_intents_of_the_given_channels(store: RedisStore) -> None:
    await recorded(store, "r1", intent("r1", 1, "email"), intent("r1", 2, "sms"))
    assert [c.body for c in await claim(store, T0 - 1, "email", "sms")] == []
    assert [c.body for c in await claim(store, T0, "sms")] == [intent("r1", 2, "sms").body]
    assert await claim(store, T0, "push") == []


async def test_only_the_newest_delivery_may_fail_but_any_may_report_it_sent(
    store: RedisStore,
) -> None:
    await recorded(store, "r1", intent("r1", 1))
    (old,) = await claim(store, T0)
    (new,) = await claim(store, T0 + LEASE)  # the first worker's lease ran out

    assert not await store.settle_intent(old, "retry", T0 + LEASE, due=T0 + 99, error="{}")
    assert not await store.settle_intent(old, "release", T0 + LEASE)
    assert await store.settle_intent(old, "sent", T0 + LEASE)  # it was delivered after all
    assert not await store.settle_intent(new, "sent", T0 + LEASE)  # settled already
    assert await statuses(store, "r1") == ["sent"]
    assert await claim(store, T0 + 10 * LEASE) == []


async def test_a_failed_delivery_is_due_again_at_its_retry_time(store: RedisStore) -> None:
    await recorded(store, "r1", intent("r1", 1))
    (first,) = await claim(store, T0)
    error = '{"type":"builtins:OSError","message":"down"}'
    assert await store.settle_intent(first, "retry", T0 + 1, due=T0 + 50, error=error)

    assert await claim(store, T0 + 49) == []
    (second,) = await claim(store, T0 + 50)
    assert (second.delivery, second.failures) == (2, 1)
    rows = await store.intents("r1")
    assert rows is not None and rows[0][1]["error"] == error
    assert "outbox.failed" in await event_types(store, "r1")


async def test_a_dead_intent_is_never_claimed_again(store: RedisStore) -> None:
    await recorded(store, "r1", intent("r1", 1))
    (first,) = await claim(store, T0)
    assert await store.settle_intent(first, "dead", T0, error="{}", event_data='{"x":1}')
    assert await claim(store, T0 + 10 * LEASE) == []
    assert await statuses(store, "r1") == ["dead"]
    (event,) = [e for e in await store.events("r1", None, 100) if e.fields["type"] == "outbox.dead"]
    assert event.fields["data"] == '{"x":1}'


async def test_a_released_intent_is_due_at_once_without_a_failure(store: RedisStore) -> None:
    await recorded(store, "r1", intent("r1", 1))
    (first,) = await claim(store, T0)
    assert await store.settle_intent(first, "release", T0 + 1)
    (again,) = await claim(store, T0 + 1)
    assert (again.delivery, again.failures) == (2, 0)


async def test_cancel_cancels_pending_intents_and_resume_restores_them(store: RedisStore) -> None:
    await recorded(store, "r1", intent("r1", 1), intent("r1", 2))
    (in_flight, _) = await claim(store, T0)

    await store.cancel("r1", "stop", T0 + 1)
    assert await statuses(store, "r1") == ["canceled", "canceled"]
    assert await claim(store, T0 + 10 * LEASE) == []
    assert not await store.settle_intent(in_flight, "sent", T0 + 2)  # too late to count

    await store.resume("r1", None, now=T0 + 3)
    assert await statuses(store, "r1") == ["pending", "pending"]
    assert len(await claim(store, T0 + 3)) == 2


async def test_a_failed_run_keeps_its_intents_pending(store: RedisStore) -> None:
    fence = await recorded(store, "r1", intent("r1", 1))
    error = '{"type":"builtins:ValueError","message":"bad"}'
    await store.finish("r1", fence, RunStatus.FAILED, T0 + 1, {"error": error})
    assert await status_of(store, "r1") is RunStatus.FAILED
    assert len(await claim(store, T0 + 1)) == 1


async def test_deleting_a_run_keeps_undelivered_intents_until_they_are_settled(
    store: RedisStore,
) -> None:
    fence = await recorded(store, "r1", intent("r1", 1), intent("r1", 2))
    first, second = await claim(store, T0)
    assert await store.settle_intent(first, "sent", T0)
    await store.finish("r1", fence, RunStatus.COMPLETED, T0 + 1, {"result": "null"})
    intent_key = store.keys.intent(0, second.intent_id)

    await store.delete("r1", T0 + 2)
    assert not await store.client.exists(store.keys.intent(0, first.intent_id))
    assert await store.client.exists(intent_key)  # still to be delivered
    assert await store.intents("r1") is None

    (redelivered,) = await claim(store, T0 + LEASE)
    assert await store.settle_intent(redelivered, "sent", T0 + LEASE)
    assert not await store.client.exists(intent_key)
    assert not await store.client.exists(store.keys.events("r1"))  # no event log recreated


async def test_renewing_extends_held_leases_and_reports_lost_ones(store: RedisStore) -> None:
    await recorded(store, "r1", intent("r1", 1), intent("r1", 2))
    held, settled = await claim(store, T0)
    assert await store.settle_intent(settled, "sent", T0)

    assert await store.renew_intents([held, settled], T0 + 2 * LEASE) == [settled.intent_id]
    assert await claim(store, T0 + LEASE) == []
    assert [c.delivery for c in await claim(store, T0 + 2 * LEASE)] == [2]


async def test_a_recorded_intent_wakes_a_waiting_dispatcher(store: RedisStore) -> None:
    assert not await store.wait_intents(["email"], 0.01)
    await recorded(store, "r1", intent("r1", 1))
    assert await store.wait_intents(["sms", "email"], 5.0)
    await claim(store, T0)  # nothing left due: leftover wake-up tokens are dropped
    assert not await store.wait_intents(["email"], 0.01)
