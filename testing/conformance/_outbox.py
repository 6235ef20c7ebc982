"""The outbox: intents written with their step, leased to dispatchers, settled.

A claim leases due intents (an unsettled one is due again when its lease
ends); only the newest delivery may report a failure; canceling a run cancels
its pending intents, resuming it restores them; deleting a run keeps its
undelivered intents until they are settled.
"""

from __future__ import annotations

import json

from sdk.store import Delivery, IntentClaim, NewIntent, RunStatus, Store
from testing.conformance._support import (
    T0,
    TRICKY,
    async_checks,
    journal_of,
    start_and_claim,
    status_of,
    step_record,
    types_of,
)

LEASE = 30.0


def intent(run_id: str, n: int, channel: str = "email", payload: str = '"hi"') -> NewIntent:
    key = f"{run_id}:s#1:{n}"
    body = (
        f'{{"run_id":{json.dumps(run_id)},"step_key":"s#1","channel":{json.dumps(channel)},'
        f'"payload":{payload},"idempotency_key":{json.dumps(key)},"created_at":{T0}}}'
    )
    return NewIntent(channel, key, body)


async def recorded(store: Store, run_id: str, *intents: NewIntent) -> int:
    """Start and claim `run_id`, record step s#1 with `intents`; the run's fence."""
    claim = await start_and_claim(store, run_id)
    ok = await store.record(
        run_id, claim.run.fence, "s#1", step_record("s#1", 0), now=T0, intents=intents
    )
    assert ok
    return claim.run.fence


async def lease(store: Store, now: float = T0, *channels: str) -> list[IntentClaim]:
    claims, _ = await store.claim_intents(list(channels) or ["email"], 100, now, LEASE)
    return claims


async def statuses(store: Store, run_id: str) -> list[str]:
    rows = await store.intents(run_id)
    assert rows is not None
    return [row.status for row in rows]


