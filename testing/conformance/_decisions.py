"""Human decisions (`signal` with `decision_by`), their approvers, and audit-only events."""

from __future__ import annotations

import pytest

from sdk.store import EventType, Mailbox, Parked, Refusal, Refused, RunStatus, Store
from testing.conformance._support import (
    OK_BOX,
    T0,
    TRICKY,
    async_checks,
    events_of,
    new_run,
    seen,
    start_and_claim,
    status_of,
    stored,
)

HUMAN = RunStatus.WAITING_FOR_HUMAN


async def awaiting_decision(
    store: Store, run_id: str, approvers: dict[Mailbox, list[str]] | None = None
) -> None:
    claim = await start_and_claim(store, run_id)
    parked = await store.suspend(
        run_id, claim.run.fence, T0, None, HUMAN, [], [OK_BOX], approvers=approvers
    )
    assert parked is Parked.PARKED


@async_checks
class DecisionChecks:
    """Approvals and denials reach only a run waiting for them, from whom the wait allows."""

    async def test_the_approvers_of_a_parked_run_read_back_as_parked(self, store: Store) -> None:
        other = Mailbox("ünïcode wait", human=True)
        await awaiting_decision(store, "r1", {OK_BOX: ["ann", "bob"], other: ["cy"]})

        assert await store.approvers("r1") == {OK_BOX: ("ann", "bob"), other: ("cy",)}
        assert await store.approvers("no-such-run") == {}

    async def test_a_decision_wakes_the_run_waiting_for_it(self, store: Store) -> None:
        await awaiting_decision(store, "r1")

        assert await store.signal("r1", OK_BOX, "true", None, decision_by="anyone") is True

        assert await status_of(store, "r1") is RunStatus.RUNNING
        (claim,) = await store.claim("worker-b", None, 1, T0, 10.0)
        assert claim.mail == {OK_BOX}

    @pytest.mark.parametrize("state", ["pending", "running", "waiting-elsewhere"])
    async def test_a_decision_for_a_run_not_waiting_for_it_is_refused(
        self, store: Store, state: str
    ) -> None:
        if state == "pending":
            await store.create_run(new_run("r1"))
        elif state == "running":
            await start_and_claim(store, "r1")
        else:
            claim = await start_and_claim(store, "r1")
            await store.suspend(
                "r1", claim.run.fence, T0, None, HUMAN, [], [Mailbox("other", human=True)]
            )
        status = await status_of(store, "r1")
        before = await seen(store, "r1")

        refused = await store.signal("r1", OK_BOX, "true", None, decision_by="ann")

        assert isinstance(refused, Refused)
        assert (refused.why, refused.status) == (Refusal.NOT_WAITING, status)
        assert await seen(store, "r1") == before

    async def test_a_decision_from_someone_not_among_the_approvers_is_refused_and_audited(
        self, store: Store
    ) -> None:
        await awaiting_decision(store, "r1", {OK_BOX: ["ann", "bob"]})
        run = await stored(store, "r1")

        refused = await store.signal(
            "r1", OK_BOX, "true", "d-1", now=T0 + 1, event_data=TRICKY, decision_by="eve"
        )

        assert refused == Refused(Refusal.FORBIDDEN, actor="eve")
        last = (await events_of(store, "r1"))[-1]
        assert (last.type, last.at, last.data) == ("auth.denied", T0 + 1, TRICKY)
        assert await stored(store, "r1") == run  # still waiting, nothing delivered
        # an approver's decision with the same dedup id still counts: the refusal kept none
        assert await store.signal("r1", OK_BOX, "true", "d-1", decision_by="bob") is True
        assert await status_of(store, "r1") is RunStatus.RUNNING

    async def test_approvers_are_per_mailbox(self, store: Store) -> None:
        other = Mailbox("other", human=True)
        claim = await start_and_claim(store, "r1")
        await store.suspend(
            "r1", claim.run.fence, T0, None, HUMAN, [], [OK_BOX, other],
            approvers={other: ["ann"]},
        )  # fmt: skip

        assert await store.signal("r1", OK_BOX, "true", None, decision_by="eve") is True

        assert await status_of(store, "r1") is RunStatus.RUNNING

    async def test_audit_logs_an_event_and_changes_nothing_else(self, store: Store) -> None:
        await store.create_run(new_run("r1"))
        run = await stored(store, "r1")

        assert await store.audit("r1", EventType.AUTH_DENIED, T0 + 2, TRICKY) is None

        last = (await events_of(store, "r1"))[-1]
        assert (last.type, last.at, last.step_key, last.data) == (
            "auth.denied", T0 + 2, None, TRICKY,
        )  # fmt: skip
        assert await stored(store, "r1") == run

    async def test_audit_of_an_unknown_run_is_refused(self, store: Store) -> None:
        refused = await store.audit("nope", EventType.AUTH_DENIED, T0, "{}")

        assert refused == Refused(Refusal.NOT_FOUND)
        assert await store.events("nope", None, 10) == []
