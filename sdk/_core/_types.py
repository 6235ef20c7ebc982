"""Records and enums that travel between the engine, the store and users."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import attrs

# Statuses, checkpoint kinds and event types are the store protocol's (stores
# write them too); the SDK exports them as its own.
from sdk.store._statuses import CheckpointKind, EventType, RunStatus

__all__ = [
    "AuditEntry",
    "Checkpoint",
    "CheckpointKind",
    "Decision",
    "ErrorInfo",
    "Event",
    "EventType",
    "Reason",
    "RunOptions",
    "RunRecord",
    "RunStatus",
    "Versions",
    "WaitKind",
    "WaitingOn",
    "WorkerInfo",
]

#: The most `RunRecord.waiting_on` entries kept for one run (a run that waits on
#: a thousand children keeps this many, every kind it waits on among them).
MAX_WAITING_ON = 20


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
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    """A replayed or forked run reused a step with other arguments than recorded."""
    CORRUPT_RECORD = "corrupt_record"
    """The run's stored data (record, journal, mailbox, lineage, log or index entry)
    cannot be read or worked with; a worker failed the run alone. The error names
    the Redis key and what is wrong with it."""
    TIMED_OUT = "timed_out"
    """The run had not finished when its ``@flow(timeout=...)`` ran out (counted
    from its start); a worker's tick failed it, wherever it was."""
    CONTINUED_AS_NEW = "continued_as_new"
    """Not a failure: the reason of a *completed* archived generation
    ``f"{run_id}~g{n}"`` of a run whose flow called `continue_as_new`."""

    def __str__(self) -> str:
        return self.value


def _names(names: Iterable[str]) -> tuple[str, ...]:
    """`Versions.capabilities` as a tuple (typed, so a checker accepts any iterable of str)."""
    return tuple(names)


@attrs.frozen
class Versions:
    """What a run was started against (recorded, not interpreted).

    Attributes:
        capabilities: capability names the run may use.
        bindings: name -> version or id of what the run is bound to (models, tools...).
        registry_ref: a reference into your own registry of deployments.
    """

    capabilities: tuple[str, ...] = attrs.field(default=(), converter=_names)
    bindings: dict[str, str] = attrs.field(factory=dict)
    registry_ref: str | None = None


@attrs.frozen
class RunOptions:
    """Caller-settable fields of a run, for `Client.start(..., options=RunOptions(...))`.

    Attributes:
        thread_id: groups runs of one conversation or case.
        trace_id: correlation id carried by every event (default: the run id). A
            W3C ``traceparent`` value (``00-<trace id>-<span id>-<flags>``) also makes
            the run's OpenTelemetry spans continue that trace (`sdk.otel`, which
            records the caller's context here when `Client.start` runs).
        environment: e.g. ``"production"``.
        versions: `Versions` the run is started against.
        policy_snapshot_id: the policy in force when the run started.
    """

    thread_id: str | None = None
    trace_id: str | None = None
    environment: str | None = None
    versions: Versions = attrs.field(factory=Versions)
    policy_snapshot_id: str | None = None


@attrs.frozen
class Checkpoint:
    """A point in a run it can be resumed, replayed or forked from.

    Attributes:
        checkpoint_id: unique within the run ("1", "2", ... in order).
        run_id: the run.
        kind: a `CheckpointKind`.
        step_key: the step it follows, for step checkpoints.
        status: the run's status at the checkpoint.
        created_at: from the injected clock.
    """

    checkpoint_id: str
    run_id: str
    kind: CheckpointKind
    step_key: str | None
    status: RunStatus
    created_at: datetime


@attrs.frozen
class Event:
    """One entry of a run's event log.

    Attributes:
        event_id: stable cursor (pass the last one as `cursor` for the next page).
        run_id: the run.
        type: an `EventType` (or a newer type's string).
        at: when, from the injected clock.
        step_key: the step it concerns, if any.
        data: JSON details (actor, reason, error...), or None.
        correlation: ``run_id``, ``trace_id``, ``tenant_id`` and ``step_key``; and
            ``schedule_id`` for a run a schedule started (`Client.events`).
    """

    event_id: str
    run_id: str
    type: str
    at: datetime
    step_key: str | None
    data: Any
    correlation: dict[str, str | None]


