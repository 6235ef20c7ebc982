"""The injected clock. Engine code asks its `Clock`, never the wall clock."""

from __future__ import annotations

import asyncio
import math
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

from sdk.errors import InvalidArgument

__all__ = ["MAX_SECONDS", "Clock", "SystemClock", "seconds", "sleep_until"]

#: Longest duration a sleep, timeout or retention may have (about 317 years).
MAX_SECONDS = 1e10


class Clock(Protocol):
    """Where the engine reads time (leases, timers, deadlines, `now()`).

    A clock may also have ``async def sleep_until(self, when: float) -> None``
    (return once `time()` reads `when`): in-process deadlines (a step's
    timeout) then wait on it. `testing.FakeClock` has one, so its `advance`
    fires them; without one they are measured with the event loop's timer.
    A worker waits for a short sleep in place (`sdk.engine._waits.holds`) only on a
    clock without one: on a clock that has one, every sleep parks the run.
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
            f"{type(value).__qualname__}: {value!r:.80}"
        )
    else:
        try:
            secs = float(value)
        except OverflowError:
            secs = math.inf
    if not math.isfinite(secs) or abs(secs) > MAX_SECONDS:
        raise InvalidArgument(
            f"{what} must be finite and at most {MAX_SECONDS:.0e} seconds, got {value!r:.80}"
        )
    return secs


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
