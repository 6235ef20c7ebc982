"""What an activation tells the worker's interceptors (`sdk.model._intercept`): steps
started, finished and failed, calls started and finished, timers fired. An
interceptor may crash the activation here (`Abandon`, the crash tests' tool):
it stops at once, as a dead process would, then the exception propagates."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from sdk._core._journal import State
from sdk.engine._ops import Op, SleepOp, StepOp, WaitOp
from sdk.model._intercept import Abandon

if TYPE_CHECKING:
    from sdk._core._clock import Clock
    from sdk._core._types import WaitingOn
    from sdk.model._intercept import Interceptor

__all__ = ["Hooks"]


class Hooks:
    """What one activation tells the worker's interceptors.

    Args:
        interceptors: the worker's (the list itself: one added later is called too).
        run_id: the run the activation executes.
        clock: the worker's clock (when a timer fired).
        abandon: stops the activation at once, as a dead process would; called
            before an interceptor's `Abandon` propagates.
    """

    __slots__ = ("abandon", "clock", "interceptors", "run_id")

    def __init__(
        self,
        interceptors: Sequence[Interceptor],
        run_id: str,
        clock: Clock,
        abandon: Callable[[], None],
    ) -> None:
        self.interceptors = interceptors
        self.run_id = run_id
        self.clock = clock
        self.abandon = abandon

    def step_started(self, op: StepOp, attempt: int) -> None:
        self._hooks("step_started", op, attempt)

    def step_finished(self, op: StepOp, attempt: int) -> None:
        self._hooks("step_finished", op, attempt)

    def step_ended(self, op: StepOp, attempt: int, error: BaseException | None) -> None:
        """An attempt's body returned or raised, its outcome not recorded yet
        (interceptors may crash here)."""
        try:
            for hook in self.interceptors:
                hook.step_ended(self.run_id, op.key, attempt, error)
        except Abandon:
            self.abandon()
            raise

    def call(self, op: Op, finished: bool = False) -> None:
        """`call_hooks` for a call of the flow."""
        self.call_hooks(op.key, op.kind.value, finished)

    def call_hooks(self, key: str, kind: str, finished: bool) -> None:
        """The interceptors' `call_started` / `call_finished` (they may crash here:
        `Abandon` stops the activation at once, then propagates)."""
        try:
            for hook in self.interceptors:
                if finished:
                    hook.call_finished(self.run_id, key, kind)
                else:
                    hook.call_started(self.run_id, key, kind)
        except Abandon:
            self.abandon()
            raise

    def call_finished(self, op: Op) -> None:
        """A wait or sleep's outcome is recorded, a child run is created (interceptors
        may crash here)."""
        if self.interceptors:
            if isinstance(op, SleepOp):
                self.timer_fired(op.key, "sleep", op.due)
            elif isinstance(op, WaitOp) and op.record and op.record.state is State.TIMEOUT:
                self.timer_fired(op.key, "wait", op.deadline)
            self.call(op, finished=True)

    def parked(self, waiting_on: Sequence[WaitingOn]) -> None:
        """The run is parked, waiting on `waiting_on` (interceptors observe it)."""
        for hook in self.interceptors:
            hook.run_parked(self.run_id, waiting_on)

    def step_failed(self, op: StepOp, attempt: int, error: BaseException, retrying: bool) -> None:
        """A failed attempt is recorded (interceptors observe it)."""
        for hook in self.interceptors:
            hook.step_failed(self.run_id, op.key, attempt, error, retrying)

    def timer_fired(self, key: str, kind: str, due: float | None) -> None:
        """A sleep, a wait's deadline or a retry backoff due at `due` completes now."""
        if due is not None and self.interceptors:
            now = self.clock.time()
            for hook in self.interceptors:
                hook.timer_fired(self.run_id, key, kind, due, now)

    def _hooks(self, name: str, op: StepOp, attempt: int) -> None:
        try:
            for hook in self.interceptors:
                getattr(hook, name)(self.run_id, op.key, attempt)
        except Abandon:
            self.abandon()  # at once: no sibling goes on (as if the process died here)
            raise