@attrs.frozen
class AuditEntry:
    """One entry of the deployment's audit log (`Client.audit_log`): an action kept
    apart from any run's log, so that it outlives the run (a deletion), or has no
    run to be logged in (a schedule operation, a refused start).

    Attributes:
        entry_id: stable cursor (pass the last one as `cursor` for the next page).
        type: an `EventType`: ``run.deleted``, ``schedule.created``,
            ``schedule.paused``..., or ``auth.denied`` (in the refusals log).
        at: when, from the injected clock of the process that acted.
        actor: who acted (or was refused), as the caller named them; None if no one was named.
        run_id: the run it concerns (the deleted one, the one a refused start named).
        schedule_id: the schedule it concerns.
        data: the JSON details (actor, action, reason, the deleted run's flow and status...).
    """

    entry_id: str
    type: str
    at: datetime
    actor: str | None
    run_id: str | None
    schedule_id: str | None
    data: Any


@attrs.frozen
class ErrorInfo:
    """What went wrong, as recorded.

    Attributes:
        type: ``module:qualname`` of the exception.
        message: ``str()`` of the exception.
        step_key: the step it came from, if it came from a step.
        reason: a `Reason` code.
        traceback: the formatted traceback where it was raised (for a step's
            failure, the step body's frames, recorded when it failed), cut to its
            last 8,000 characters; None when there is none (non-determinism, a
            damaged record, an error recorded before tracebacks were kept).
    """

    type: str
    message: str
    step_key: str | None = None
    reason: str | None = None
    traceback: str | None = None


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


class WaitKind(enum.StrEnum):
    """What a waiting run waits for (`WaitingOn.kind`); equal to its string value."""

    HUMAN = "human"
    """A person's decision: ``wait_for(name, human=True)`` (`Client.approve` /
    `Client.deny`), or the approval ``replay:{step key}`` of a replayed step
    whose replay policy is ``require_human``."""
    SIGNAL = "signal"
    """A signal: ``wait_for(name)`` (`Client.signal`)."""
    EVENT = "event"
    """An event: ``wait_for_event(name, match=...)`` (`Client.send_event`)."""
    CHILD = "child"
    """A child run's outcome: ``await handle.result()`` / `run_child`."""
    SLEEP = "sleep"
    """A time: `sleep`, `sleep_until`, or an asyncio timer of the flow
    (``asyncio.sleep``, ``asyncio.timeout``, ``asyncio.wait(timeout=)``)."""
    RETRY = "retry"
    """The next attempt of a failed step, at its retry policy's backoff."""
    CALLBACK = "callback"
    """A callback's completion (reserved for ``create_callback``)."""
    UPDATE = "update"
    """An update (reserved for ``on_update``)."""

    def __str__(self) -> str:
        return self.value


@attrs.frozen
class WaitingOn:
    """One thing a waiting run waits for (`RunRecord.waiting_on`), as its flow wrote it.

    Attributes:
        kind: a `WaitKind` (or, written by a newer version, another string).
        name: the approval or signal name, the event name, the child's run id,
            the step key of a retry (``"charge#1"``); None for a sleep.
        deadline: when the wait ends by itself: its timeout, the sleep's end,
            the retry's time; None without one.
        match: an event wait's filter (field -> value), None otherwise.
    """

    kind: str
    name: str | None = None
    deadline: datetime | None = None
    match: dict[str, Any] | None = None

    def describe(self) -> str:
        """What a person reads: ``human approval 'refund' until 2026-01-02T10:00:00Z``."""
        name = f" {self.name!r}" if self.name is not None else ""
        texts: dict[str, str] = {
            WaitKind.HUMAN: f"human approval{name}",
            WaitKind.SIGNAL: f"signal{name}",
            WaitKind.EVENT: f"event{name}",
            WaitKind.CHILD: f"child run{name}",
            WaitKind.SLEEP: "sleep",
            WaitKind.RETRY: f"retry of step{name}",
        }
        text = texts.get(self.kind, f"{self.kind}{name}")
        if self.match:
            text += " where " + ", ".join(f"{k}={v!r}" for k, v in self.match.items())
        if self.deadline is not None:
            at = self.deadline.isoformat(timespec="seconds").replace("+00:00", "Z")
            text += f" at {at}" if self.kind in (WaitKind.SLEEP, WaitKind.RETRY) else f" until {at}"
        return text


