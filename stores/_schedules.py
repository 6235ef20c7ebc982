"""Schedules on Redis: `Store.save_schedule`, `schedule_op`, `schedules`,
`due_schedules` and `fire_schedules` (see `sdk.store.ScheduleStore`).

A schedule is a hash (``sch:<id>``) in partition 0, listed in ``schedules``;
while it needs a worker it sits in its flow's due index (``schq:<flow>``,
score: when). Its tick runs are created by the same script that advances it
(``schedule_fire.lua``), in the same slot: with several partitions, a tick
run's id gets the first ``~p<n>`` suffix that puts it in partition 0
(`schedule_run_id`), deterministic, so every worker derives the same id.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
from redis.exceptions import ResponseError

from sdk.store._schedules import (
    NewSchedule,
    ScheduleFire,
    ScheduleOp,
    StoredSchedule,
)
from stores import _codec, _decode
from stores._codec import num
from stores._keys import SUFFIX
from stores._storecore import StoreCore

__all__ = ["Schedules"]

# How many schedules one `due_schedules` round trip returns at most.
DUE_LIMIT = 500


class Schedules:
    """The schedule operations of `stores.redis.RedisStore` (fires are pipelined as
    child starts are: `StoreCore.pipelined`)."""

    def __init__(self, core: StoreCore) -> None:
        self._core = core
        self._keys = core.keys

    def _schedule_key(self, schedule_id: str) -> str:
        return self._keys.base(0) + SUFFIX["schedule"] + schedule_id

    def schedule_run_id(self, run_id: str) -> str:
        return self._keys.in_partition(run_id, 0)

    async def save_schedule(
        self, new: NewSchedule, *, replace: bool, now: float, audit_data: str = ""
    ) -> int:
        key = self._schedule_key(new.schedule_id)
        reply = await self._core.call(
            "schedule_save",
            [key],
            [
                self._keys.base(0), new.schedule_id, "ensure" if replace else "create", num(now),
                new.spec, "" if new.next_at is None else num(new.next_at), new.flow, new.queue,
                audit_data, "cron", new.cron, "tz", new.tz, "args", new.args,
                "overlap", new.overlap, "catchup", "" if new.catchup is None else num(new.catchup),
            ],
        )  # fmt: skip
        return int(_decode.corrupt("", reply))

    async def schedule_op(
        self, schedule_id: str, op: ScheduleOp, now: float, next_at: float | None = None, *,
        audit_data: str = "",
    ) -> bool:  # fmt: skip
        key = self._schedule_key(schedule_id)
        reply = await self._core.call(
            "schedule_state",
            [key],
            [self._keys.base(0), schedule_id, op.value, num(now),
             "" if next_at is None else num(next_at), audit_data],
        )  # fmt: skip
        return bool(_decode.corrupt("", reply) == 1)

    async def schedules(self, schedule_ids: Sequence[str] | None = None) -> list[StoredSchedule]:
        if not self._core.layout_ok:
            await self._core.read_layout()
        ids: list[str]
        if schedule_ids is None:
            ids = [
                str(x)
                for x in await self._core.client.zrange(
                    self._keys.base(0) + SUFFIX["schedules"], 0, -1
                )
            ]
        else:
            ids = list(schedule_ids)
        async with self._core.client.pipeline(transaction=False) as pipe:
            for sid in ids:
                pipe.hgetall(self._schedule_key(sid))
            rows = await pipe.execute(raise_on_error=False)
        out = []
        for sid, row in zip(ids, rows, strict=True):
            if isinstance(row, ResponseError) or not row:
                continue
            sched = _stored(sid, row, "")
            if sched is not None:
                out.append(sched)
        # statuses of the last runs, in one more round trip
        async with self._core.client.pipeline(transaction=False) as pipe:
            for s in out:
                pipe.hget(self._keys.run(s.last_run_id or "-"), "status")
            statuses = await pipe.execute(raise_on_error=False)
        return [
            _with_status(s, st if isinstance(st, str) else "")
            for s, st in zip(out, statuses, strict=True)
        ]

    async def due_schedules(
        self, flows: Sequence[str], now: float
    ) -> tuple[list[StoredSchedule], float | None]:
        if not flows:
            return [], None
        reply = await self._core.call(
            "schedule_due",
            [self._core.anchor(0)],
            [self._keys.base(0), num(now), str(DUE_LIMIT), *flows],
        )
        nxt, rows = _decode.corrupt("", reply)
        out = []
        for sid, flat, status in rows:
            sched = _stored(sid, dict(zip(flat[::2], flat[1::2], strict=True)), status)
            if sched is not None:
                out.append(sched)
        return out, (float(nxt) if nxt else None)

    async def fire_schedules(self, fires: Sequence[ScheduleFire]) -> list[list[str] | None]:
        base = self._keys.base(0)
        calls = []
        for fire in fires:
            args = [
                base, fire.schedule_id, fire.version, num(fire.now),
                ("" if fire.next_at is None else num(fire.next_at)) if fire.advance else "-",
                str(len(fire.starts)),
            ]  # fmt: skip
            for start in fire.starts:
                fields = _codec.run_fields(start.run)
                args += [
                    start.kind.value, num(start.tick), start.run.run_id, start.run.args_hash,
                    start.event_data, str(len(fields)), *fields,
                ]  # fmt: skip
            calls.append(([self._schedule_key(fire.schedule_id)], args))
        out: list[list[str] | None] = []
        for reply in await self._core.pipelined("schedule_fire", calls):
            _decode.corrupt("", reply)
            out.append(None if reply == 0 else [str(r) for r in reply[1:]])
        return out


def _opt_float(text: str | None) -> float | None:
    return float(text) if text else None


def _stored(schedule_id: str, h: dict[str, str], status: str) -> StoredSchedule | None:
    """A `StoredSchedule` from its hash; None when the hash cannot be read (a
    schedule damaged by hand is left alone: it neither fires nor is listed)."""
    try:
        return StoredSchedule(
            schedule_id=schedule_id,
            flow=h["flow"],
            queue=h["queue"],
            cron=h["cron"],
            tz=h["tz"],
            args=h["args"],
            overlap=h["overlap"],
            catchup=_opt_float(h.get("catchup")),
            spec=h["spec"],
            paused=h.get("paused") == "1",
            next_at=_opt_float(h.get("next")),
            created_at=float(h["created_at"]),
            version=h["ver"],
            last_run_id=h.get("last_run") or None,
            last_run_status=status,
            last_tick=_opt_float(h.get("last_tick")),
            last_skipped=_opt_float(h.get("last_skipped")),
            buffered=_opt_float(h.get("buffered")),
            trigger=_opt_float(h.get("trigger")),
            fired=int(h.get("fired") or 0),
            skipped=int(h.get("skipped") or 0),
        )
    except (KeyError, ValueError):
        return None


def _with_status(s: StoredSchedule, status: str) -> StoredSchedule:
    return attrs.evolve(s, last_run_status=status if s.last_run_id else "")
