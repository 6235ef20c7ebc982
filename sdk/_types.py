"""Records and enums that travel between the engine, the store and users."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

import attrs

__all__ = ["Decision", "ErrorInfo", "Reason", "RunRecord", "RunStatus"]


class RunStatus(enum.StrEnum):
    """A run's lifecycle status; equal to its string value."""

    PENDING = "pending"
    RUNNING = "running"
    WAITING_FOR_HUMAN = "waiting_for_human"
    WAITING_FOR_SIGNAL = "waiting_for_signal"
    REPLAYING = "replaying"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"

    def __str__(self) -> str:
        return self.value

    @property
    def is_terminal(self) -> bool:
        """True for `completed`, `failed` and `canceled`."""
        return self in _TERMINAL

    @property
    def is_waiting(self) -> bool:
        """True for the two waiting statuses."""
        return self in (RunStatus.WAITING_FOR_HUMAN, RunStatus.WAITING_FOR_SIGNAL)


_TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED})


class Reason(enum.StrEnum):
    """Why a step or a run failed; equal to its string value.

    (A canceled run's `RunRecord.reason` is the text given to `Client.cancel`.)
    """

    STEP_FAILED = "step_failed"
    """A step with no retry policy raised; it ran once."""
    RETRIES_EXHAUSTED = "retries_exhausted"
    """A step failed `max_attempts` times."""
    NON_RETRYABLE = "non_retryable"
    """A step raised one of its policy's `non_retryable` types."""
    FAILURE_BUDGET_EXHAUSTED = "failure_budget_exhausted"
    """The run used up its policy's `max_failures` budget."""
    FLOW_ERROR = "flow_error"
    """Flow code itself raised (not a recorded step failure)."""
    NON_DETERMINISM = "non_determinism"
    """Replayed code diverged from the journal."""
    MAX_RECOVERIES_EXCEEDED = "max_recoveries_exceeded"
    """The run's lease expired too many times without progress."""
    SERIALIZATION_ERROR = "serialization_error"
    """A result or argument could not be stored or rebuilt."""

    def __str__(self) -> str:
        return self.value


@attrs.frozen
class ErrorInfo:
    """What went wrong, as recorded.

    Attributes:
        type: ``module:qualname`` of the exception.
        message: ``str()`` of the exception.
        step_key: the step it came from, if it came from a step.
        reason: a `Reason` code.
    """

    type: str
    message: str
    step_key: str | None = None
    reason: str | None = None


@attrs.frozen
class Decision:
    """The result of a human wait (`wait_for(name, human=True)`).

    Attributes:
        approved: True if approved, False if denied.
        actor: who decided.
        reason: free text given with the decision.
        payload: any JSON value given with the decision.
    """

    approved: bool
    actor: str | None = None
    reason: str | None = None
    payload: Any = None


@attrs.frozen
class RunRecord:
    """A run as stored. Read it with `Client.get`.

    `result` is the flow's return value rebuilt into its annotated type when the
    flow is registered in this process, else its JSON form. `reason` is the
    `Reason` code of a failure, or the text given to `Client.cancel`.
    """

    run_id: str
    flow: str
    status: RunStatus
    created_at: datetime
    queue: str = "default"
    priority: int = 0
    flow_version: str | None = None
    tenant_id: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    current_step_id: str | None = None
    result: Any = None
    error: ErrorInfo | None = None
    reason: str | None = None
    recoveries: int = 0
    format_version: int = 1
