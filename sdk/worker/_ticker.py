"""Firing schedules: the part of a worker's pass that starts due ticks' runs.

There is no scheduler process and no leader: every worker that serves a flow
fires its schedules' due ticks, from the durable due index in the store
(`sdk.store.ScheduleStore`). Each fire is one atomic store write that
starts the tick's runs and advances the schedule, and only if the schedule is
still at the version the worker read: a second worker that fires the same
tick writes nothing. A tick's run id is derived from the schedule and the tick
(`sdk.model._schedules.tick_run_id`), so even a repeated write starts no second run.

Reads are spared: the worker's poll (one round trip it makes anyway) reports
when a schedule of a flow it serves next needs a worker (a tick, a trigger, a
buffered tick whose previous run ended); the worker reads the due index only
when that time has come, and otherwise blocks until then, never polling.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from sdk._core._clock import Clock
from sdk._core._serde import dumps
from sdk._core._values import Serializer
from sdk.client._starting import new_run
from sdk.model._flowdef import FlowDef
from sdk.model._schedules import (
    MAX_TICKS,
    Cron,
    encode_schedule_args,
    new_schedule,
    schedule_of,
    tick_run_id,
)
from sdk.store import RunStatus, ScheduleFire, StoredSchedule, TickKind, TickStart

if TYPE_CHECKING:
    from sdk.store import Store

__all__ = ["Ticker"]

log = logging.getLogger("steadyflow.worker")

_ROUNDS = 100  # due reads per pass at most (each fires a batch; a store returns a few hundred)


def _ended(status: str) -> bool:
    return status == "" or RunStatus(status).is_terminal


class Ticker:
    """Fires the schedules of the flows a worker serves (see the module)."""

    def __init__(
        self, store: Store, clock: Clock, serializer: Serializer,
        flow_of: Callable[[str], FlowDef | None],
    ) -> None:  # fmt: skip
        self.store = store
        self.clock = clock
        self.serializer = serializer
        self._flow_of = flow_of
        self._ensured: set[str] = set()
        self._crons: dict[tuple[str, str], Cron] = {}

    async def fire(self, served: Sequence[str]) -> tuple[int, float | None]:
        """Fire what is due of the served flows' schedules: how many runs that
        started, and when the next schedule is due (None: none)."""
        now = self.clock.time()
        started = 0
        nxt: float | None = None
        for _ in range(_ROUNDS):
            due, nxt = await self.store.due_schedules(served, now)
            fires = [f for f in (self._plan(s, now) for s in due) if f is not None]
            if not fires:
                break
            # read again until nothing is due: more than one batch, a fire another
            # worker got first, a long catch-up that goes on
            for runs in await self.store.fire_schedules(fires):
                started += len(runs or ())
        else:
            nxt = now  # rounds used up with ticks still due: the next pass goes on
        return started, nxt

    async def ensure(self, served: Sequence[str]) -> None:
        """Create (or update) the served ``@scheduled`` flows' schedules, once each."""
        now = self.clock.time()
        for name in served:
            if name in self._ensured:
                continue
            fd = self._flow_of(name)
            spec = None if fd is None else schedule_of(fd.fn)
            if fd is None or spec is None:
                self._ensured.add(name)
                continue
            args = encode_schedule_args(fd, (), {}, self.serializer)
            try:
                await self.store.save_schedule(
                    new_schedule(fd.name, fd, spec, args, now), replace=True, now=now
                )
            except ValueError as exc:  # a store that cannot keep schedules: serve the rest
                log.error("flow %r: its @scheduled schedule cannot be saved: %s", name, exc)
            # (any other error, e.g. an outage, fails the pass: the next one tries again)
            self._ensured.add(name)

    def _cron(self, expr: str, tz: str) -> Cron:
        cron = self._crons.get((expr, tz))
        if cron is None:
            cron = self._crons[(expr, tz)] = Cron(expr, tz)
        return cron

    def _plan(self, s: StoredSchedule, now: float) -> ScheduleFire | None:
        """What to fire of schedule `s` at `now`, or None (nothing, or it cannot be)."""
        fd = self._flow_of(s.flow)
        if fd is None:
            return None
        cron = self._cron(s.cron, s.tz)
        starts: list[tuple[TickKind, float]] = []
        if s.trigger is not None:
            starts.append((TickKind.TRIGGER, s.trigger))
        if s.buffered is not None and _ended(s.last_run_status):
            starts.append((TickKind.BUFFERED, s.buffered))
        advance, next_at = False, s.next_at
        if not s.paused and s.next_at is not None and s.next_at <= now:
            advance = True
            ticks, next_at = self._due_ticks(s, s.next_at, cron, now)
            starts += [(TickKind.TICK, t) for t in ticks]
        if not starts and not advance:
            return None
        try:
            runs = tuple(self._start(s, fd, cron, kind, t, now) for kind, t in starts)
        except Exception:  # arguments the flow no longer accepts: say so, fire nothing
            log.exception("schedule %r: cannot start its runs", s.schedule_id)
            return None
        return ScheduleFire(s.schedule_id, s.version, now, runs, advance, next_at)

    @staticmethod
    def _due_ticks(
        s: StoredSchedule, first: float, cron: Cron, now: float
    ) -> tuple[list[float], float | None]:
        """The ticks to fire (oldest first) and the next tick after them."""
        if s.catchup is None:  # only the last missed tick
            last = cron.last_until(now)
            return [last if last is not None and last >= first else first], cron.next_after(now)
        start = max(first, now - s.catchup)
        ticks: list[float] = [first] if first >= start else []
        for t in cron.after(ticks[-1] if ticks else start - 0.001):
            if t > now or len(ticks) >= MAX_TICKS:
                return ticks, t  # past MAX_TICKS: the next pass goes on from t
            ticks.append(t)
        return ticks, None

    def _start(
        self, s: StoredSchedule, fd: FlowDef, cron: Cron, kind: TickKind, t: float, now: float
    ) -> TickStart:
        tick = cron.local(t)
        args, kwargs = fd.decode_args(s.args, self.serializer)
        args[0] = tick
        run_id = self.store.schedule_run_id(tick_run_id(s.schedule_id, tick))
        new = new_run(
            fd, tuple(args), kwargs, self.serializer, run_id=run_id, priority=0,
            queue=s.queue, tenant_id=None, options=None, now=now,
        )  # fmt: skip
        data = dumps({"schedule_id": s.schedule_id, "tick": tick.isoformat(), "cause": kind.value})
        return TickStart(kind, t, new, data)
