"""Crash injection for `FlowTestEnv.crash_at`: an interceptor, not a branch in the engine."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from sdk.model._intercept import Abandon, Interceptor

__all__ = ["CrashPoints"]

When = Literal["before", "after"]


class CrashPoints(Interceptor):
    """Abandons the activation at chosen steps, each once, as a dying process would.

    A step's points are before and after each attempt's body, whether the body
    returned or raised (after: its outcome, result or failure, is not
    recorded). A point names an attempt, or None for the first one reached.
    """

    def __init__(self) -> None:
        self._points: dict[str, tuple[When, int | None]] = {}
        #: called with the key and the moment as a crash fires (the crash check's probe)
        self.on_fire: Callable[[str, When], None] | None = None
        #: which runs may crash (run id -> whether it may); None: every run
        self.runs: Callable[[str], bool] | None = None
        #: called as a crash fires: drops what the dying process held (the env's
        #: worker's kept activations; a dead process keeps nothing)
        self.forget: Callable[[], None] | None = None

    def add(self, step_key: str, when: When, attempt: int | None = None) -> None:
        if when not in ("before", "after"):
            raise ValueError(f"crash_at(when=...) is 'before' or 'after', got {when!r}")
        if attempt is not None and (
            isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1
        ):
            raise ValueError(f"crash_at(attempt=...) is None or an int >= 1, got {attempt!r}")
        self._points[step_key] = (when, attempt)

    def unfired(self) -> list[str]:
        """The points added that have not fired, described (``"after 'charge#1'"``)."""
        return [_describe(key, when, attempt) for key, (when, attempt) in self._points.items()]

    def _fire(self, run_id: str, key: str, when: When, attempt: int) -> None:
        point = self._points.get(key)
        if point is None or point[0] != when or point[1] not in (None, attempt):
            return
        if self.runs is not None and not self.runs(run_id):
            return
        del self._points[key]
        if self.on_fire is not None:
            self.on_fire(key, when)
        if self.forget is not None:
            self.forget()
        raise Abandon(f"simulated crash {_describe(key, when, point[1])}")

    def step_started(self, run_id: str, key: str, attempt: int) -> None:
        self._fire(run_id, key, "before", attempt)

    def step_ended(self, run_id: str, key: str, attempt: int, error: BaseException | None) -> None:
        self._fire(run_id, key, "after", attempt)

    def call_started(self, run_id: str, key: str, kind: str) -> None:
        self._fire(run_id, key, "before", 1)

    def call_finished(self, run_id: str, key: str, kind: str) -> None:
        self._fire(run_id, key, "after", 1)


def _describe(key: str, when: When, attempt: int | None) -> str:
    return f"{when} step {key!r}" + (f" (attempt {attempt})" if attempt is not None else "")
