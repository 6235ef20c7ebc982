"""Parking a run (`suspend`), timers, and signals: kept, deduplicated, waking."""

from __future__ import annotations

import pytest

from sdk.store import Mailbox, Parked, Refusal, Refused, RunStatus, Store
from testing.conformance._support import (
    GO,
    OK_BOX,
    RECOVERY_ERROR,
    T0,
    TTL,
    async_checks,
    claim_ids,
    drain,
    events_of,
    journal_of,
    new_run,
    pending_wait,
    seen,
    start_and_claim,
    status_of,
    step_record,
    stored,
    tick,
    types_of,
)

WAITING = RunStatus.WAITING_FOR_SIGNAL
WAIT_KEY = "~wait:go#1"


async def park(
    store: Store, run_id: str, *, deadline: float | None = None,
    mailboxes: tuple[Mailbox, ...] = (GO,), status: RunStatus = WAITING, now: float = T0,
) -> Parked:  # fmt: skip
    """Create and claim `run_id`, then suspend it on `mailboxes` / `deadline`."""
    claim = await start_and_claim(store, run_id, now=now)
    return await store.suspend(
        run_id, claim.run.fence, now, deadline, status,
        [(WAIT_KEY, pending_wait(WAIT_KEY, 0, deadline))], list(mailboxes),
    )  # fmt: skip


