"""The schedule operations of `Client` (`create_schedule`, `pause_schedule`, ...).

Schedules are kept by the store and fired by the workers that serve their flow
(`sdk.worker._ticker`); see `sdk.model._schedules` for the cron and DST rules.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sdk._core._checks import check_id
from sdk.client._clientbase import ClientBase, RunHandle
from sdk.errors import IdempotencyConflict, InvalidArgument, ScheduleNotFound
from sdk.model._flowdef import FlowDef
from sdk.model._schedules import (
    Cron,
    ScheduleInfo,
    check_spec,
    check_tick_parameter,
    encode_schedule_args,
    new_schedule,
    schedule_info,
    tick_run_id,
)
from sdk.store import ScheduleOp

__all__ = ["ScheduleClient"]


class ScheduleClient(ClientBase):
    """`Client.create_schedule` and the other schedule operations."""

    async def create_schedule(
        self,
        schedule_id: str,
        flow: Callable[..., Any] | str,
        *,
        cron: str,
        args: tuple[Any, ...] | list[Any] = (),
        kwargs: dict[str, Any] | None = None,
        tz: str = "UTC",
        overlap: str = "skip",
        catchup: timedelta | None = None,
    ) -> ScheduleInfo:
        """Run `flow` on a cron schedule: each tick starts one run, with the tick time
        (an aware datetime with the schedule's UTC offset) as its first argument,
        then `args` and `kwargs`. Workers that serve the flow fire the ticks.

        Creating the same schedule again (same id and definition) changes nothing;
        the same id with another definition raises `IdempotencyConflict` (delete
        it first). See `sdk.scheduled` for `tz`, `overlap` and `catchup`.

        Example::

            await client.create_schedule("nightly", report, cron="30 2 * * *",
                                         tz="Europe/Paris", args=("eu",))
        """
        spec = check_spec(schedule_id, cron, tz, overlap, catchup)
        if not isinstance(args, tuple | list):
            raise InvalidArgument(
                f"schedule {schedule_id!r}: args must be a tuple or list, got {type(args).__name__}"
            )
        if kwargs is not None and not isinstance(kwargs, dict):
            raise InvalidArgument(
                f"schedule {schedule_id!r}: kwargs must be a dict, got {type(kwargs).__name__}"
            )
        fd = self._flow_def(flow)
        if isinstance(fd, FlowDef):
            check_tick_parameter(fd.fn, f"schedule {schedule_id!r}")
        now = self.clock.time()
        encoded = encode_schedule_args(fd, tuple(args), dict(kwargs or {}), self.serializer)
        new = new_schedule(schedule_id, fd, spec, encoded, now)
        if await self.store.save_schedule(new, replace=False, now=now) == -1:
            raise IdempotencyConflict(
                f"schedule {schedule_id!r} exists with another definition; "
                "delete it first to change it"
            )
        return await self._schedule(schedule_id)

    async def pause_schedule(self, schedule_id: str) -> ScheduleInfo:
        """Stop firing ticks until `resume_schedule` (a buffered tick is dropped;
        a run in progress goes on). Raises `ScheduleNotFound`."""
        await self._op(schedule_id, ScheduleOp.PAUSE)
        return await self._schedule(schedule_id)

    async def resume_schedule(self, schedule_id: str) -> ScheduleInfo:
        """Fire ticks again, from the first tick after now: ticks that came while it
        was paused are not caught up. Raises `ScheduleNotFound`."""
        stored = await self._schedule(schedule_id)
        now = self.clock.time()
        await self._op(schedule_id, ScheduleOp.RESUME, Cron(stored.cron, stored.tz).next_after(now))
        return await self._schedule(schedule_id)

    async def delete_schedule(self, schedule_id: str) -> None:
        """Delete the schedule (its runs are kept). Raises `ScheduleNotFound`. A
        ``@scheduled`` flow's schedule is created again by the next worker that
        starts serving the flow."""
        await self._op(schedule_id, ScheduleOp.DELETE)

    async def list_schedules(self) -> list[ScheduleInfo]:
        """Every schedule, oldest first."""
        return [schedule_info(s) for s in await self.store.schedules()]

    async def trigger_schedule(self, schedule_id: str) -> RunHandle:
        """Start a run of the schedule now (also when paused; the overlap policy does
        not apply), with now as its tick time. The next pass of a worker serving
        the flow starts it (workers are woken); the handle's run id is
        ``f"{schedule_id}@{now}"``. Raises `ScheduleNotFound`."""
        stored = await self._schedule(schedule_id)
        now = self.clock.time()
        await self._op(schedule_id, ScheduleOp.TRIGGER, now=now)
        tick = Cron(stored.cron, stored.tz).local(now)
        return RunHandle(self, self.store.schedule_run_id(tick_run_id(schedule_id, tick)))

    async def _op(
        self, schedule_id: str, op: ScheduleOp, next_at: float | None = None,
        now: float | None = None,
    ) -> None:  # fmt: skip
        check_id(schedule_id, "schedule_id")
        when = self.clock.time() if now is None else now
        if not await self.store.schedule_op(schedule_id, op, when, next_at):
            raise ScheduleNotFound(schedule_id)

    async def _schedule(self, schedule_id: str) -> ScheduleInfo:
        check_id(schedule_id, "schedule_id")
        found = await self.store.schedules([schedule_id])
        if not found:
            raise ScheduleNotFound(schedule_id)
        return schedule_info(found[0])
