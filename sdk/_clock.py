"""The injected clock. Engine code asks its `Clock`, never the wall clock."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["Clock", "SystemClock", "seconds"]


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
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be seconds (int or float) or a timedelta, got {value!r}")
    return float(value)
