"""Schedules (`ScheduleStore`): saving, operations, the due index, atomic fires."""

from __future__ import annotations

from sdk.store import (
    NewSchedule,
    RunStatus,
    ScheduleFire,
    ScheduleOp,
    Store,
    StoredSchedule,
    TickKind,
    TickStart,
)
from testing.conformance._support import (
    NO_ARGS,
    T0,
    async_checks,
    new_run,
    start_and_claim,
    status_of,
)

FLOW = "conformance.scheduled"
HOUR = 3600.0


def _schedule(sid: str = "s1", *, spec: str = "spec-1", overlap: str = "skip") -> NewSchedule:
    return NewSchedule(
        schedule_id=sid, flow=FLOW, queue="default", cron="0 * * * *", tz="UTC",
        args=NO_ARGS, overlap=overlap, catchup=None, spec=spec, next_at=T0 + HOUR,
    )  # fmt: skip


def _id(store: Store, sid: str, tick: float) -> str:
    """The id of a schedule's run for `tick` (in the schedule's partition, on a
    store with several: `Store.schedule_run_id`)."""
    return store.schedule_run_id(f"{sid}@{tick:.0f}")


def _start(store: Store, sid: str, tick: float, kind: TickKind = TickKind.TICK) -> TickStart:
    return TickStart(kind, tick, new_run(_id(store, sid, tick), flow=FLOW, created_at=tick))


def _fire(s: StoredSchedule, now: float, *starts: TickStart, next_at: float | None) -> ScheduleFire:
    return ScheduleFire(s.schedule_id, s.version, now, starts, advance=True, next_at=next_at)


async def _one(store: Store, sid: str = "s1") -> StoredSchedule:
    [s] = await store.schedules([sid])
    return s


@async_checks
class ScheduleChecks:
    """`save_schedule`, `schedule_op`, `schedules`, `due_schedules`, `fire_schedules`."""

    async def test_a_tick_run_id_is_deterministic(self, store: Store) -> None:
        run_id = store.schedule_run_id("s1@2026-01-05T01:00:00+00:00")
        assert run_id.startswith("s1@2026-01-05T01:00:00+00:00")
        assert store.schedule_run_id("s1@2026-01-05T01:00:00+00:00") == run_id

    async def test_saving_the_same_spec_again_changes_nothing_and_another_conflicts(
        self, store: Store
    ) -> None:
        assert await store.save_schedule(_schedule(), replace=False, now=T0) == 1
        before = await _one(store)
        assert await store.save_schedule(_schedule(), replace=False, now=T0 + 5) == 0
        assert await _one(store) == before
        assert await store.save_schedule(_schedule(spec="spec-2"), replace=False, now=T0) == -1
        assert (await _one(store)).spec == "spec-1"
        assert await store.save_schedule(_schedule(spec="spec-2"), replace=True, now=T0) == 2
        assert (await _one(store)).spec == "spec-2"
        assert [s.schedule_id for s in await store.schedules()] == ["s1"]
        assert await store.schedules(["unknown"]) == []

    async def test_a_due_tick_fires_once_and_advances_the_schedule(self, store: Store) -> None:
        await store.save_schedule(_schedule(), replace=False, now=T0)
        assert await store.due_schedules([FLOW], T0 + 10) == ([], T0 + HOUR)
        now = T0 + HOUR + 1
        [due], nxt = await store.due_schedules([FLOW], now)
        assert (due.schedule_id, due.next_at, nxt) == ("s1", T0 + HOUR, None)
        fire = _fire(due, now, _start(store, "s1", T0 + HOUR), next_at=T0 + 2 * HOUR)
        # the same fire twice (a second worker, a retried write): one run
        assert await store.fire_schedules([fire, fire]) == [[_id(store, "s1", T0 + HOUR)], None]
        assert await status_of(store, _id(store, "s1", T0 + HOUR)) is RunStatus.PENDING
        after = await _one(store)
        assert (after.next_at, after.fired, after.last_run_id) == (
            T0 + 2 * HOUR, 1, _id(store, "s1", T0 + HOUR),
        )  # fmt: skip
        assert await store.due_schedules([FLOW], now) == ([], T0 + 2 * HOUR)
        assert await store.due_schedules(["another.flow"], now) == ([], None)

    async def test_overlap_skip_and_buffer_one_while_the_last_run_goes_on(
        self, store: Store
    ) -> None:
        await store.save_schedule(_schedule(overlap="buffer_one"), replace=False, now=T0)
        t1, t2, t3 = T0 + HOUR, T0 + 2 * HOUR, T0 + 3 * HOUR
        [s], _ = await store.due_schedules([FLOW], t1)
        await store.fire_schedules([_fire(s, t1, _start(store, "s1", t1), next_at=t2)])
        claim = await start_and_claim(store, _id(store, "s1", t1), now=t1)
        [s], _ = await store.due_schedules([FLOW], t3)
        fired = await store.fire_schedules(
            [_fire(s, t3, _start(store, "s1", t2), _start(store, "s1", t3), next_at=t3 + HOUR)]
        )
        assert fired == [[]]  # t2 buffered, t3 skipped
        s = await _one(store)
        assert (s.buffered, s.skipped, s.last_run_status) == (t2, 1, "running")
        assert await store.due_schedules([FLOW], t3) == ([], t3 + HOUR)
        # the last run ends: the schedule is due at once, for its buffered tick
        await store.finish(_id(store, "s1", t1), claim.run.fence, RunStatus.COMPLETED, t3 + 5)
        [s], _ = await store.due_schedules([FLOW], t3 + 5)
        assert (s.buffered, s.last_run_status) == (t2, "completed")
        fire = ScheduleFire("s1", s.version, t3 + 5, (_start(store, "s1", t2, TickKind.BUFFERED),))
        assert await store.fire_schedules([fire]) == [[_id(store, "s1", t2)]]
        assert (await _one(store)).buffered is None

    async def test_pause_resume_trigger_and_delete(self, store: Store) -> None:
        await store.save_schedule(_schedule(), replace=False, now=T0)
        assert await store.schedule_op("s1", ScheduleOp.PAUSE, T0)
        assert (await _one(store)).paused
        assert await store.due_schedules([FLOW], T0 + 2 * HOUR) == ([], None)
        assert await store.schedule_op("s1", ScheduleOp.TRIGGER, T0 + 60)
        [s], _ = await store.due_schedules([FLOW], T0 + 60)
        assert (s.trigger, s.paused) == (T0 + 60, True)
        fire = ScheduleFire(
            "s1", s.version, T0 + 60, (_start(store, "s1", T0 + 60, TickKind.TRIGGER),)
        )
        assert await store.fire_schedules([fire]) == [[_id(store, "s1", T0 + 60)]]
        assert await store.due_schedules([FLOW], T0 + 2 * HOUR) == ([], None)  # still paused
        assert await store.schedule_op("s1", ScheduleOp.RESUME, T0 + 90, T0 + 3 * HOUR)
        s = await _one(store)
        assert (s.paused, s.next_at, s.trigger) == (False, T0 + 3 * HOUR, None)
        assert await store.schedule_op("s1", ScheduleOp.DELETE, T0 + 100)
        assert await store.schedules() == []
        assert await store.due_schedules([FLOW], T0 + 4 * HOUR) == ([], None)
        assert not await store.schedule_op("s1", ScheduleOp.PAUSE, T0 + 100)
