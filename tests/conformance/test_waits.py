"""Suspending, timers, signals (with dedup), cancel and resume."""

from __future__ import annotations

import pytest

from sdk._journal import Kind, Record, State
from sdk._types import RunStatus
from sdk.errors import InvalidTransition, LeaseLost, RunNotFound
from stores.redis import RedisStore
from tests.conformance._support import (
    RECOVERY_ERROR,
    T0,
    TTL,
    claim_ids,
    journal_of,
    mailbox_key,
    new_run,
    start_and_claim,
    status_of,
    step_record,
)

WAITING = RunStatus.WAITING_FOR_SIGNAL


def pending_wait(key: str, pos: int, due: float | None = None) -> str:
    return Record(key, pos, Kind.WAIT, State.PENDING, due=due).to_json()


async def park(
    store: RedisStore, run_id: str, *, deadline: float | None = None,
    mailboxes: tuple[str, ...] = ("s:go",), status: RunStatus = WAITING, now: float = T0,
) -> bool:  # fmt: skip
    """Claim `run_id` (created here) and suspend it on `mailboxes` / `deadline`."""
    claim = await start_and_claim(store, run_id, now=now)
    return await store.suspend(
        run_id, claim.run.fence, now, deadline, status,
        [("~wait:go#1", pending_wait("~wait:go#1", 0, deadline))], list(mailboxes),
    )  # fmt: skip


async def tick(store: RedisStore, now: float) -> tuple[int, int]:
    result = await store.tick(now, 10, RECOVERY_ERROR)
    return result.fired, result.recovered


# -- suspend ------------------------------------------------------------------


async def test_suspend_parks_the_run_and_writes_its_records(store: RedisStore) -> None:
    assert await park(store, "r1") is True

    assert await status_of(store, "r1") is WAITING
    assert await journal_of(store, "r1") == {"~wait:go#1": pending_wait("~wait:go#1", 0)}
    assert await claim_ids(store) == []
    raw = await store.client.hgetall(store.keys.run("r1"))
    assert "lease_owner" not in raw


async def test_suspend_for_a_human_sets_waiting_for_human(store: RedisStore) -> None:
    assert await park(store, "r1", mailboxes=("h:ok",), status=RunStatus.WAITING_FOR_HUMAN)

    assert await status_of(store, "r1") is RunStatus.WAITING_FOR_HUMAN


async def test_suspend_rechecks_the_mailbox_so_a_wake_up_is_not_lost(store: RedisStore) -> None:
    # The activation looked (empty), then the signal landed, then it suspends.
    claim = await start_and_claim(store, "r1")
    assert await store.client.llen(mailbox_key(store, "r1", "s:go")) == 0
    assert await store.signal("r1", "s:go", '"late"', None) is True

    parked = await store.suspend(
        "r1", claim.run.fence, T0, None, WAITING,
        [("~wait:go#1", pending_wait("~wait:go#1", 0))], ["s:go"],
    )  # fmt: skip

    assert parked is False
    assert await status_of(store, "r1") is RunStatus.RUNNING
    (again,) = await store.claim("worker-b", None, 1, T0, TTL)
    assert again.run.record.run_id == "r1"
    assert again.run.fence > claim.run.fence
    assert await store.client.lrange(mailbox_key(store, "r1", "s:go"), 0, -1) == ['"late"']


async def test_suspend_with_deadline_already_passed_requeues(store: RedisStore) -> None:
    assert await park(store, "r1", deadline=T0, mailboxes=()) is False

    assert await claim_ids(store) == ["r1"]


