"""Consuming signals into the journal: payloads unchanged, FIFO, deadlines, safe twice."""

from __future__ import annotations

import json

import pytest

from sdk._core._journal import Record
from sdk.store import Consumed, Mailbox, RunStatus, Store
from testing.conformance._support import (
    GO,
    OWNER,
    PAYLOADS,
    T0,
    TTL,
    async_checks,
    consume,
    drain,
    events_of,
    journal_of,
    pending_wait,
    start_and_claim,
    status_of,
    strict,
    wait_record,
    wait_timeout,
)


@async_checks
class ConsumeChecks:
    """`consume`: a signal (or the timeout) goes into the journal in one fenced write."""

    @pytest.mark.parametrize("payload", [p for _, p in PAYLOADS], ids=[i for i, _ in PAYLOADS])
    async def test_consume_moves_the_payload_into_the_record_unchanged(
        self, store: Store, payload: str
    ) -> None:
        claim = await start_and_claim(store, "r1")
        assert await store.signal("r1", GO, payload, None) is True

        assert await consume(store, "r1", claim.run.fence) == (Consumed.SIGNAL, payload)

        raw = (await journal_of(store, "r1"))["~wait:go#1"]
        expected = {**json.loads(wait_record("~wait:go#1", 0)), "value": json.loads(payload)}
        assert strict(json.loads(raw)) == strict(expected)
        assert strict(Record.from_json(raw).value) == strict(json.loads(payload))
        # and the journal a later claim loads carries the same text
        await store.release("r1", claim.run.fence)
        (again,) = await store.claim("worker-b", None, 1, T0, TTL)
        assert again.journal["~wait:go#1"] == raw

    async def test_consume_takes_signals_fifo_per_mailbox(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        for payload in ("1", "2"):
            await store.signal("r1", GO, payload, None)
        await store.signal("r1", Mailbox("other"), '"x"', None)

        first = await consume(store, "r1", claim.run.fence, key="~wait:go#1")
        second = await consume(store, "r1", claim.run.fence, key="~wait:go#2")
        third = await consume(store, "r1", claim.run.fence, key="~wait:go#3")

        assert (first, second, third) == (
            (Consumed.SIGNAL, "1"), (Consumed.SIGNAL, "2"), (Consumed.EMPTY, None),
        )  # fmt: skip
        assert await drain(store, "r1", claim.run.fence, Mailbox("other")) == ['"x"']

    async def test_a_signal_and_a_human_decision_of_one_name_are_apart(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        human = Mailbox("go", human=True)
        await store.signal("r1", GO, '"signal"', None)
        await store.signal("r1", human, '"decision"', None)

        assert await drain(store, "r1", claim.run.fence, human) == ['"decision"']
        assert await drain(store, "r1", claim.run.fence, GO) == ['"signal"']

    async def test_consume_of_an_empty_mailbox_before_its_deadline_writes_nothing(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")
        before = await events_of(store, "r1")

        assert await consume(store, "r1", claim.run.fence, deadline=T0 + 5) == (
            Consumed.EMPTY, None,
        )  # fmt: skip
        assert await consume(store, "r1", claim.run.fence, deadline=None) == (Consumed.EMPTY, None)

        assert await journal_of(store, "r1") == {}
        assert await events_of(store, "r1") == before

    @pytest.mark.parametrize("late", [0.0, 0.001, 3600.0])
    async def test_consume_at_or_after_its_deadline_records_the_timeout(
        self, store: Store, late: float
    ) -> None:
        claim = await start_and_claim(store, "r1")
        deadline = T0 + 5

        outcome = await consume(
            store, "r1", claim.run.fence, now=deadline + late, deadline=deadline
        )

        assert outcome == (Consumed.TIMEOUT, None)
        assert await journal_of(store, "r1") == {
            "~wait:go#1": wait_timeout("~wait:go#1", 0, deadline)
        }

    async def test_consume_prefers_a_waiting_signal_over_an_expired_deadline(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")
        await store.signal("r1", GO, '{"late":true}', None)

        outcome = await consume(store, "r1", claim.run.fence, now=T0 + 60, deadline=T0 + 5)

        assert outcome == (Consumed.SIGNAL, '{"late":true}')

    async def test_consume_with_a_stale_fence_writes_nothing_and_keeps_the_signal(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")
        await store.signal("r1", GO, "1", None)
        await store.release("r1", claim.run.fence)
        (again,) = await store.claim(OWNER, None, 1, T0, TTL)
        before = await events_of(store, "r1")

        assert await consume(store, "r1", claim.run.fence) == (Consumed.FENCED, None)

        assert await journal_of(store, "r1") == {}
        assert await events_of(store, "r1") == before
        assert await status_of(store, "r1") is RunStatus.RUNNING
        assert await drain(store, "r1", again.run.fence) == ["1"]

    async def test_consume_logs_wait_completed_or_wait_timed_out(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        await store.signal("r1", GO, '"hi"', "d-1", now=T0, event_data="{}")

        signal = await consume(store, "r1", claim.run.fence, key="~wait:go#1", now=T0 + 1)
        timeout = await consume(
            store, "r1", claim.run.fence, key="~wait:go#2", now=T0 + 2, deadline=T0 + 2
        )

        assert (signal[0], timeout[0]) == (Consumed.SIGNAL, Consumed.TIMEOUT)
        tail = [(e.type, e.step_key, e.at) for e in await events_of(store, "r1")][-2:]
        assert tail == [("wait.completed", "~wait:go#1", T0 + 1),
                        ("wait.timed_out", "~wait:go#2", T0 + 2)]  # fmt: skip

    async def test_a_woken_run_consumes_the_signal_over_the_record_it_parked_with(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")
        key = "~wait:go#1"
        await store.suspend(
            "r1", claim.run.fence, T0, T0 + 30, RunStatus.WAITING_FOR_SIGNAL,
            [(key, pending_wait(key, 0, T0 + 30))], [GO],
        )  # fmt: skip
        await store.signal("r1", GO, '"go!"', None)
        (woken,) = await store.claim("worker-b", None, 1, T0 + 1, TTL)

        outcome = await consume(store, "r1", woken.run.fence, key=key, now=T0 + 1, deadline=T0 + 30)

        assert outcome == (Consumed.SIGNAL, '"go!"')
        assert Record.from_json((await journal_of(store, "r1"))[key]).value == "go!"

    async def test_a_wait_whose_timer_fired_records_its_timeout_over_the_parked_record(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")
        key = "~wait:go#1"
        await store.suspend(
            "r1", claim.run.fence, T0, T0 + 30, RunStatus.WAITING_FOR_SIGNAL,
            [(key, pending_wait(key, 0, T0 + 30))], [GO],
        )  # fmt: skip
        await store.tick(T0 + 30, 10, "{}")
        (woken,) = await store.claim("worker-b", None, 1, T0 + 30, TTL)

        outcome = await consume(
            store, "r1", woken.run.fence, key=key, now=T0 + 30, deadline=T0 + 30
        )

        assert outcome == (Consumed.TIMEOUT, None)
        assert await journal_of(store, "r1") == {key: wait_timeout(key, 0, T0 + 30)}

    # -- a retried call (its first reply lost) -----------------------------------

    async def test_consume_called_twice_answers_the_same_signal_and_keeps_the_next(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")
        await store.signal("r1", GO, '{"n":1}', None)
        await store.signal("r1", GO, '{"n":2}', None)

        first = await consume(store, "r1", claim.run.fence)
        again = await consume(store, "r1", claim.run.fence)

        assert first == again == (Consumed.SIGNAL, '{"n":1}')
        assert Record.from_json((await journal_of(store, "r1"))["~wait:go#1"]).value == {"n": 1}
        assert await drain(store, "r1", claim.run.fence) == ['{"n":2}']

    async def test_consume_called_twice_after_a_timeout_times_out_again(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        first = await consume(store, "r1", claim.run.fence, deadline=T0)
        await store.signal("r1", GO, '"late"', None)

        again = await consume(store, "r1", claim.run.fence, deadline=T0)

        assert first == again == (Consumed.TIMEOUT, None)
        assert await drain(store, "r1", claim.run.fence) == ['"late"']
