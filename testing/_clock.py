"""`FakeClock`: time that moves only when a test says so."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sdk._core._clock import seconds
from testing._extra import needs_extra

try:
    import freezegun
    import freezegun.api
except ImportError as e:  # an ImportError, as for any optional dependency (httpx does so)
    raise ImportError(needs_extra("testing.FakeClock", ["freezegun"])) from e

__all__ = ["FakeClock"]


class FakeClock:
    """A clock for tests, built on freezegun.

    The engine reads `time()` / `now()`. While the clock is started (``with
    clock:``, or inside `FlowTestEnv`), freezegun makes ``datetime.now()``,
    ``time.time()`` and friends in code under test return the same fake time.
    The event loop's own clock stays real (``real_asyncio=True``), so
    ``asyncio.sleep`` and timeouts still work. So do ``time.monotonic()`` and
    ``time.perf_counter()`` (and their ``_ns`` forms) unless `fake_monotonic`
    is true: code under test that measures how long something took reads real
    time, while ``datetime.now()`` and ``time.time()`` read the fake clock.

    In-process deadlines of the engine (a step's ``@step(timeout=...)``) wait
    on `sleep_until`: they fire when `advance` moves the clock past them, never
    on their own.

    Args:
        start: an aware datetime, or epoch seconds; default now, to the second.
        fake_monotonic: also fake ``time.monotonic`` and ``time.perf_counter``
            for code under test (freezegun's default; they then stand still
            until `advance`). Default False: they read real time.

    Example::

        clock = FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
        clock.advance(timedelta(days=30))
    """

    def __init__(
        self, start: datetime | float | None = None, *, fake_monotonic: bool = False
    ) -> None:
        if start is None:
            start = datetime.now(UTC).replace(microsecond=0)
        elif isinstance(start, (int, float)):
            start = datetime.fromtimestamp(start, UTC)
        elif start.tzinfo is None:
            raise ValueError("FakeClock(start=...) needs a timezone-aware datetime")
        self._now: datetime = start.astimezone(UTC)
        self.fake_monotonic = fake_monotonic
        self._freezer: Any = None
        self._factory: Any = None
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def time(self) -> float:
        """Fake seconds since the epoch."""
        return self._now.timestamp()

    def now(self) -> datetime:
        """Fake current time (UTC)."""
        return self._now

    def advance(self, delta: float | timedelta) -> None:
        """Move time forward by seconds or a timedelta (never backward)."""
        secs = seconds(delta, "advance")
        if secs < 0:
            raise ValueError(f"a FakeClock only moves forward; got {delta!r}")
        self._now += timedelta(seconds=secs)
        if self._factory is not None:
            self._factory.move_to(self._now)
        now = self.time()
        due = [fut for when, fut in self._sleepers if when <= now]
        self._sleepers = [(when, fut) for when, fut in self._sleepers if when > now]
        for fut in due:
            _wake(fut)

    async def sleep_until(self, when: float) -> None:
        """Return once `advance` has moved this clock to `when` (epoch seconds)."""
        if when <= self.time():
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (when, fut)
        self._sleepers.append(entry)
        try:
            await fut
        finally:
            if entry in self._sleepers:  # cancelled before it was due
                self._sleepers.remove(entry)

    @property
    def started(self) -> bool:
        return self._freezer is not None

    def start(self) -> FakeClock:
        """Make the wall clock of code under test read this clock."""
        if self._freezer is None:
            # pytest's own timing (durations, junit times) keeps the real clock;
            # cronsim (schedules) keeps real datetimes: a fake one drops `fold` in
            # astimezone, and cronsim loops forever in a repeated (fall-back) hour.
            self._freezer = freezegun.freeze_time(
                self._now, real_asyncio=True, ignore=["_pytest.timing", "cronsim"]
            )
            self._factory = self._freezer.start()
            if not self.fake_monotonic:
                _real_monotonic(self._freezer)
        return self

    def stop(self) -> None:
        if self._freezer is not None:
            self._freezer.stop()
            self._freezer = self._factory = None

    def __enter__(self) -> FakeClock:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# freezegun (1.4 to 1.5) has no option to leave the monotonic clocks alone: it
# swaps them in `time` and in every module that imported them by name, and
# notes each module swap in `undo_changes`. Swapping the real ones back is
# safe: its `stop` restores the real functions anyway.
_MONOTONIC = ("monotonic", "perf_counter", "monotonic_ns", "perf_counter_ns")


def _real_monotonic(freezer: Any) -> None:
    """Give `time` and the modules freezegun patched their real monotonic clocks back."""
    reals = {name: getattr(freezegun.api, f"real_{name}", None) for name in _MONOTONIC}
    fakes = {id(getattr(freezegun.api, f"fake_{name}", None)): name for name in _MONOTONIC}
    for name, real in reals.items():
        if real is not None:
            setattr(time, name, real)
    for module, attr, _original in getattr(freezer, "undo_changes", ()):
        fake = fakes.get(id(getattr(module, attr, None)))
        if fake is not None and reals[fake] is not None:
            setattr(module, attr, reals[fake])


def _wake(fut: asyncio.Future[None]) -> None:
    """Resolve a sleeper's future, from its loop's thread or another one."""
    if fut.done():
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    loop = fut.get_loop()
    if running is loop:
        fut.set_result(None)
    elif not loop.is_closed():
        loop.call_soon_threadsafe(lambda: None if fut.done() else fut.set_result(None))