@async_checks
class WaitChecks:
    """`suspend`, `tick`'s timers and `signal`."""

    async def test_suspend_parks_the_run_and_writes_its_records(self, store: Store) -> None:
        assert await park(store, "r1") is Parked.PARKED

        assert await status_of(store, "r1") is WAITING
        assert await journal_of(store, "r1") == {WAIT_KEY: pending_wait(WAIT_KEY, 0)}
        assert await claim_ids(store) == []

    async def test_suspend_for_a_human_sets_waiting_for_human(self, store: Store) -> None:
        parked = await park(store, "r1", mailboxes=(OK_BOX,), status=RunStatus.WAITING_FOR_HUMAN)

        assert parked is Parked.PARKED
        assert await status_of(store, "r1") is RunStatus.WAITING_FOR_HUMAN

    async def test_suspend_rechecks_the_mailbox_so_a_wake_up_is_not_lost(
        self, store: Store
    ) -> None:
        # The activation looked (empty), then the signal landed, then it suspends.
        claim = await start_and_claim(store, "r1")
        assert await store.signal("r1", GO, '"late"', None) is True

        parked = await store.suspend(
            "r1", claim.run.fence, T0, None, WAITING,
            [(WAIT_KEY, pending_wait(WAIT_KEY, 0))], [GO],
        )  # fmt: skip

        assert parked is Parked.READY
        assert await status_of(store, "r1") is RunStatus.RUNNING
        assert await journal_of(store, "r1") == {WAIT_KEY: pending_wait(WAIT_KEY, 0)}
        (again,) = await store.claim("worker-b", None, 1, T0, TTL)
        assert again.run.fence != claim.run.fence
        assert again.mail == {GO}
        assert await drain(store, "r1", again.run.fence) == ['"late"']

    async def test_suspend_is_not_ready_for_a_signal_in_another_mailbox(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        await store.signal("r1", Mailbox("other"), "1", None)
        await store.signal("r1", Mailbox("ok"), "2", None)  # a signal, not a human decision

        parked = await store.suspend(
            "r1", claim.run.fence, T0, T0 + 5, RunStatus.WAITING_FOR_HUMAN, [], [OK_BOX]
        )

        assert parked is Parked.PARKED
        assert await claim_ids(store) == []

    async def test_suspend_with_its_deadline_already_passed_is_ready_at_once(
        self, store: Store
    ) -> None:
        assert await park(store, "r1", deadline=T0, mailboxes=()) is Parked.READY

        assert await claim_ids(store) == ["r1"]

    async def test_suspend_gives_up_the_lease_so_old_writes_are_refused(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        await store.suspend("r1", claim.run.fence, T0, None, WAITING, [], [GO])

        assert not await store.record("r1", claim.run.fence, "a#1", step_record("a#1", 0))
        records = [(WAIT_KEY, pending_wait(WAIT_KEY, 0))]
        parked = await store.suspend("r1", claim.run.fence, T0, None, WAITING, records, [GO])
        assert parked is Parked.FENCED
        assert await journal_of(store, "r1") == {}
        assert await store.renew([("r1", claim.run.fence)], T0 + TTL) == ["r1"]

    async def test_suspend_logs_the_waiting_event_and_takes_its_checkpoint(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")

        parked = await store.suspend(
            "r1", claim.run.fence, T0 + 1, None, RunStatus.WAITING_FOR_HUMAN, [], [OK_BOX]
        )

        assert parked is Parked.PARKED
        last = (await events_of(store, "r1"))[-1]
        assert (last.type, last.at) == ("run.waiting_for_human", T0 + 1)
        cp = (await store.checkpoints("r1"))[-1]
        assert (cp.kind, cp.status, cp.step_key, cp.at) == (
            "waiting_for_human", RunStatus.WAITING_FOR_HUMAN, None, T0 + 1,
        )  # fmt: skip

    async def test_a_suspend_that_is_ready_at_once_logs_no_wait_and_takes_no_checkpoint(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")
        await store.signal("r1", GO, "1", "d-1", now=T0, event_data="{}")

        parked = await store.suspend("r1", claim.run.fence, T0 + 1, None, WAITING, [], [GO])

        assert parked is Parked.READY
        assert await types_of(store, "r1") == ["run.created", "run.started", "signal.received"]
        assert [c.kind for c in await store.checkpoints("r1")] == ["run_started"]

    # -- timers -----------------------------------------------------------------

    async def test_suspend_sets_a_timer_that_fires_only_at_its_deadline(self, store: Store) -> None:
        deadline = T0 + 30
        assert await park(store, "r1", deadline=deadline, mailboxes=()) is Parked.PARKED

        assert (await store.tick(T0, 10, RECOVERY_ERROR)).next_due == deadline
        assert await tick(store, deadline - 0.001) == (0, 0)
        assert await status_of(store, "r1") is WAITING
        assert await claim_ids(store, now=deadline - 0.001) == []

        assert await tick(store, deadline) == (1, 0)
        assert await status_of(store, "r1") is RunStatus.RUNNING
        assert await claim_ids(store, now=deadline) == ["r1"]
        assert await tick(store, deadline + 1) == (0, 0)  # fired once

    async def test_tick_fires_only_the_due_timers(self, store: Store) -> None:
        for i, delay in enumerate([5.0, 10.0, 15.0]):
            assert await park(store, f"r{i}", deadline=T0 + delay, mailboxes=()) is Parked.PARKED

        assert await tick(store, T0 + 10) == (2, 0)

        assert await status_of(store, "r2") is WAITING
        assert sorted(await claim_ids(store, now=T0 + 10)) == ["r0", "r1"]
        assert (await store.tick(T0 + 10, 10, RECOVERY_ERROR)).next_due == T0 + 15

    async def test_a_signal_wakes_a_run_parked_with_a_timer_and_clears_the_timer(
        self, store: Store
    ) -> None:
        assert await park(store, "r1", deadline=T0 + 30) is Parked.PARKED

        await store.signal("r1", GO, "1", None)

        assert await status_of(store, "r1") is RunStatus.RUNNING
        assert await tick(store, T0 + 31) == (0, 0)
        assert await claim_ids(store) == ["r1"]

    # -- signals ------------------------------------------------------------------

    async def test_a_signal_on_the_awaited_mailbox_wakes_the_run(self, store: Store) -> None:
        assert await park(store, "r1") is Parked.PARKED

        assert await store.signal("r1", GO, '{"n":1}', None) is True

        assert await status_of(store, "r1") is RunStatus.RUNNING
        (claim,) = await store.claim("worker-b", None, 1, T0, TTL)
        assert claim.mail == {GO}

    async def test_a_signal_on_another_mailbox_is_kept_but_does_not_wake(
        self, store: Store
    ) -> None:
        assert await park(store, "r1") is Parked.PARKED

        assert await store.signal("r1", Mailbox("other"), "1", None) is True
        assert await store.signal("r1", Mailbox("go", human=True), "2", None) is True

        assert await status_of(store, "r1") is WAITING
        assert await claim_ids(store) == []
        await store.resume("r1", None)
        (claim,) = await store.claim("worker-b", None, 1, T0, TTL)
        assert claim.mail == {Mailbox("other"), Mailbox("go", human=True)}
        assert await drain(store, "r1", claim.run.fence, Mailbox("other")) == ["1"]

    async def test_a_signal_sent_before_the_wait_is_kept(self, store: Store) -> None:
        await store.create_run(new_run("r1"))

        assert await store.signal("r1", GO, "1", None) is True
        assert await store.signal("r1", GO, "2", None) is True

        assert await status_of(store, "r1") is RunStatus.PENDING
        (claim,) = await store.claim("worker-a", None, 1, T0, TTL)
        assert await drain(store, "r1", claim.run.fence) == ["1", "2"]

    async def test_a_signal_with_a_repeated_dedup_id_is_delivered_once(self, store: Store) -> None:
        await store.create_run(new_run("r1"))
        other = Mailbox("other")

        first = await store.signal("r1", GO, "1", "d-1")
        again = await store.signal("r1", GO, "2", "d-1")
        other_box = await store.signal("r1", other, "3", "d-1")  # dedup is per run
        fresh = await store.signal("r1", GO, "4", "d-2")

        assert (first, again, other_box, fresh) == (True, False, False, True)
        (claim,) = await store.claim("worker-a", None, 1, T0, TTL)
        assert await drain(store, "r1", claim.run.fence) == ["1", "4"]
        assert await drain(store, "r1", claim.run.fence, other) == []

    async def test_a_repeated_signal_logs_no_second_event(self, store: Store) -> None:
        await store.create_run(new_run("r1"))
        await store.signal("r1", GO, "1", "d-1", now=T0, event_data="{}")

        assert await store.signal("r1", GO, "1", "d-1", now=T0, event_data="{}") is False

        assert await types_of(store, "r1") == ["run.created", "signal.received"]

    async def test_dedup_ids_are_per_run(self, store: Store) -> None:
        await store.create_run(new_run("r1"))
        await store.create_run(new_run("r2"))

        assert await store.signal("r1", GO, "1", "d-1") is True
        assert await store.signal("r2", GO, "1", "d-1") is True

    @pytest.mark.parametrize("end", [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED])
    async def test_a_repeated_dedup_id_is_a_duplicate_after_the_run_finished(
        self, store: Store, end: RunStatus
    ) -> None:
        claim = await start_and_claim(store, "r1")
        assert await store.signal("r1", GO, "1", "d-1") is True
        if end is RunStatus.CANCELED:
            await store.cancel("r1", "stop", T0)
        else:
            await store.finish("r1", claim.run.fence, end, T0)
        before = await seen(store, "r1")

        assert await store.signal("r1", GO, "1", "d-1", event_data="{}") is False

        assert await seen(store, "r1") == before  # nothing written
        refused = await store.signal("r1", GO, "1", "d-2")  # a new one is refused
        assert isinstance(refused, Refused)
        assert (refused.why, refused.status) == (Refusal.TRANSITION, end)

    async def test_a_repeated_dedup_id_is_a_duplicate_for_a_decision_no_longer_awaited(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")
        box = Mailbox("ok", human=True)
        await store.suspend("r1", claim.run.fence, T0, None, RunStatus.WAITING_FOR_HUMAN, [], [box])
        assert await store.signal("r1", box, "true", "d-1", decision_by="ann") is True
        before = await seen(store, "r1")  # woken: no longer waiting on it

        # a retried call (the same id) is answered as the one that got through
        assert await store.signal("r1", box, "true", "d-1", decision_by="ann") is False

        assert await seen(store, "r1") == before

    async def test_a_signal_to_an_unknown_run_is_refused_and_creates_nothing(
        self, store: Store
    ) -> None:
        assert await store.signal("nope", GO, "1", "d-1") == Refused(Refusal.NOT_FOUND)

        assert await store.get_run("nope") is None
        assert await store.events("nope", None, 10) == []

    @pytest.mark.parametrize("end", [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED])
    async def test_a_signal_to_a_finished_run_is_refused_and_writes_nothing(
        self, store: Store, end: RunStatus
    ) -> None:
        claim = await start_and_claim(store, "r1")
        if end is RunStatus.CANCELED:
            await store.cancel("r1", "stop", T0)
        else:
            await store.finish("r1", claim.run.fence, end, T0)
        before = await seen(store, "r1")

        refused = await store.signal("r1", GO, "1", "d-1")

        assert isinstance(refused, Refused)
        assert (refused.why, refused.status) == (Refusal.TRANSITION, end)
        assert await seen(store, "r1") == before
        if end is not RunStatus.COMPLETED:  # resumable: no signal, no dedup id was kept
            assert await store.resume("r1", None) is None
            (again,) = await store.claim("worker-b", None, 1, T0, TTL)
            assert again.mail == frozenset()
            assert await store.signal("r1", GO, "1", "d-1") is True

    # -- what a parked run waits on (`suspend(waiting_on=)`, `StoredRun.waiting_on`) ---------

    async def test_a_parked_run_keeps_what_it_waits_on_as_given(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        # the engine's JSON, kept as it is: key order, spacing, non-ASCII text, big numbers
        said = '[{"kind":"human","name":"d\u00e9cision","deadline":1767261600.123456789}]'

        parked = await store.suspend(
            "r1", claim.run.fence, T0, None, RunStatus.WAITING_FOR_HUMAN,
            [(WAIT_KEY, pending_wait(WAIT_KEY, 0))], [OK_BOX], waiting_on=said,
        )  # fmt: skip

        assert parked is Parked.PARKED
        assert (await stored(store, "r1")).waiting_on == said

    @pytest.mark.parametrize("leave", ["signal", "timer", "cancel"])
    async def test_what_a_run_waits_on_is_dropped_when_it_leaves_waiting(
        self, store: Store, leave: str
    ) -> None:
        claim = await start_and_claim(store, "r1")
        await store.suspend(
            "r1", claim.run.fence, T0, T0 + 10, WAITING,
            [(WAIT_KEY, pending_wait(WAIT_KEY, 0, T0 + 10))], [GO],
            waiting_on='[{"kind":"signal","name":"go"}]',
        )  # fmt: skip

        if leave == "signal":
            assert await store.signal("r1", GO, "1", None) is True
        elif leave == "timer":
            await tick(store, T0 + 11)
        else:
            assert await store.cancel("r1", "stop", T0 + 1) is None

        run = await stored(store, "r1")
        assert run.status is not WAITING
        assert run.waiting_on is None

    async def test_a_run_made_ready_by_its_park_keeps_no_waiting_on(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        assert await store.signal("r1", GO, '"early"', None) is True

        parked = await store.suspend(
            "r1", claim.run.fence, T0, None, WAITING, [(WAIT_KEY, pending_wait(WAIT_KEY, 0))],
            [GO], waiting_on='[{"kind":"signal","name":"go"}]',
        )  # fmt: skip

        assert parked is Parked.READY
        assert (await stored(store, "r1")).waiting_on is None

    async def test_a_run_parked_without_waiting_on_reads_none(self, store: Store) -> None:
        assert await park(store, "r1") is Parked.PARKED

        assert (await stored(store, "r1")).waiting_on is None
