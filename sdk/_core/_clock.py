"""The injected clock. Engine code asks its `Clock`, never the wall clock."""

from __future__ import annotations

import asyncio
import math
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

from sdk._core._limits import short
from sdk.errors import InvalidArgument

__all__ = [
    "EARLIEST",
    "LATEST",
    "MAX_SECONDS",
    "MAX_TIME",
    "MIN_TIME",
    "Clock",
    "SystemClock",
    "in_range",
    "instant",
    "moves_by_itself",
    "seconds",
    "sleep_until",
    "wait_until",
]

#: Longest duration a sleep, timeout or retention may have (about 317 years).
MAX_SECONDS = 1e10

#: The first and last time Steadyflow takes and stores (a delayed start, a
#: `sleep_until`, a listing's ``since``): a day inside `datetime`'s years 1..9999
#: at each end, so that every stored time is a `datetime` in UTC and in every UTC
#: offset (at most a day), however a reader shows it.
EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
LATEST = datetime(9999, 12, 31, tzinfo=UTC)
#: `EARLIEST` and `LATEST` in epoch seconds.
MIN_TIME = EARLIEST.timestamp()
MAX_TIME = LATEST.timestamp()


class Clock(Protocol):
    """Where the engine reads time (leases, timers, deadlines, `now()`).

    A clock may also have ``async def sleep_until(self, when: float) -> None``
    (return once `time()` reads `when`): every in-process wait of the engine
    (a step's timeout, a short sleep or retry backoff a worker waits for in
    place) then waits on it. `testing.FakeClock` has one, so its `advance`
    fires them; without one they are measured with the event loop's timer.
    Either way the engine takes the same path (`sleep_until`, `wait_until`):
    only how time passes differs. Such a clock's time moves when its owner
    moves it, not by itself (`moves_by_itself`): a worker's `run_until_idle`
    counts a run that waits in place on it as idle.
    """

    def time(self) -> float:
        """Seconds since the epoch."""
        ...

    def now(self) -> datetime:
        """The current time, timezone-aware (UTC)."""
        ...


class SystemClock:
    """The real clock."""

    def time(self) -> float:
        return time.time()

    def now(self) -> datetime:
        return datetime.now(UTC)


def seconds(value: float | timedelta, what: str) -> float:
    """A duration in seconds; `what` names the argument in the error."""
    if isinstance(value, timedelta):
        secs = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(
            f"{what} must be seconds (int or float) or a timedelta, got a "
            f"{type(value).__qualname__}: {short(value, 80)}"
        )
    else:
        try:
            secs = float(value)
        except OverflowError:
            secs = math.inf
    if not math.isfinite(secs) or abs(secs) > MAX_SECONDS:
        raise InvalidArgument(
            f"{what} must be finite and at most {MAX_SECONDS:.0e} seconds, got {short(value, 80)}"
        )
    return secs


def in_range(at: float) -> bool:
    """Whether epoch seconds `at` are a time Steadyflow stores (`MIN_TIME`..`MAX_TIME`)."""
    return MIN_TIME <= at <= MAX_TIME


def instant(value: datetime, what: str) -> float:
    """The epoch seconds of a timezone-aware datetime from `EARLIEST` to `LATEST`;
    `what` names the argument in the error (`InvalidArgument`).

    ``datetime(9999, 12, 31, 23, 59, tzinfo=timezone(timedelta(hours=-14)))`` is a
    datetime, but in UTC it is in year 10000, which no `datetime` holds: such a
    time is refused here, before it is stored, rather than breaking every reader.
    """
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise InvalidArgument(f"{what} must be a timezone-aware datetime, got {short(value, 80)}")
    try:
        at = value.timestamp()
    except (OverflowError, OSError, ValueError):
        at = math.nan
    if not in_range(at):
        raise InvalidArgument(
            f"{what} must be from {EARLIEST.isoformat()} to {LATEST.isoformat()} (a time "
            f"every UTC offset can show), got {short(value.isoformat(), 80)}"
        )
    return at


def moves_by_itself(clock: Clock) -> bool:
    """Whether `clock`'s time passes on its own (the real clock), rather than when
    its owner moves it (a clock with its own ``sleep_until``: a test's `FakeClock`)."""
    return getattr(clock, "sleep_until", None) is None


async def sleep_until(clock: Clock, when: float) -> None:
    """Return once `clock` reads `when` (epoch seconds): an in-process deadline.

    Uses the clock's own ``sleep_until`` when it has one (a fake clock decides
    when its time has come); else sleeps on the event loop's timer for what is
    left by the clock now.
    """
    own = getattr(clock, "sleep_until", None)
    if own is not None:
        await own(when)
        return
    await asyncio.sleep(max(when - clock.time(), 0.0))


async def wait_until(clock: Clock, fut: asyncio.Future[None], when: float) -> None:
    """Wait for `fut` to be done, or for `clock` to read `when`, whichever comes first.

    On a clock with its own ``sleep_until`` the deadline is the clock's to
    decide (a fake clock's `advance`); else the event loop's timer measures
    what is left by the clock now.
    """
    own = getattr(clock, "sleep_until", None)
    if own is None:
        await asyncio.wait({fut}, timeout=max(when - clock.time(), 0.0))
        return
    timer = asyncio.ensure_future(own(when))
    try:
        await asyncio.wait({fut, timer}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        timer.cancel()
