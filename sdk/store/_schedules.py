"""The records of schedules that cross the store protocol (`sdk.store._protocol.ScheduleStore`).

A store keeps a schedule's spec as opaque text the engine wrote (the cron
expression, the time zone, the call's arguments as JSON) and computes nothing
from it: the engine works out tick times and passes them in.
"""

from __future__ import annotations

import enum

import attrs

from sdk.store._records import NewRun

__all__ = ["NewSchedule", "ScheduleFire", "ScheduleOp", "StoredSchedule", "TickKind", "TickStart"]


class ScheduleOp(enum.Enum):
    """What `ScheduleStore.schedule_op` does to a schedule."""

    PAUSE = "pause"
    RESUME = "resume"
    DELETE = "delete"
    TRIGGER = "trigger"


class TickKind(enum.Enum):
    """Why a run of a schedule starts (`TickStart`)."""

    TICK = "tick"  # a cron tick came due (subject to the overlap policy)
    BUFFERED = "buffered"  # the tick buffered behind the last run, which has ended
    TRIGGER = "trigger"  # a trigger asked for (always starts)


@attrs.frozen
class NewSchedule:
    """A schedule to save. `spec` identifies its definition (a hash of the
    fields): saving the same spec again changes nothing."""

    schedule_id: str
    flow: str
    queue: str
    cron: str
    tz: str
    args: str  # JSON of the call, made with a placeholder tick as the first argument
    overlap: str
    catchup: float | None  # seconds; None: only the last missed tick
    spec: str
    next_at: float | None  # the first tick; None: the expression never matches


@attrs.frozen
class StoredSchedule:
    """A schedule as stored, with the status of its last run ('' if none or gone)."""

    schedule_id: str
    flow: str
    queue: str
    cron: str
    tz: str
    args: str
    overlap: str
    catchup: float | None
    spec: str
    paused: bool
    next_at: float | None
    created_at: float
    version: str  # changes with every write: `ScheduleFire` is refused unless it is current
    last_run_id: str | None = None
    last_run_status: str = ""
    last_tick: float | None = None
    last_skipped: float | None = None
    buffered: float | None = None  # a tick waiting for the last run to end (buffer_one)
    trigger: float | None = None  # a trigger asked for at that time, not started yet
    fired: int = 0
    skipped: int = 0


@attrs.frozen
class TickStart:
    """One run a `ScheduleFire` may start: its tick (epoch seconds) and its run."""

    kind: TickKind
    tick: float
    run: NewRun
    event_data: str = ""


@attrs.frozen
class ScheduleFire:
    """Start a schedule's due runs and, with `advance`, move its next tick to
    `next_at` (None: no more ticks), atomically, if it is still at `version`."""

    schedule_id: str
    version: str
    now: float
    starts: tuple[TickStart, ...]
    advance: bool = False
    next_at: float | None = None