@attrs.frozen
class RunRecord:
    """A run as stored. Read it with `Client.get`.

    `result` is the flow's return value rebuilt into its annotated type when the
    flow is registered in this process, else its JSON form. `reason` is the
    `Reason` code of a failure, or the text given to `Client.cancel`.

    Format 2 adds `thread_id`, `trace_id` (default: the run id), `environment`,
    `versions`, `policy_snapshot_id`, `checkpoint_head`,
    `resume_from_checkpoint_id` and the lineage fields `source_run_id`,
    `source_checkpoint_id` and `root_run_id` (the first run of the lineage,
    whose id starts every idempotency key); a format-1 record reads with
    their defaults.

    A child flow (`start_child`) has `parent_run_id`, the run that started it,
    and `tree_root_run_id`, the run at the top of its tree (its parent's tree
    root, or its parent); both are None for a run started by a client.

    A run started by a schedule's tick (`scheduled`, `Client.create_schedule`)
    has `schedule_id`; its events carry it as a correlation id.

    `concurrency_key` and `start_at` are the start options of those names
    (`start_in` is recorded as the `start_at` it made): see `Queue`.

    `lease_owner` is the worker executing the run right now (its
    `WorkerInfo.worker_id`) and `lease_expires_at` when its lease runs out
    unless the worker's heartbeat renews it; both None while no activation
    holds the run (queued, parked, ended, or its lease expired).

    `waiting_on` says what a run in a waiting status waits for, as its flow
    wrote it (`WaitingOn`: a human approval, a signal, an event and its match,
    a child run, a sleep, a retry), one entry per wait, in the order the flow
    made them (racing waits, ``asyncio.gather`` of children: several). It is
    written in the same atomic write that parks the run and cleared when the
    run leaves the waiting status; empty otherwise (also for a run parked by a
    version before it was kept). At most `MAX_WAITING_ON` entries are kept
    (every kind among them): `Client.list_runs(waiting_on=...)` filters on it.

    `damage` is None when the whole stored record could be read. Otherwise it
    names the key and says what could not be read ("<key>: <what>; <what>"):
    those fields hold their defaults; a status that cannot be read is
    `failed`, and a failed run whose error cannot be read gets one saying what
    is damaged (type ``sdk.errors:CorruptRecord``, reason ``corrupt_record``).
    Workers fail a damaged run that has not ended when they come across it.
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
    thread_id: str | None = None
    trace_id: str | None = None
    environment: str | None = None
    versions: Versions = attrs.field(factory=Versions)
    policy_snapshot_id: str | None = None
    checkpoint_head: str | None = None
    resume_from_checkpoint_id: str | None = None
    source_run_id: str | None = None
    source_checkpoint_id: str | None = None
    root_run_id: str | None = None
    parent_run_id: str | None = None
    tree_root_run_id: str | None = None
    schedule_id: str | None = None
    format_version: int = 2  # the store's format of the record (StoredRun.format_version)
    damage: str | None = None
    concurrency_key: str | None = None  # Client.start(concurrency_key=)
    start_at: datetime | None = None  # a delayed start (start_at / start_in): when it is queued
    lease_owner: str | None = None  # the worker executing it now (`WorkerInfo.worker_id`)
    lease_expires_at: datetime | None = None  # its lease's end unless the worker renews it
    waiting_on: tuple[WaitingOn, ...] = ()  # what a waiting run waits for (see above)


@attrs.frozen
class WorkerInfo:
    """A live worker, as its last heartbeat described it (`Client.workers`).

    Attributes:
        worker_id: its lease owner name (``host:pid:random`` by default).
        host: the machine it runs on.
        pid: its process id.
        flows: the flows it serves: a name for an unversioned definition,
            ``name@version`` for a versioned one.
        queues: the queues it serves; None for every queue.
        concurrency: activations it runs at once.
        in_flight: activations it was running at its last heartbeat.
        started_at: when it started serving.
        last_beat: its last heartbeat; it counts as alive for one lease TTL after.
    """

    worker_id: str
    host: str
    pid: int
    flows: tuple[str, ...]
    queues: tuple[str, ...] | None
    concurrency: int
    in_flight: int
    started_at: datetime
    last_beat: datetime

    def serves(self, flow: str, queue: str, version: str | None = None) -> bool:
        """Whether it claims runs of `flow` started at `version` (None: unversioned)
        on `queue`."""
        in_queue = self.queues is None or queue in self.queues
        return in_queue and served_name(flow, version) in self.flows


def served_name(flow: str, version: str | None) -> str:
    """How `WorkerInfo.flows` names a served flow: its name for an unversioned
    definition, ``name@version`` for a versioned one."""
    return flow if version is None else f"{flow}@{version}"
