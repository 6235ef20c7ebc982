"""Run timeouts (`NewRun.timeout`): a durable deadline, counted from the run's claim
out of ``pending``, that any `tick` fires: the run fails with reason ``timed_out``
wherever it is, and an activation still holding it is fenced out."""

from __future__ import annotations

import json

from sdk.store import Mailbox, Parked, Refusal, Refused, RunStatus, Store
from testing.conformance._support import (
    GO,
    OWNER,
    RECOVERY_ERROR,
    T0,
    async_checks,
    new_run,
    status_of,
    step_record,
    stored,
    tick,
    types_of,
)

LIMIT = 60.0  # the runs' timeout
TTL = 1_000.0  # leases that outlive the deadlines here


async def started(store: Store, run_id: str, at: float) -> int:
    """Create a run with a timeout at T0, claim it at `at`; its fencing token."""
    await store.create_run(new_run(run_id, timeout=LIMIT))
    (claim,) = await store.claim(OWNER, None, 1, at, TTL)
    return claim.run.fence


@async_checks
class TimeoutChecks:
    """`tick` fails runs whose timeout passed; `resume` starts the timeout over."""

    async def test_a_run_times_out_at_its_deadline_counted_from_its_claim(
        self, store: Store
    ) -> None:
        fence = await started(store, "r1", T0 + 100)  # queued 100 s: that does not count

        assert await tick(store, T0 + 100 + LIMIT - 0.001) == (0, 0)
        assert await status_of(store, "r1") is RunStatus.RUNNING
        result = await store.tick(T0 + 100 + LIMIT, 10, RECOVERY_ERROR)

        assert result.fired == 1
        run = await stored(store, "r1")
        assert (run.status, run.reason, run.finished_at) == (
            RunStatus.FAILED, "timed_out", T0 + 100 + LIMIT,
        )  # fmt: skip
        error = json.loads(run.error or "{}")
        assert (error["type"], error["reason"]) == ("builtins:TimeoutError", "timed_out")
        assert "60" in error["message"]
        assert (await types_of(store, "r1"))[-1] == "run.failed"
        cps = await store.checkpoints("r1")
        assert (cps[-1].kind, cps[-1].status) == ("run_finished", RunStatus.FAILED)
        assert await store.wait_finished("r1", 0.05) is True
        # the activation that held it is fenced out
        assert run.fence != fence
        assert not await store.record("r1", fence, "a#1", step_record("a#1", 0, "late"))
        refused = await store.finish("r1", fence, RunStatus.COMPLETED, T0 + 200, result="1")
        assert refused == Refused(Refusal.FENCED)
        assert [r.run_id for r in await store.list_runs(RunStatus.RUNNING, None, 10)] == []

    async def test_a_parked_run_times_out(self, store: Store) -> None:
        fence = await started(store, "r1", T0)
        parked = await store.suspend(
            "r1", fence, T0 + 1, T0 + 3600, RunStatus.WAITING_FOR_SIGNAL, [], [GO]
        )
        assert parked is Parked.PARKED

        await tick(store, T0 + LIMIT)

        run = await stored(store, "r1")
        assert (run.status, run.reason) == (RunStatus.FAILED, "timed_out")
        # its wait and timer went with it: a later timer tick or signal wakes nothing
        await tick(store, T0 + 3600)
        assert await status_of(store, "r1") is RunStatus.FAILED
        assert await store.claim(OWNER, None, 10, T0 + 3600, TTL) == []

    async def test_the_next_due_time_includes_run_deadlines(self, store: Store) -> None:
        await started(store, "r1", T0)

        result = await store.tick(T0 + 1, 10, RECOVERY_ERROR)

        assert result.next_due == T0 + LIMIT  # before the lease's expiry (T0 + TTL)

    async def test_a_run_that_ended_in_time_is_left_alone(self, store: Store) -> None:
        fence = await started(store, "r1", T0)
        await store.finish("r1", fence, RunStatus.COMPLETED, T0 + 1, result="1")

        result = await store.tick(T0 + 10 * LIMIT, 10, RECOVERY_ERROR)

        assert (result.fired, result.next_due) == (0, None)
        run = await stored(store, "r1")
        assert (run.status, run.reason) == (RunStatus.COMPLETED, None)

    async def test_a_pending_run_has_no_deadline_yet(self, store: Store) -> None:
        await store.create_run(new_run("r1", timeout=LIMIT))

        assert await tick(store, T0 + 10 * LIMIT) == (0, 0)

        assert await status_of(store, "r1") is RunStatus.PENDING

    async def test_a_run_without_a_timeout_never_times_out(self, store: Store) -> None:
        await store.create_run(new_run("r1"))
        await store.claim(OWNER, None, 1, T0, TTL)

        result = await store.tick(T0 + TTL - 1, 10, RECOVERY_ERROR)

        assert (result.fired, result.next_due) == (0, T0 + TTL)
        assert await status_of(store, "r1") is RunStatus.RUNNING

    async def test_resume_of_a_timed_out_run_starts_its_timeout_over(self, store: Store) -> None:
        await started(store, "r1", T0)
        await tick(store, T0 + LIMIT)

        assert await store.resume("r1", None, now=T0 + 500) is None
        (claim,) = await store.claim(OWNER, None, 1, T0 + 500, TTL)

        await tick(store, T0 + 500 + LIMIT - 1)
        assert await status_of(store, "r1") is RunStatus.RUNNING
        await tick(store, T0 + 500 + LIMIT)
        run = await stored(store, "r1")
        assert (run.status, run.reason) == (RunStatus.FAILED, "timed_out")
        assert run.fence != claim.run.fence

    async def test_resume_of_a_waiting_run_keeps_its_deadline(self, store: Store) -> None:
        fence = await started(store, "r1", T0)
        await store.suspend("r1", fence, T0, None, RunStatus.WAITING_FOR_SIGNAL, [], [GO])

        assert await store.resume("r1", None, now=T0 + 30) is None
        await store.claim(OWNER, None, 1, T0 + 30, TTL)
        await tick(store, T0 + LIMIT)

        assert await status_of(store, "r1") is RunStatus.FAILED

    async def test_a_signal_to_a_timed_out_run_is_refused(self, store: Store) -> None:
        await started(store, "r1", T0)
        await tick(store, T0 + LIMIT)

        outcome = await store.signal("r1", Mailbox("go"), '"x"', None, now=T0 + LIMIT)

        assert isinstance(outcome, Refused)
        assert await status_of(store, "r1") is RunStatus.FAILED
