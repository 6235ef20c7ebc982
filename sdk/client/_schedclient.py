"""The schedule operations of `Client` (`create_schedule`, `pause_schedule`, ...): `Schedules`.

Schedules are kept by the store and fired by the workers that serve their flow
(`sdk.worker._ticker`); see `sdk.model._schedules` for the cron and DST rules.
Every operation here is an entry of the deployment's audit log (written by the
store in the same step as the change), and is put to the authorizer when it
names an actor.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sdk._core._checks import check_id, check_optional_id
from sdk._core._serde import dumps
from sdk._core._types import RunRecord, RunStatus
from sdk.client._handle import RunHandle
from sdk.client._runs import utc
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
from sdk.store import ScheduleOp, StoredSchedule

if TYPE_CHECKING:
    from sdk.client._clientcore import ClientCore

__all__ = ["Schedules"]


class Schedules:
    """`Client.create_schedule` and the other schedule operations: each authorized
    (when it names an actor) and written with its audit log entry in one store call."""

    __slots__ = ("_core",)

    def __init__(self, core: ClientCore) -> None:
        self._core = core

    async def create(
        self, schedule_id: str, flow: Callable[..., Any] | str, cron: str,
        args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any] | None, tz: str,
        overlap: str, catchup: timedelta | None, actor: str | None,
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
        check_optional_id(actor, "create_schedule(): actor")
        core = self._core
        fd = core.flow_def(flow)
        if isinstance(fd, FlowDef):
            check_tick_parameter(fd.fn, f"schedule {schedule_id!r}")
        now = core.clock.time()
        encoded = encode_schedule_args(fd, tuple(args), dict(kwargs or {}), core.serializer)
        new = new_schedule(schedule_id, fd, spec, encoded, now)
        await self._authorize(actor, "create_schedule", schedule_id, new.flow, new.queue, now)
        said = {"actor": actor, "flow": new.flow, "cron": new.cron, "tz": new.tz,
                "overlap": new.overlap}  # fmt: skip
        saved = await core.store.save_schedule(new, replace=False, now=now, audit_data=dumps(said))
        if saved == -1:
            raise IdempotencyConflict(
                f"schedule {schedule_id!r} exists with another definition; "
                "delete it first to change it"
            )
        return await self.get(schedule_id)

    async def pause(self, schedule_id: str, actor: str | None) -> ScheduleInfo:
        await self._op(schedule_id, ScheduleOp.PAUSE, actor)
        return await self.get(schedule_id)

    async def resume(self, schedule_id: str, actor: str | None) -> ScheduleInfo:
        stored = await self._stored(schedule_id)
        now = self._core.clock.time()
        nxt = Cron(stored.cron, stored.tz).next_after(now)
        await self._op(schedule_id, ScheduleOp.RESUME, actor, nxt, stored=stored)
        return await self.get(schedule_id)

    async def delete(self, schedule_id: str, actor: str | None) -> None:
        await self._op(schedule_id, ScheduleOp.DELETE, actor)

    async def list_all(self) -> list[ScheduleInfo]:
        return [schedule_info(s) for s in await self._core.store.schedules()]

    async def trigger(self, schedule_id: str, actor: str | None) -> RunHandle:
        stored = await self._stored(schedule_id)
        core = self._core
        now = core.clock.time()
        tick = Cron(stored.cron, stored.tz).local(now)
        run_id = core.store.schedule_run_id(tick_run_id(schedule_id, tick))
        await self._op(schedule_id, ScheduleOp.TRIGGER, actor, now=now, stored=stored,
                       said={"run_id": run_id})  # fmt: skip
        return RunHandle(core, run_id)

    async def get(self, schedule_id: str) -> ScheduleInfo:
        """The schedule as stored now. Raises `ScheduleNotFound`."""
        return schedule_info(await self._stored(schedule_id))

    async def _stored(self, schedule_id: str) -> StoredSchedule:
        check_id(schedule_id, "schedule_id")
        found = await self._core.store.schedules([schedule_id])
        if not found:
            raise ScheduleNotFound(schedule_id)
        return found[0]

    async def _authorize(
        self, actor: str | None, action: str, schedule_id: str, flow: str, queue: str, now: float
    ) -> None:
        """Ask the authorizer about `action` on the schedule, with the record of a
        run it starts (its id is the schedule's)."""
        record = RunRecord(
            run_id=schedule_id, flow=flow, status=RunStatus.PENDING, created_at=utc(now),
            queue=queue, trace_id=schedule_id, root_run_id=schedule_id, schedule_id=schedule_id,
        )  # fmt: skip
        await self._core.authorize_new(
            actor, action, record, f"schedule {schedule_id!r}", schedule_id=schedule_id
        )

    async def _op(
        self, schedule_id: str, op: ScheduleOp, actor: str | None, next_at: float | None = None,
        *, now: float | None = None, stored: StoredSchedule | None = None,
        said: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        check_id(schedule_id, "schedule_id")
        check_optional_id(actor, f"{op.value}_schedule(): actor")
        core = self._core
        when = core.clock.time() if now is None else now
        if core.authorizer is not None and actor is not None:
            stored = stored or await self._stored(schedule_id)
            await self._authorize(
                actor, f"{op.value}_schedule", schedule_id, stored.flow, stored.queue, when
            )
        audit = dumps({"actor": actor, **(said or {})})
        if not await core.store.schedule_op(schedule_id, op, when, next_at, audit_data=audit):
            raise ScheduleNotFound(schedule_id)
