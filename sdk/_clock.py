"""The injected clock. Engine code asks its `Clock`, never the wall clock."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

from sdk.errors import InvalidArgument

__all__ = ["MAX_SECONDS", "Clock", "SystemClock", "seconds"]

#: Longest duration a sleep, timeout or retention may have (about 317 years).
MAX_SECONDS = 1e10


class Clock(Protocol):
    """Where the engine reads time (leases, timers, deadlines, `now()`)."""

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
