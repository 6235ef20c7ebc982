"""The schedule operations of `Client` (`create_schedule`, `pause_schedule`, ...): `Schedules`.

Schedules are kept by the store and fired by the workers that serve their flow
(`sdk.worker._ticker`); see `sdk.model._schedules` for the cron and DST rules.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sdk._core._checks import check_id
from sdk.client._handle import RunHandle
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

if TYPE_CHECKING:
    from sdk.client._clientcore import ClientCore

__all__ = ["Schedules"]


class Schedules:
    """`Client.create_schedule` and the other schedule operations."""

    __slots__ = ("_core",)

    def __init__(self, core: ClientCore) -> None:
        self._core = core

    async def create(
        self, schedule_id: str, flow: Callable[..., Any] | str, cron: str,
        args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any] | None, tz: str,
        overlap: str, catchup: timedelta | None,
    ) -> ScheduleInfo:  # fmt: skip
        spec = check_spec(schedule_id, cron, tz, overlap, catchup)
        if not isinstance(args, tuple | list):
            raise InvalidArgument(
                f"schedule {schedule_id!r}: args must be a tuple or list, got {type(args).__name__}"
            )
        if kwargs is not None and not isinstance(kwargs, dict):
            raise InvalidArgument(
                f"schedule {schedule_id!r}: kwargs must be a dict, got {type(kwargs).__name__}"
            )
        core = self._core
        fd = core.flow_def(flow)
        if isinstance(fd, FlowDef):
            check_tick_parameter(fd.fn, f"schedule {schedule_id!r}")
        now = core.clock.time()
        encoded = encode_schedule_args(fd, tuple(args), dict(kwargs or {}), core.serializer)
        new = new_schedule(schedule_id, fd, spec, encoded, now)
        if await core.store.save_schedule(new, replace=False, now=now) == -1:
            raise IdempotencyConflict(
                f"schedule {schedule_id!r} exists with another definition; "
                "delete it first to change it"
            )
        return await self.get(schedule_id)

    async def pause(self, schedule_id: str) -> ScheduleInfo:
        await self._op(schedule_id, ScheduleOp.PAUSE)
        return await self.get(schedule_id)

    async def resume(self, schedule_id: str) -> ScheduleInfo:
        stored = await self.get(schedule_id)
        now = self._core.clock.time()
        await self._op(schedule_id, ScheduleOp.RESUME, Cron(stored.cron, stored.tz).next_after(now))
        return await self.get(schedule_id)

    async def delete(self, schedule_id: str) -> None:
        await self._op(schedule_id, ScheduleOp.DELETE)

    async def list_all(self) -> list[ScheduleInfo]:
        return [schedule_info(s) for s in await self._core.store.schedules()]

    async def trigger(self, schedule_id: str) -> RunHandle:
        stored = await self.get(schedule_id)
        core = self._core
        now = core.clock.time()
        await self._op(schedule_id, ScheduleOp.TRIGGER, now=now)
        tick = Cron(stored.cron, stored.tz).local(now)
        return RunHandle(core, core.store.schedule_run_id(tick_run_id(schedule_id, tick)))

    async def get(self, schedule_id: str) -> ScheduleInfo:
        """The schedule as stored now. Raises `ScheduleNotFound`."""
        check_id(schedule_id, "schedule_id")
        found = await self._core.store.schedules([schedule_id])
        if not found:
            raise ScheduleNotFound(schedule_id)
        return schedule_info(found[0])

    async def _op(
        self, schedule_id: str, op: ScheduleOp, next_at: float | None = None,
        now: float | None = None,
    ) -> None:  # fmt: skip
        check_id(schedule_id, "schedule_id")
        when = self._core.clock.time() if now is None else now
        if not await self._core.store.schedule_op(schedule_id, op, when, next_at):
            raise ScheduleNotFound(schedule_id)
