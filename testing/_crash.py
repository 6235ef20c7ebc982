"""Crash injection for `FlowTestEnv.crash_at`: an interceptor, not a branch in the engine."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from sdk._intercept import Abandon, Interceptor

__all__ = ["CrashPoints"]

When = Literal["before", "after"]


class CrashPoints(Interceptor):
    """Abandons the activation at chosen steps, each once, as a dying process would."""

    def __init__(self) -> None:
        self._points: dict[str, When] = {}
        #: called with the key and the moment as a crash fires (the crash check's probe)
        self.on_fire: Callable[[str, When], None] | None = None

    def add(self, step_key: str, when: When) -> None:
        if when not in ("before", "after"):
            raise ValueError(f"crash_at(when=...) is 'before' or 'after', got {when!r}")
        self._points[step_key] = when

    def _fire(self, key: str, when: When) -> None:
        if self._points.get(key) == when:
            del self._points[key]
            if self.on_fire is not None:
                self.on_fire(key, when)
            raise Abandon(f"simulated crash {when} step {key!r}")

    def step_started(self, run_id: str, key: str, attempt: int) -> None:
        self._fire(key, "before")

    def step_finished(self, run_id: str, key: str, attempt: int) -> None:
        self._fire(key, "after")

    def call_started(self, run_id: str, key: str, kind: str) -> None:
        self._fire(key, "before")

    def call_finished(self, run_id: str, key: str, kind: str) -> None:
        self._fire(key, "after")
