"""Schedules: the ``@scheduled`` decorator, their spec and its checks, the cron
adapter, and `ScheduleInfo`.

Cron expressions are evaluated by cronsim (the one adapter is `Cron`): it is
maintained (it serves Healthchecks), small, and follows Debian cron in a time
zone's DST transitions, with zoneinfo. What that means for a schedule:

- spring forward (Europe/Paris, 2026-03-29, 02:00 -> 03:00): a daily ``30 2 * * *``
  fires at 03:00 that day (a time in the skipped hour fires when it ends); an
  hourly ``0 * * * *`` has no 02:00 tick (that hour does not exist);
- fall back (2026-10-25, 03:00 -> 02:00): the daily ``30 2 * * *`` fires once (at
  the first 02:30); the hourly one fires at both 02:00s (every real hour).

A tick is identified by its instant: its run id is ``f"{schedule_id}@{tick}"``
with the tick in ISO 8601 with its UTC offset (``2026-10-25T02:00:00+01:00``),
so the two 02:00s of a fall-back night are two ticks.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs
from cronsim import CronSim, CronSimError

from sdk._core._checks import check_id, show
from sdk._core._clock import MAX_SECONDS
from sdk._core._values import Serializer
from sdk.errors import InvalidArgument
from sdk.model._flowdef import FlowDef, encode_call
from sdk.model._registry import flow_def_of
from sdk.store import NewSchedule, StoredSchedule

__all__ = [
    "OVERLAPS", "Cron", "ScheduleInfo", "ScheduleSpec", "check_spec", "encode_schedule_args",
    "new_schedule", "schedule_info", "schedule_of", "scheduled", "tick_run_id",
]  # fmt: skip

F = TypeVar("F", bound=Callable[..., Any])

#: The overlap policies (see `ScheduleInfo.overlap`).
OVERLAPS = ("skip", "buffer_one", "allow")

_ATTR = "__steadyflow_schedule__"

# How many ticks one fire starts for one schedule at most (one script call; a
# longer catch-up goes on with the next fire).
MAX_TICKS = 1000


def _real_datetime() -> type[datetime]:
    """The datetime class itself, also while freezegun (FakeClock) replaces it: a
    fake datetime drops `fold` in `astimezone`, and cronsim, which relies on it in
    a repeated hour, would loop forever."""
    return next(
        c for c in datetime.__mro__ if c.__module__ == "datetime" and c.__name__ == "datetime"
    )


# in a tuple: freezegun replaces module attributes that are the datetime class
_REAL = (_real_datetime(),)


class Cron:
    """A cron expression in a time zone: tick times as epoch seconds (cronsim)."""

    __slots__ = ("expr", "zone")

    def __init__(self, expr: str, tz: str) -> None:
        self.expr = expr
        self.zone = ZoneInfo(tz)

    def after(self, t: float) -> Iterator[float]:
        """The ticks strictly after `t`, in order (ends if the cron never matches again)."""
        it = CronSim(self.expr, _REAL[0].fromtimestamp(t, self.zone))
        last = t
        while True:
            try:
                tick = next(it).timestamp()
            except StopIteration:
                return
            # cronsim started inside a repeated (fall-back) hour can answer a
            # time before its start: only strictly later instants are ticks
            if tick > last:
                last = tick
                yield tick

    def next_after(self, t: float) -> float | None:
        return next(self.after(t), None)

    def last_until(self, t: float) -> float | None:
        """The latest tick at or before `t` (None: none within cronsim's reach)."""
        it = CronSim(self.expr, _REAL[0].fromtimestamp(t + 1, self.zone), reverse=True)
        for _ in range(3):  # see `after`: skip answers that are not at or before t
            try:
                tick = next(it).timestamp()
            except StopIteration:
                return None
            if tick <= t:
                return tick
        return None

    def local(self, t: float) -> datetime:
        """Tick `t` as an aware datetime with the zone's UTC offset at that instant
        (a fixed offset: that is what a run's arguments can hold exactly)."""
        offset = _REAL[0].fromtimestamp(t, self.zone).utcoffset() or timedelta(0)
        # the module's datetime (a fake one under FakeClock, as user code sees it)
        return datetime.fromtimestamp(t, timezone(offset))


def tick_run_id(schedule_id: str, tick: datetime) -> str:
    """The run id of a schedule's tick: the same for every worker that fires it."""
    return f"{schedule_id}@{tick.isoformat()}"


@attrs.frozen
class ScheduleSpec:
    """A schedule's definition, checked (`check_spec`)."""

    cron: str
    tz: str
    overlap: str
    catchup: float | None  # seconds; None: only the last missed tick

    def digest(self, flow: str, queue: str, args: str) -> str:
        text = json.dumps([flow, queue, args, self.cron, self.tz, self.overlap, self.catchup])
        return hashlib.sha256(text.encode()).hexdigest()[:32]


def check_spec(schedule_id: Any, cron: Any, tz: Any, overlap: Any, catchup: Any) -> ScheduleSpec:
    """The spec, or `InvalidArgument` naming the schedule and the argument."""
    sid = check_id(schedule_id, "schedule_id")
    where = f"schedule {sid!r}"
    if "@" in sid:
        raise InvalidArgument(
            f"{where}: schedule_id must not contain '@' (tick run ids are "
            f"'<schedule_id>@<tick time>'), got {show(sid)}"
        )
    if not isinstance(tz, str) or not tz:
        raise InvalidArgument(f"{where}: tz must be a time zone name like 'Europe/Paris', "
                              f"got {show(tz)}")  # fmt: skip
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidArgument(f"{where}: tz {tz!r} is not a known time zone") from None
    if not isinstance(cron, str):
        raise InvalidArgument(f"{where}: cron must be a str, got {show(cron)}")
    try:
        CronSim(cron, datetime(2000, 1, 1, tzinfo=ZoneInfo(tz)))
    except (CronSimError, ValueError, IndexError, KeyError) as exc:
        raise InvalidArgument(f"{where}: cron {cron!r} is not a cron expression ({exc})") from None
    if overlap not in OVERLAPS:
        raise InvalidArgument(
            f"{where}: overlap must be one of {', '.join(map(repr, OVERLAPS))}, got {show(overlap)}"
        )
    window: float | None = None
    if catchup is not None:
        if isinstance(catchup, timedelta):
            window = catchup.total_seconds()
        elif isinstance(catchup, int | float) and not isinstance(catchup, bool):
            window = float(catchup)
        else:
            raise InvalidArgument(
                f"{where}: catchup must be a timedelta (or seconds), got {show(catchup)}"
            )
        if not math.isfinite(window) or not 0 <= window <= MAX_SECONDS:
            raise InvalidArgument(
                f"{where}: catchup must be >= 0 and at most {MAX_SECONDS:.0e} seconds, "
                f"got {show(catchup)}"
            )
    return ScheduleSpec(cron, tz, overlap, window)


def check_tick_parameter(fn: Callable[..., Any], where: str) -> None:
    """A scheduled flow's first parameter receives the tick time: it must have one."""
    params = list(inspect.signature(fn).parameters.values())
    if not params or params[0].kind not in (params[0].POSITIONAL_ONLY,
                                            params[0].POSITIONAL_OR_KEYWORD):  # fmt: skip
        raise InvalidArgument(
            f"{where}: a scheduled flow's first parameter receives the tick time "
            f"(a datetime); {fn.__qualname__} has no positional parameter"
        )


def scheduled(
    cron: str, *, tz: str = "UTC", overlap: str = "skip", catchup: timedelta | None = None
) -> Callable[[F], F]:
    """Run a flow on a cron schedule: each tick starts one run, whose first argument
    is the tick time (an aware datetime with the schedule's UTC offset at the tick).

    The schedule's id is the flow's name. Every worker that serves the flow creates
    the schedule when it starts, or updates it if the decorator changed (its
    paused state and history are kept); ticks are fired by those workers, one run
    per tick however many there are. Put it above or below ``@flow``.

    Args:
        cron: a five-field cron expression (``"0 * * * *"``: hourly).
        tz: the time zone the expression is read in (``"Europe/Paris"``).
        overlap: when a tick comes while the previous tick's run has not finished:
            ``"skip"`` the tick (counted in `ScheduleInfo.skipped`), ``"buffer_one"``
            (one tick waits and starts when that run ends; more are skipped), or
            ``"allow"`` (runs overlap).
        catchup: after downtime, fire the ticks missed within this window, oldest
            first; default: only the last missed tick.

    Example::

        @scheduled("0 * * * *", tz="Europe/Paris")
        @flow
        async def hourly_report(tick: datetime) -> None: ...
    """
    check_spec("scheduled", cron, tz, overlap, catchup)

    def decorate(fn: F) -> F:
        fd = flow_def_of(fn)
        if fd is not None:
            spec = check_spec(fd.name, cron, tz, overlap, catchup)
        else:
            spec = check_spec("scheduled", cron, tz, overlap, catchup)
        check_tick_parameter(fn, f"@scheduled on {show(getattr(fn, '__qualname__', fn))}")
        setattr(fn, _ATTR, spec)
        return fn

    return decorate


def schedule_of(fn: Callable[..., Any]) -> ScheduleSpec | None:
    """The spec `scheduled` put on a flow function (either decorator order)."""
    spec = getattr(fn, _ATTR, None)
    return spec if isinstance(spec, ScheduleSpec) else None


@attrs.frozen
class ScheduleInfo:
    """A schedule, as `Client.list_schedules` and `create_schedule` report it.

    Attributes:
        schedule_id: its id (a decorated flow's: the flow name).
        flow: the flow each tick starts.
        cron: the cron expression; `tz` the time zone it is read in.
        overlap: ``"skip"``, ``"buffer_one"`` or ``"allow"``.
        catchup: the catch-up window; None: only the last missed tick.
        paused: whether ticks are paused.
        next_tick: the next tick (in `tz`), None when paused or when the
            expression never matches again.
        last_tick: the tick of the last run started; `last_run_id` its run.
        buffered_tick: a tick waiting for the last run to end (``buffer_one``).
        fired: runs started (ticks, buffered ticks and triggers).
        skipped: ticks skipped because the previous run had not finished;
            `last_skipped_tick` the latest of them.
        created_at: when the schedule was created.
    """

    schedule_id: str
    flow: str
    cron: str
    tz: str
    overlap: str
    catchup: timedelta | None
    paused: bool
    next_tick: datetime | None
    last_tick: datetime | None
    last_run_id: str | None
    buffered_tick: datetime | None
    fired: int
    skipped: int
    last_skipped_tick: datetime | None
    created_at: datetime


def encode_schedule_args(
    fd: FlowDef | str, args: tuple[Any, ...], kwargs: dict[str, Any], serializer: Serializer
) -> str:
    """JSON of a tick's call with a placeholder tick first (each tick puts its own
    time there): checks the arguments fit the flow, before anything is written.
    The placeholder is always the same, so the same definition gives the same
    text (a worker restarting with an unchanged ``@scheduled`` changes nothing)."""
    # made here, not at import: under FakeClock the datetime class is freezegun's
    call = (datetime(2000, 1, 1, tzinfo=UTC), *args)
    if isinstance(fd, FlowDef):
        return fd.encode_args(call, kwargs, serializer)
    for k in kwargs:
        check_id(k, f"flow {fd!r} keyword name")
    return encode_call(fd, call, kwargs, serializer, _tick_first)


def _tick_first(index: int | None, name: str | None) -> tuple[str, Any]:
    """A call's parameter, for a flow this process does not define: the first is the
    tick (a datetime), the others have no annotation here."""
    return (str(index) if name is None else name), (datetime if index == 0 else None)


def new_schedule(
    schedule_id: str, fd: FlowDef | str, spec: ScheduleSpec, args_json: str, now: float
) -> NewSchedule:
    name = fd.name if isinstance(fd, FlowDef) else fd
    queue = fd.queue if isinstance(fd, FlowDef) else "default"
    return NewSchedule(
        schedule_id=schedule_id, flow=name, queue=queue, cron=spec.cron, tz=spec.tz,
        args=args_json, overlap=spec.overlap, catchup=spec.catchup,
        spec=spec.digest(name, queue, args_json),
        next_at=Cron(spec.cron, spec.tz).next_after(now),
    )  # fmt: skip


def _window(catchup: float) -> timedelta:
    # a window stored before it was bounded (1e300: past what a timedelta holds), or
    # by hand, reads as the nearest one taken now (the longest fires every missed
    # tick alike), so that one schedule does not break every listing
    if not math.isfinite(catchup):
        return timedelta(seconds=MAX_SECONDS if catchup > 0 else 0.0)
    return timedelta(seconds=min(max(catchup, 0.0), MAX_SECONDS))


def schedule_info(s: StoredSchedule) -> ScheduleInfo:
    """The public view of a stored schedule."""
    cron = Cron(s.cron, s.tz)

    def local(t: float | None) -> datetime | None:
        return None if t is None else cron.local(t)

    return ScheduleInfo(
        schedule_id=s.schedule_id, flow=s.flow, cron=s.cron, tz=s.tz, overlap=s.overlap,
        catchup=None if s.catchup is None else _window(s.catchup),
        paused=s.paused, next_tick=None if s.paused else local(s.next_at),
        last_tick=local(s.last_tick), last_run_id=s.last_run_id,
        buffered_tick=local(s.buffered), fired=s.fired, skipped=s.skipped,
        last_skipped_tick=local(s.last_skipped),
        created_at=datetime.fromtimestamp(s.created_at, UTC),
    )  # fmt: skip