async def test_suspend_releases_the_lease_so_old_writes_fail(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")
    await store.suspend("r1", claim.run.fence, T0, None, WAITING, [], ["s:go"])

    with pytest.raises(LeaseLost):
        await store.record("r1", claim.run.fence, "a#1", step_record("a#1", 0))
    with pytest.raises(LeaseLost):
        await store.suspend("r1", claim.run.fence, T0, None, WAITING, [], ["s:go"])


# -- timers ------------------------------------------------------------------


async def test_suspend_sets_a_timer_that_fires_only_at_its_deadline(store: RedisStore) -> None:
    deadline = T0 + 30
    assert await park(store, "r1", deadline=deadline, mailboxes=())

    assert (await store.tick(T0, 10, RECOVERY_ERROR)).next_due == deadline
    assert await tick(store, deadline - 0.001) == (0, 0)
    assert await status_of(store, "r1") is WAITING
    assert await claim_ids(store, now=deadline - 0.001) == []

    assert await tick(store, deadline) == (1, 0)
    assert await status_of(store, "r1") is RunStatus.RUNNING
    assert await claim_ids(store, now=deadline) == ["r1"]
    assert await tick(store, deadline + 1) == (0, 0)  # fired once


async def test_tick_fires_only_the_due_timers(store: RedisStore) -> None:
    for i, delay in enumerate([5.0, 10.0, 15.0]):
        assert await park(store, f"r{i}", deadline=T0 + delay, mailboxes=())

    assert await tick(store, T0 + 10) == (2, 0)

    assert await status_of(store, "r2") is WAITING
    assert sorted(await claim_ids(store, now=T0 + 10)) == ["r0", "r1"]
    assert (await store.tick(T0 + 10, 10, RECOVERY_ERROR)).next_due == T0 + 15


async def test_signal_wakes_a_run_parked_with_a_timer_and_clears_the_timer(
    store: RedisStore,
) -> None:
    assert await park(store, "r1", deadline=T0 + 30)

    await store.signal("r1", "s:go", "1", None)

    assert await status_of(store, "r1") is RunStatus.RUNNING
    assert await tick(store, T0 + 31) == (0, 0)
    assert await claim_ids(store) == ["r1"]


# -- signals -------------------------------------------------------------------


async def test_signal_on_the_awaited_mailbox_wakes_the_run(store: RedisStore) -> None:
    assert await park(store, "r1")

    assert await store.signal("r1", "s:go", '{"n":1}', None) is True

    assert await status_of(store, "r1") is RunStatus.RUNNING
    assert await claim_ids(store) == ["r1"]


async def test_signal_on_another_mailbox_is_kept_but_does_not_wake(store: RedisStore) -> None:
    assert await park(store, "r1")

    assert await store.signal("r1", "s:other", "1", None) is True
    assert await store.signal("r1", "h:go", "1", None) is True  # human box is not the signal box

    assert await status_of(store, "r1") is WAITING
    assert await claim_ids(store) == []
    assert await store.client.llen(mailbox_key(store, "r1", "s:other")) == 1


async def test_signal_before_any_wait_is_kept_for_a_pending_run(store: RedisStore) -> None:
    await store.create_run(new_run("r1"))

    assert await store.signal("r1", "s:go", "1", None) is True
    assert await store.signal("r1", "s:go", "2", None) is True

    assert await status_of(store, "r1") is RunStatus.PENDING
    assert await store.client.lrange(mailbox_key(store, "r1", "s:go"), 0, -1) == ["1", "2"]


async def test_signal_with_a_repeated_dedup_id_is_delivered_once(store: RedisStore) -> None:
    await store.create_run(new_run("r1"))

    first = await store.signal("r1", "s:go", "1", "d-1")
    again = await store.signal("r1", "s:go", "2", "d-1")
    other_box = await store.signal("r1", "s:other", "3", "d-1")  # dedup is per run
    fresh = await store.signal("r1", "s:go", "4", "d-2")

    assert (first, again, other_box, fresh) == (True, False, False, True)
    assert await store.client.lrange(mailbox_key(store, "r1", "s:go"), 0, -1) == ["1", "4"]
    assert await store.client.llen(mailbox_key(store, "r1", "s:other")) == 0


async def test_dedup_ids_are_per_run(store: RedisStore) -> None:
    await store.create_run(new_run("r1"))
    await store.create_run(new_run("r2"))

    assert await store.signal("r1", "s:go", "1", "d-1") is True
    assert await store.signal("r2", "s:go", "1", "d-1") is True


async def test_signal_to_unknown_run_raises_run_not_found(store: RedisStore) -> None:
    with pytest.raises(RunNotFound):
        await store.signal("nope", "s:go", "1", None)

    assert await store.client.exists(mailbox_key(store, "nope", "s:go")) == 0


@pytest.mark.parametrize("end", [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED])
async def test_signal_to_a_terminal_run_raises_and_writes_nothing(
    store: RedisStore, end: RunStatus
) -> None:
    claim = await start_and_claim(store, "r1")
    if end is RunStatus.CANCELED:
        await store.cancel("r1", "stop", T0)
    else:
        await store.finish("r1", claim.run.fence, end, T0, {})
    before = sorted([k async for k in store.client.scan_iter(match=store.keys.pattern())])

    with pytest.raises(InvalidTransition) as info:
        await store.signal("r1", "s:go", "1", "d-1")

    assert info.value.args  # names the run and the statuses
    assert "r1" in str(info.value)
    after = sorted([k async for k in store.client.scan_iter(match=store.keys.pattern())])
    assert after == before  # no mailbox, no mailbox-name set, no dedup entry
    assert await store.client.exists(mailbox_key(store, "r1", "s:go")) == 0
    assert await status_of(store, "r1") is end


# -- cancel --------------------------------------------------------------------


async def test_cancel_of_a_pending_run(store: RedisStore) -> None:
    await store.create_run(new_run("r1"))

    await store.cancel("r1", "customer asked", T0 + 1)

    stored = await store.get_run("r1")
    assert stored is not None
    assert stored.record.status is RunStatus.CANCELED
    assert stored.record.reason == "customer asked"
    assert stored.record.finished_at is not None
    assert stored.record.finished_at.timestamp() == T0 + 1
    assert await claim_ids(store) == []
    assert await store.wait_finished("r1", 0.05) is True


async def test_cancel_of_a_waiting_run_removes_its_timer(store: RedisStore) -> None:
    assert await park(store, "r1", deadline=T0 + 5)

    await store.cancel("r1", "stop", T0 + 1)

    assert await tick(store, T0 + 6) == (0, 0)
    assert await status_of(store, "r1") is RunStatus.CANCELED
    assert await claim_ids(store, now=T0 + 6) == []


async def test_cancel_of_a_running_run_fences_out_its_activation(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")

    await store.cancel("r1", "stop", T0 + 1)

    with pytest.raises(LeaseLost):
        await store.record("r1", claim.run.fence, "a#1", step_record("a#1", 0))
    with pytest.raises(LeaseLost):
        await store.finish("r1", claim.run.fence, RunStatus.COMPLETED, T0 + 2, {"result": "1"})
    assert await renew_lost(store, "r1", claim.run.fence) == ["r1"]
    assert await journal_of(store, "r1") == {}
    assert await tick(store, T0 + 100) == (0, 0)  # no lease left to recover
    assert await status_of(store, "r1") is RunStatus.CANCELED


async def renew_lost(store: RedisStore, run_id: str, fence: int) -> list[str]:
    return await store.renew([(run_id, fence)], T0 + 100)


@pytest.mark.parametrize("end", [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED])
async def test_cancel_of_a_terminal_run_raises_invalid_transition(
    store: RedisStore, end: RunStatus
) -> None:
    claim = await start_and_claim(store, "r1")
    if end is RunStatus.CANCELED:
        await store.cancel("r1", "first", T0)
    else:
        await store.finish("r1", claim.run.fence, end, T0, {})

    with pytest.raises(InvalidTransition):
        await store.cancel("r1", "second", T0 + 1)

    stored = await store.get_run("r1")
    assert stored is not None and stored.record.status is end
    if end is RunStatus.CANCELED:
        assert stored.record.reason == "first"


async def test_cancel_of_unknown_run_raises_run_not_found(store: RedisStore) -> None:
    with pytest.raises(RunNotFound):
        await store.cancel("nope", "x", T0)


# -- resume --------------------------------------------------------------------


async def test_resume_of_a_failed_run_discards_the_given_key_only(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")
    fence = claim.run.fence
    await store.record("r1", fence, "a#1", step_record("a#1", 0, "kept"))
    failed = Record("b#1", 1, Kind.STEP, State.FAILED, error={"type": "x:E"}).to_json()
    await store.record("r1", fence, "b#1", failed)
    await store.finish(
        "r1",
        fence,
        RunStatus.FAILED,
        T0,
        {
            "error": '{"type":"x:E","message":"m","step_key":"b#1","reason":"step_failed"}',
            "reason": "step_failed",
        },
    )

    await store.resume("r1", "b#1")

    stored = await store.get_run("r1")
    assert stored is not None
    assert stored.record.status is RunStatus.RUNNING
    assert stored.record.error is None and stored.record.reason is None
    assert stored.record.finished_at is None
    (again,) = await store.claim("worker-b", None, 1, T0 + 1, TTL)
    assert again.journal == {"a#1": step_record("a#1", 0, "kept")}


async def test_resume_of_a_canceled_run_keeps_the_journal(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")
    await store.record("r1", claim.run.fence, "a#1", step_record("a#1", 0, 1))
    await store.cancel("r1", "oops", T0)

    await store.resume("r1", None)

    (again,) = await store.claim("worker-b", None, 1, T0 + 1, TTL)
    assert again.run.record.status is RunStatus.RUNNING
    assert again.journal == {"a#1": step_record("a#1", 0, 1)}


async def test_resume_of_a_waiting_run_requeues_it_and_drops_its_timer(store: RedisStore) -> None:
    assert await park(store, "r1", deadline=T0 + 5)

    await store.resume("r1", None)

    assert await status_of(store, "r1") is RunStatus.RUNNING
    assert await tick(store, T0 + 6) == (0, 0)
    assert await claim_ids(store) == ["r1"]


@pytest.mark.parametrize("setup", ["pending", "running", "completed"])
async def test_resume_of_a_run_that_is_not_stopped_raises(store: RedisStore, setup: str) -> None:
    if setup == "pending":
        await store.create_run(new_run("r1"))
    else:
        claim = await start_and_claim(store, "r1")
        if setup == "completed":
            await store.finish("r1", claim.run.fence, RunStatus.COMPLETED, T0, {"result": "1"})

    with pytest.raises(InvalidTransition):
        await store.resume("r1", None)

    assert (await status_of(store, "r1")).value == setup


async def test_resume_of_unknown_run_raises_run_not_found(store: RedisStore) -> None:
    with pytest.raises(RunNotFound):
        await store.resume("nope", None)
