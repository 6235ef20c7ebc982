"""Cancel requests: `Store.cancel` with a grace deadline, and how `renew`, `suspend`,
`finish` and `tick` treat a run that has one."""

from __future__ import annotations

from sdk._core._journal import Kind, Record, State
from sdk.store import Parked, RunStatus, Store
from testing.conformance._support import (
    GO,
    T0,
    async_checks,
    claim_ids,
    events_of,
    pending_wait,
    start_and_claim,
    status_of,
    stored,
    tick,
)

ASKED = '{"reason":"stop","grace_until":1}'
FORCED = '{"reason":"stop","forced":"grace_expired"}'
FORCING = '{"reason":"now","forced":"second_cancel"}'


async def ask(store: Store, run_id: str, now: float, until: float) -> None:
    refused = await store.cancel(
        run_id, "stop", now, event_data='{"reason":"stop"}', grace_until=until,
        request_data=ASKED, forced_data=FORCED, forcing_data=FORCING,
    )  # fmt: skip
    assert refused is None


def given(r: int) -> str:
    return Record("~cancel", -1, Kind.CANCEL, State.OK, value={"reason": "stop"}, r=r).to_json()


@async_checks
class CancelRequestChecks:
    """A cancel with a grace deadline asks a started run to stop; it is forced later."""

    async def test_a_request_is_kept_on_the_run_and_reported_by_renew(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")

        await ask(store, "r1", T0 + 1, T0 + 31)

        run = await stored(store, "r1")
        assert (run.status, run.cancel_reason, run.cancel_deadline) == (
            RunStatus.RUNNING, "stop", T0 + 31,
        )  # fmt: skip
        last = (await events_of(store, "r1"))[-1]
        assert (last.type, last.data) == ("run.cancel_requested", ASKED)
        renewal = await store.renew([("r1", claim.run.fence)], T0 + 10)
        assert (list(renewal), renewal.cancel_requested) == ([], {"r1": "stop"})
        # once the flow was given the cancel (its ~cancel record), renew is silent
        assert await store.record("r1", claim.run.fence, "~cancel", given(1), now=T0 + 2)
        renewal = await store.renew([("r1", claim.run.fence)], T0 + 10)
        assert (list(renewal), renewal.cancel_requested) == ([], {})

    async def test_a_request_wakes_a_waiting_run(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        parked = await store.suspend(
            "r1", claim.run.fence, T0, None, RunStatus.WAITING_FOR_SIGNAL,
            [("~wait:go#1", pending_wait("~wait:go#1", 0))], [GO],
        )  # fmt: skip
        assert parked is Parked.PARKED

        await ask(store, "r1", T0 + 1, T0 + 31)

        assert await claim_ids(store, now=T0 + 1) == ["r1"]
        assert (await stored(store, "r1")).cancel_reason == "stop"

    async def test_a_run_does_not_park_on_a_request_it_was_not_given(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        await ask(store, "r1", T0 + 1, T0 + 31)

        parked = await store.suspend(
            "r1", claim.run.fence, T0 + 2, None, RunStatus.WAITING_FOR_SIGNAL,
            [("~wait:go#1", pending_wait("~wait:go#1", 0))], [GO],
        )  # fmt: skip

        assert parked is Parked.READY
        assert await claim_ids(store, now=T0 + 2) == ["r1"]

    async def test_the_grace_deadline_forces_the_cancel(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")  # leased for TTL: longer than the grace
        await ask(store, "r1", T0 + 1, T0 + 5)

        assert await tick(store, T0 + 4) == (0, 0)
        assert await status_of(store, "r1") is RunStatus.RUNNING
        assert (await store.tick(T0 + 4, 10, "{}")).next_due == T0 + 5
        await tick(store, T0 + 5)

        run = await stored(store, "r1")
        assert (run.status, run.reason) == (RunStatus.CANCELED, "stop")
        last = (await events_of(store, "r1"))[-1]
        assert (last.type, last.data) == ("run.canceled", FORCED)
        assert await store.renew([("r1", claim.run.fence)], T0 + 6) == ["r1"]  # fenced out
        assert await store.wait_finished("r1", 0.05) is True

    async def test_a_second_cancel_forces_it_keeping_the_first_reason(self, store: Store) -> None:
        await start_and_claim(store, "r1")
        await ask(store, "r1", T0 + 1, T0 + 31)

        assert await store.cancel(
            "r1", "now", T0 + 2, event_data="{}", grace_until=T0 + 60, forcing_data=FORCING
        ) is None  # fmt: skip

        run = await stored(store, "r1")
        assert (run.status, run.reason, run.finished_at) == (RunStatus.CANCELED, "stop", T0 + 2)
        last = (await events_of(store, "r1"))[-1]
        assert (last.type, last.data) == ("run.canceled", FORCING)
        assert await tick(store, T0 + 100) == (0, 0)  # its deadline is gone with it

    async def test_a_pending_run_is_canceled_at_once(self, store: Store) -> None:
        from testing.conformance._support import new_run

        await store.create_run(new_run("r1"))

        await ask(store, "r1", T0 + 1, T0 + 31)

        assert await status_of(store, "r1") is RunStatus.CANCELED
        assert "run.cancel_requested" not in [e.type for e in await events_of(store, "r1")]
