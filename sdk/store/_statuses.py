"""Run statuses and the one table of moves between them; event and checkpoint kinds.

Part of the store protocol (`sdk.store` exports them): a store writes
statuses, events and checkpoints, and the engine reads them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

__all__ = ["RESUMABLE", "TRANSITIONS", "CheckpointKind", "EventType", "RunStatus"]


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

S = RunStatus

#: Allowed moves the engine makes on its own (stores enforce the same table).
TRANSITIONS: Mapping[RunStatus, frozenset[RunStatus]] = {
    S.PENDING: frozenset({S.RUNNING, S.CANCELED}),
    S.RUNNING: frozenset(
        {S.WAITING_FOR_HUMAN, S.WAITING_FOR_SIGNAL, S.REPLAYING, S.COMPLETED, S.FAILED, S.CANCELED}
    ),
    S.WAITING_FOR_HUMAN: frozenset({S.RUNNING, S.CANCELED, S.FAILED}),
    S.WAITING_FOR_SIGNAL: frozenset({S.RUNNING, S.CANCELED, S.FAILED}),
    S.REPLAYING: frozenset({S.RUNNING, S.FAILED, S.CANCELED}),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELED: frozenset(),
}

#: The one way out of a terminal status: an explicit resume (→ running).
RESUMABLE: frozenset[RunStatus] = frozenset({S.FAILED, S.CANCELED})


class CheckpointKind(enum.StrEnum):
    """Where a checkpoint was taken; equal to its string value."""

    RUN_STARTED = "run_started"
    STEP_COMPLETED = "step_completed"
    WAITING_FOR_HUMAN = "waiting_for_human"
    WAITING_FOR_SIGNAL = "waiting_for_signal"
    RUN_FINISHED = "run_finished"
    STEP_STARTED = "step_started"
    """Optional: `@flow(optional_checkpoints=True)` (a round trip per step)."""
    RETRY_SCHEDULED = "retry_scheduled"
    """Optional: `@flow(optional_checkpoints=True)`."""

    def __str__(self) -> str:
        return self.value


class EventType(enum.StrEnum):
    """Event types of the run event log; equal to their string values."""

    RUN_CREATED = "run.created"
    RUN_STARTED = "run.started"
    STEP_STARTED = "step.started"
    STEP_COMPLETED = "step.completed"
    STEP_FAILED = "step.failed"
    STEP_RETRY_SCHEDULED = "step.retry_scheduled"
    RUN_WAITING_FOR_SIGNAL = "run.waiting_for_signal"
    RUN_WAITING_FOR_HUMAN = "run.waiting_for_human"
    SIGNAL_RECEIVED = "signal.received"
    WAIT_COMPLETED = "wait.completed"
    WAIT_TIMED_OUT = "wait.timed_out"
    EVENT_DELIVERED = "event.delivered"
    """`Client.send_event` delivered an event to a ``wait_for_event`` of the run
    (data: name, event_id, actor)."""
    RUN_LEASE_EXPIRED = "run.lease_expired"
    RUN_REPAIRED = "run.repaired"
    """The workers' repair pass found the run on no index that would run or wake it
    (pending off its queue, running or replaying with neither a lease nor a queue
    entry, waiting with neither a timer nor a wait) and queued it again (data:
    ``{"found": <what was missing>}``)."""
    RUN_RESUMED = "run.resumed"
    RUN_COMPLETED = "run.completed"
    RUN_FAILED = "run.failed"
    RUN_CANCEL_REQUESTED = "run.cancel_requested"
    """`Client.cancel` with a grace period asked the run to stop (data: reason, actor,
    grace_until): the flow gets ``asyncio.CancelledError`` at its next activation and
    may clean up until then; ``run.canceled`` follows."""
    RUN_CANCELED = "run.canceled"
    RUN_DELETED = "run.deleted"
    """On the live feed (`Client.follow`) and in the deployment's audit log
    (`Client.audit_log`): the run's own log is deleted with it."""
    RUN_REPLAYED = "run.replayed"
    """The first event of a run made by `Client.replay` (data: source, checkpoint, actor)."""
    RUN_FORKED = "run.forked"
    """The first event of a run made by `Client.fork` (data: source, checkpoint, actor, options)."""
    SIDE_EFFECT_REUSED = "side_effect.reused"
    """A replayed or forked run took a step's recorded result instead of running it."""
    SIDE_EFFECT_RECORDED = "side_effect.recorded"
    """An outbound intent was recorded with its step (see the outbox)."""
    AUTH_DENIED = "auth.denied"
    """The authorizer (or a wait's approvers) refused an action; nothing else changed."""
    OUTBOX_SENT = "outbox.sent"
    """A delivery of an outbound intent succeeded (its handler returned)."""
    OUTBOX_FAILED = "outbox.failed"
    """A delivery failed; another is scheduled (data: error, due)."""
    OUTBOX_DEAD = "outbox.dead"
    """A delivery failed for good; the intent is not delivered again (data: error, reason)."""
    OUTBOX_CANCELED = "outbox.canceled"
    """Canceling the run canceled a pending intent."""
    OUTBOX_RESTORED = "outbox.restored"
    """Resuming a canceled run made a canceled intent pending again."""
    CHILD_STARTED = "child.started"
    """The flow started a child flow (data: child_run_id, flow, created: False when a
    replay found the child already started). The child's ``run.created`` names the parent."""
    CHILD_CANCELED = "child.canceled"
    """Canceling the run canceled one of its unfinished child flows (data: child_run_id,
    reason); the child's ``run.canceled`` names the parent."""
    RUN_CONTINUED_AS_NEW = "run.continued_as_new"
    """The flow called ``continue_as_new``: a generation ended and the next began
    (data: generation, archived_as, continued_as). In the run's log and, as its last
    event, in the archived generation's (see `Store.continue_as_new`)."""

    SCHEDULE_CREATED = "schedule.created"
    """In the audit log: `Client.create_schedule` created a schedule (data: actor, flow,
    cron, tz)."""
    SCHEDULE_REPLACED = "schedule.replaced"
    """In the audit log: a schedule's definition was replaced (data: actor, ...)."""
    SCHEDULE_PAUSED = "schedule.paused"
    """In the audit log: `Client.pause_schedule` (data: actor)."""
    SCHEDULE_RESUMED = "schedule.resumed"
    """In the audit log: `Client.resume_schedule` (data: actor)."""
    SCHEDULE_DELETED = "schedule.deleted"
    """In the audit log: `Client.delete_schedule` (data: actor)."""
    SCHEDULE_TRIGGERED = "schedule.triggered"
    """In the audit log: `Client.trigger_schedule` (data: actor, run_id)."""

    def __str__(self) -> str:
        return self.value