@async_checks
class OutboxChecks:
    """`record(..., intents=...)`, `claim_intents`, `settle_intent`, `renew_intents`."""

    async def test_record_writes_the_step_and_its_intents_in_one_call(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        out = [intent("r1", 1, payload=TRICKY), intent("r1", 2, channel="sms")]

        ok = await store.record(
            "r1", claim.run.fence, "s#1", step_record("s#1", 0), now=T0, intents=out
        )

        assert ok
        assert "s#1" in await journal_of(store, "r1")
        taken = await lease(store, T0, "email", "sms")
        assert [c.body for c in taken] == [out[0].body, out[1].body]
        assert [(c.run_id, c.delivery, c.failures) for c in taken] == [("r1", 1, 0)] * 2
        assert (await types_of(store, "r1")).count("side_effect.recorded") == 2
        rows = await store.intents("r1")
        assert rows is not None
        assert [(r.step_key, r.channel, r.body, r.status) for r in rows] == [
            ("s#1", "email", out[0].body, "pending"), ("s#1", "sms", out[1].body, "pending"),
        ]  # fmt: skip

    async def test_a_fenced_out_record_writes_neither_the_step_nor_its_intents(
        self, store: Store
    ) -> None:
        fence = await recorded(store, "r1")
        await store.cancel("r1", "stop", T0)

        ok = await store.record(
            "r1", fence, "s#2", step_record("s#2", 1), now=T0, intents=[intent("r1", 1)]
        )

        assert not ok
        assert "s#2" not in await journal_of(store, "r1")
        assert await lease(store) == []
        assert await store.intents("r1") == []

    async def test_a_claimed_intent_is_delivered_again_when_its_lease_ends(
        self, store: Store
    ) -> None:
        await recorded(store, "r1", intent("r1", 1))
        claims, next_due = await store.claim_intents(["email"], 10, T0, LEASE)
        assert [c.delivery for c in claims] == [1]
        assert next_due == T0 + LEASE

        assert await lease(store, T0 + LEASE - 0.001) == []
        (again,) = await lease(store, T0 + LEASE)
        assert (again.intent_id, again.delivery, again.body) == (
            claims[0].intent_id, 2, claims[0].body,
        )  # fmt: skip

    async def test_a_claim_takes_only_due_intents_of_the_given_channels(self, store: Store) -> None:
        await recorded(store, "r1", intent("r1", 1, "email"), intent("r1", 2, "sms"))

        assert await lease(store, T0 - 1, "email", "sms") == []
        assert [c.body for c in await lease(store, T0, "sms")] == [intent("r1", 2, "sms").body]
        assert await lease(store, T0, "push") == []

    async def test_claims_take_at_most_their_limit_and_no_intent_twice(self, store: Store) -> None:
        out = [intent("r1", n) for n in range(12)]
        await recorded(store, "r1", *out)

        batches = [(await store.claim_intents(["email"], 5, T0, LEASE))[0] for _ in range(4)]

        assert [len(b) for b in batches] == [5, 5, 2, 0]
        assert sorted(c.body for b in batches for c in b) == sorted(i.body for i in out)
        rows = await store.intents("r1")
        assert rows is not None
        assert [r.body for r in rows] == [i.body for i in out]  # in the order recorded
        assert {r.deliveries for r in rows} == {1}

    async def test_only_the_newest_delivery_may_fail_but_any_may_report_it_sent(
        self, store: Store
    ) -> None:
        await recorded(store, "r1", intent("r1", 1))
        (old,) = await lease(store, T0)
        (new,) = await lease(store, T0 + LEASE)  # the first dispatcher's lease ran out

        later = T0 + LEASE
        assert not await store.settle_intent(old, Delivery.RETRY, later, due=T0 + 99, error="{}")
        assert not await store.settle_intent(old, Delivery.RELEASE, later)
        assert await store.settle_intent(old, Delivery.SENT, later)  # it got through after all
        assert not await store.settle_intent(new, Delivery.SENT, later)  # settled already
        assert await statuses(store, "r1") == ["sent"]
        assert await lease(store, T0 + 10 * LEASE) == []

    async def test_a_failed_delivery_is_due_again_at_its_retry_time(self, store: Store) -> None:
        await recorded(store, "r1", intent("r1", 1))
        (first,) = await lease(store, T0)
        error = '{"type":"builtins:OSError","message":"down","big":12345678901234567890}'

        assert await store.settle_intent(first, Delivery.RETRY, T0 + 1, due=T0 + 50, error=error)

        assert await lease(store, T0 + 49) == []
        (second,) = await lease(store, T0 + 50)
        assert (second.delivery, second.failures) == (2, 1)
        rows = await store.intents("r1")
        assert rows is not None
        assert (rows[0].error, rows[0].failures, rows[0].status) == (error, 1, "pending")
        assert "outbox.failed" in await types_of(store, "r1")

    async def test_a_dead_intent_is_never_claimed_again(self, store: Store) -> None:
        await recorded(store, "r1", intent("r1", 1))
        (first,) = await lease(store, T0)

        ok = await store.settle_intent(first, Delivery.DEAD, T0, error="{}", event_data=TRICKY)

        assert ok
        assert await lease(store, T0 + 10 * LEASE) == []
        assert await statuses(store, "r1") == ["dead"]
        (event,) = [e for e in await store.events("r1", None, 100) if e.type == "outbox.dead"]
        assert event.data == TRICKY

    async def test_a_sent_delivery_logs_outbox_sent(self, store: Store) -> None:
        await recorded(store, "r1", intent("r1", 1))
        (first,) = await lease(store, T0)

        assert await store.settle_intent(first, Delivery.SENT, T0 + 1, event_data='{"ok":1}')

        (event,) = [e for e in await store.events("r1", None, 100) if e.type == "outbox.sent"]
        assert (event.at, event.data) == (T0 + 1, '{"ok":1}')

    async def test_a_released_intent_is_due_at_once_without_a_failure(self, store: Store) -> None:
        await recorded(store, "r1", intent("r1", 1))
        (first,) = await lease(store, T0)

        assert await store.settle_intent(first, Delivery.RELEASE, T0 + 1)

        (again,) = await lease(store, T0 + 1)
        assert (again.delivery, again.failures) == (2, 0)

    async def test_cancel_cancels_pending_intents_and_resume_restores_them(
        self, store: Store
    ) -> None:
        await recorded(store, "r1", intent("r1", 1), intent("r1", 2))
        (in_flight, _) = await lease(store, T0)

        await store.cancel("r1", "stop", T0 + 1)
        assert await statuses(store, "r1") == ["canceled", "canceled"]
        assert await lease(store, T0 + 10 * LEASE) == []
        assert not await store.settle_intent(in_flight, Delivery.SENT, T0 + 2)  # too late

        await store.resume("r1", None, now=T0 + 3)
        assert await statuses(store, "r1") == ["pending", "pending"]
        assert len(await lease(store, T0 + 3)) == 2

    async def test_a_failed_run_keeps_its_intents_pending(self, store: Store) -> None:
        fence = await recorded(store, "r1", intent("r1", 1))

        await store.finish("r1", fence, RunStatus.FAILED, T0 + 1, error='{"type":"x:E"}')

        assert await status_of(store, "r1") is RunStatus.FAILED
        assert len(await lease(store, T0 + 1)) == 1

    async def test_deleting_a_run_keeps_its_undelivered_intents_until_they_are_settled(
        self, store: Store
    ) -> None:
        fence = await recorded(store, "r1", intent("r1", 1), intent("r1", 2))
        first, second = await lease(store, T0)
        assert await store.settle_intent(first, Delivery.SENT, T0)
        await store.finish("r1", fence, RunStatus.COMPLETED, T0 + 1, result="null")

        await store.delete("r1", T0 + 2)

        assert await store.intents("r1") is None
        (redelivered,) = await lease(store, T0 + LEASE)  # still to be delivered
        assert redelivered.intent_id == second.intent_id
        assert await store.settle_intent(redelivered, Delivery.SENT, T0 + LEASE)
        assert await lease(store, T0 + 10 * LEASE) == []
        assert await store.events("r1", None, 10) == []  # settling logged nothing anew
        assert await store.get_run("r1") is None

    async def test_renewing_extends_held_leases_and_reports_lost_ones(self, store: Store) -> None:
        await recorded(store, "r1", intent("r1", 1), intent("r1", 2))
        held, settled = await lease(store, T0)
        assert await store.settle_intent(settled, Delivery.SENT, T0)

        assert await store.renew_intents([held, settled], T0 + 2 * LEASE) == [settled.intent_id]

        assert await lease(store, T0 + LEASE) == []
        assert [c.delivery for c in await lease(store, T0 + 2 * LEASE)] == [2]

    async def test_a_recorded_intent_wakes_a_waiting_dispatcher(self, store: Store) -> None:
        assert not await store.wait_intents(["email"], 0.01)

        await recorded(store, "r1", intent("r1", 1))

        assert await store.wait_intents(["sms", "email"], 5.0)
        await lease(store, T0)  # nothing left due: leftover wake-ups are dropped
        assert not await store.wait_intents(["email"], 0.01)
