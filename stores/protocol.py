"""The store protocol: the one seam between the engine and its storage.

Both sides import this module and nothing of each other: `sdk` (the engine,
the client) calls a `Store`; `stores.redis.RedisStore` implements it, and so
can a store of yours (check it with `testing.conformance`). It holds:

- the statuses of a run and the one table of moves between them
  (`RunStatus`, `TRANSITIONS`), and the kinds of events and checkpoints a
  store writes (`EventType`, `CheckpointKind`);
- the records that cross the seam, typed: what a store is asked to write
  (`NewRun`, `StepEvent`, `NewIntent`, `Mailbox`) and what it returns
  (`StoredRun`, `Claim`, `StoredEvent`, `StoredCheckpoint`, ...);
- `Refused`: why a store changed nothing. Stores report refusals; the engine
  turns them into the errors users see (`sdk.errors`).

What is JSON stays JSON text the engine wrote and reads back (arguments,
results, errors, journal records, event data); a store keeps it opaque. How a
store lays records out (keys, scripts, encodings) is its own business.

Every method is one round trip unless its docstring says otherwise. Writes an
activation makes take its fencing token and are refused (`Refusal.FENCED`, or
False) when the token is no longer current (lease expired and taken over,
run canceled).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs

__all__ = [
    "RESUMABLE",
    "TRANSITIONS",
    "CheckpointKind",
    "Claim",
    "Consumed",
    "Delivery",
    "EventType",
    "IntentClaim",
    "Lineage",
    "Mailbox",
    "NewIntent",
    "NewRun",
    "Parked",
    "Refusal",
    "Refused",
    "RunStatus",
    "StartOutcome",
    "StepEvent",
    "Store",
    "StoredCheckpoint",
    "StoredEvent",
    "StoredIntent",
    "StoredRun",
    "TickResult",
]


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
    RUN_LEASE_EXPIRED = "run.lease_expired"
    RUN_RESUMED = "run.resumed"
    RUN_COMPLETED = "run.completed"
    RUN_FAILED = "run.failed"
    RUN_CANCELED = "run.canceled"
    RUN_DELETED = "run.deleted"
    """On the live feed only (`Client.follow`): the run's own log is deleted with it."""
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

    def __str__(self) -> str:
        return self.value


# -- what a store is asked to write ------------------------------------------------


@attrs.frozen
class Mailbox:
    """Where signals for one ``wait_for`` name wait: plain signals, or human decisions."""

    name: str
    human: bool = False


@attrs.frozen
class NewRun:
    """What starting a run (or deriving one by replay or fork) writes.

    JSON texts are the engine's, kept as they are: `args`, `retry`, `versions`.
    """

    run_id: str
    flow: str
    flow_version: str | None
    args: str
    args_hash: str
    queue: str
    priority: int
    tenant_id: str | None
    created_at: float
    thread_id: str | None = None
    trace_id: str | None = None  # default: the run id
    environment: str | None = None
    versions: str | None = None  # JSON
    policy_snapshot_id: str | None = None
    source_run_id: str | None = None
    source_checkpoint_id: str | None = None
    root_run_id: str | None = None
    retry: str | None = None  # JSON of a retry policy that replaces the flow's default
    retention: float | None = None  # seconds a completed or canceled run is kept


@attrs.frozen
class StepEvent:
    """What a journal write announces, in the same write: an event (type and JSON
    data) and, when `checkpoint` is set, a checkpoint of that kind."""

    type: EventType
    data: str = ""
    checkpoint: CheckpointKind | None = None


@attrs.frozen
class NewIntent:
    """An outbound intent a step attempt emitted, written with the step's record."""

    channel: str
    idempotency_key: str
    body: str  # JSON: run_id, step_key, channel, payload, idempotency_key, created_at


class Delivery(enum.StrEnum):
    """How a delivery of an outbound intent ended (`Store.settle_intent`)."""

    SENT = "sent"
    RETRY = "retry"  # failed; due again at a given time
    DEAD = "dead"  # failed for good
    RELEASE = "release"  # handed back undone (worker shutdown): due now


# -- what a store returns -----------------------------------------------------------


@attrs.frozen
class StoredRun:
    """A run as stored. JSON texts are the engine's, as it wrote them."""

    run_id: str
    flow: str
    status: RunStatus
    created_at: float
    queue: str
    priority: int
    args: str
    fence: int
    flow_version: str | None = None
    tenant_id: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    current_step: str | None = None
    result: str | None = None  # JSON
    result_type: str | None = None
    error: str | None = None  # JSON
    reason: str | None = None
    recoveries: int = 0
    thread_id: str | None = None
    trace_id: str | None = None
    environment: str | None = None
    versions: str | None = None  # JSON
    policy_snapshot_id: str | None = None
    checkpoint_head: int = 0  # 0: none yet
    resume_from_checkpoint: int = 0
    source_run_id: str | None = None
    source_checkpoint_id: str | None = None
    root_run_id: str | None = None
    retry: str | None = None  # JSON
    format_version: int = 1


@attrs.frozen
class Claim:
    """A run a worker now holds a lease on, with its whole journal (step key ->
    record JSON), the mailboxes that held signals when it was claimed, and the
    reusable records of its lineage (a replay's or fork's source runs)."""

    run: StoredRun
    journal: dict[str, str]
    mail: frozenset[Mailbox] = frozenset()
    lineage: dict[str, str] = attrs.field(factory=dict)


@attrs.frozen
class StoredCheckpoint:
    """A checkpoint: `seq` counts the journal writes it covers."""

    checkpoint_id: int
    kind: CheckpointKind
    step_key: str | None
    status: RunStatus
    at: float
    seq: int


@attrs.frozen
class Lineage:
    """What a replay or fork reads of its source, in one round trip: the run, its
    journal, each record's write number (the checkpoints' `seq` order), its
    lineage records, and its checkpoints (oldest first)."""

    run: StoredRun
    journal: dict[str, str]
    written: dict[str, int]
    lineage: dict[str, str]
    checkpoints: list[StoredCheckpoint]


@attrs.frozen
class StoredEvent:
    """One event of a run's log, with its stable cursor."""

    event_id: str
    run_id: str
    type: str  # an EventType value, or a newer one
    at: float
    step_key: str | None = None
    data: str | None = None  # JSON


@attrs.frozen
class StartOutcome:
    """`created` is False when the run id existed: `conflict` when with other arguments."""

    created: bool
    status: RunStatus
    conflict: bool = False


@attrs.frozen
class TickResult:
    """Timers fired and runs recovered by one `tick`, and when the next is due."""

    fired: int
    recovered: int
    next_due: float | None


class Consumed(enum.Enum):
    """What `Store.consume` did."""

    SIGNAL = "signal"  # took a signal (its payload comes with it)
    TIMEOUT = "timeout"  # the deadline had passed: recorded the timeout
    EMPTY = "empty"  # nothing to take, deadline not reached
    FENCED = "fenced"  # the activation's lease is lost: nothing written


class Parked(enum.Enum):
    """What `Store.suspend` did."""

    PARKED = "parked"
    READY = "ready"  # a signal or the deadline is already there: queued again
    FENCED = "fenced"


class Refusal(enum.Enum):
    """Why a store changed nothing."""

    NOT_FOUND = "not_found"
    TRANSITION = "transition"  # `status` cannot move to `requested`
    NOT_FINISHED = "not_finished"  # deleting a run that has not finished
    NOT_WAITING = "not_waiting"  # a decision for a run not waiting for it
    FORBIDDEN = "forbidden"  # `actor` is not among the wait's approvers (audited)
    FENCED = "fenced"  # the activation's lease is lost
    EXISTS = "exists"  # the new run's id is taken


@attrs.frozen
class Refused:
    """A store's refusal: nothing was written (but an audit event, for FORBIDDEN)."""

    why: Refusal
    status: RunStatus | None = None
    requested: RunStatus | None = None
    actor: str | None = None


@attrs.frozen
class IntentClaim:
    """An outbox intent leased to a dispatcher for one delivery.

    `delivery` is its delivery number (the fencing token of `settle_intent`);
    `failures` the failed deliveries before this one; `body` the intent's JSON.
    """

    intent_id: str
    run_id: str
    body: str
    delivery: int
    failures: int


@attrs.frozen
class StoredIntent:
    """An outbox intent as stored (`Store.intents`)."""

    intent_id: str
    step_key: str
    channel: str
    body: str  # JSON
    status: str  # pending, sent, dead, canceled
    deliveries: int
    failures: int
    error: str | None = None  # JSON
    updated_at: float | None = None
    due: float | None = None


class Store(Protocol):
    """Run records, journals, mailboxes, timers, queues and leases."""

    # -- runs ------------------------------------------------------------------

    async def create_run(self, new: NewRun, event_data: str = "") -> StartOutcome:
        """Create a pending run and queue it, or report the existing one."""
        ...

    async def get_run(self, run_id: str) -> StoredRun | None: ...

    async def get_tombstone(self, run_id: str) -> StoredRun | None:
        """What is left of a run deleted on success (its record without arguments)
        until its grace period ends; None otherwise."""
        ...

    async def read_lineage(self, run_id: str) -> Lineage | None:
        """A run with its journal, write numbers, lineage and checkpoints."""
        ...

    async def derive_run(
        self,
        new: NewRun,
        journal: Sequence[tuple[str, str]],
        lineage: Sequence[tuple[str, str]],
        event_type: EventType,
        event_data: str,
    ) -> Refused | None:
        """Create a replayed/forked run seeded with `journal` and `lineage` records
        (`Refusal.EXISTS` when the id is taken)."""
        ...

    async def list_runs(
        self, status: RunStatus | None, flow: str | None, limit: int
    ) -> list[StoredRun]:
        """Newest first. Several round trips."""
        ...

    # -- activations ---------------------------------------------------------------

    async def claim(
        self,
        owner: str,
        queues: Sequence[str] | None,
        limit: int,
        now: float,
        lease_ttl: float,
        *,
        flows: Sequence[str] | None = None,
    ) -> list[Claim]:
        """Take up to `limit` ready runs, highest priority first, with their journals.

        With `flows`, only runs of those flows are taken; others stay queued.
        """
        ...

    async def poll(
        self,
        owner: str,
        queues: Sequence[str] | None,
        limit: int,
        now: float,
        lease_ttl: float,
        max_recoveries: int,
        recovery_error: str,
        *,
        flows: Sequence[str] | None = None,
    ) -> tuple[list[Claim], TickResult]:
        """`tick` then `claim`, in one round trip per partition (a worker's loop)."""
        ...

    async def record(
        self,
        run_id: str,
        fence: int,
        key: str,
        record: str,
        *,
        now: float = 0.0,
        event: StepEvent | None = None,
        intents: Sequence[NewIntent] = (),
    ) -> bool:
        """One fenced journal write, with its event, checkpoint and a step's outbox
        intents: one round trip. False when fenced out (nothing written)."""
        ...

    async def mark(self, run_id: str, fence: int, key: str, now: float) -> bool:
        """The optional `step.started` event and checkpoint. False when fenced out."""
        ...

    async def consume(
        self,
        run_id: str,
        fence: int,
        key: str,
        mailbox: Mailbox,
        now: float,
        deadline: float | None,
        record: str,
        timeout_record: str,
    ) -> tuple[Consumed, str | None]:
        """Take one signal into the journal at `key`: `record` (a JSON object the
        engine made) with the signal's JSON payload as its member ``"value"``; or,
        with none and the deadline passed, `timeout_record`. Safe to run twice: a
        second run answers as the first did. Returns what happened and the payload."""
        ...

    async def suspend(
        self,
        run_id: str,
        fence: int,
        now: float,
        deadline: float | None,
        status: RunStatus,
        records: Sequence[tuple[str, str]],
        mailboxes: Sequence[Mailbox],
        *,
        approvers: Mapping[Mailbox, Sequence[str]] | None = None,
    ) -> Parked:
        """Park a run on its mailboxes and deadline, writing `records` first, and
        re-checking the mailboxes (a signal that landed meanwhile is not lost)."""
        ...

    async def finish(
        self,
        run_id: str,
        fence: int,
        status: RunStatus,
        now: float,
        *,
        result: str | None = None,
        result_type: str | None = None,
        error: str | None = None,
        reason: str | None = None,
        retention: float | None = None,
        delete_until: float | None = None,
    ) -> Refused | None:
        """End a run (its `error` JSON is the event's data too). A completed or
        canceled run gets an expiry `retention` seconds after `now` (default: the
        retention recorded at start). With `delete_until`, a completed run is
        deleted at once, leaving only a tombstone (`get_tombstone`) and its done
        notice until that time."""
        ...

    async def release(self, run_id: str, fence: int) -> None:
        """Give a claimed run back to its queue (worker shutdown)."""
        ...

    async def renew(self, leases: Sequence[tuple[str, int]], expiry: float) -> list[str]:
        """Extend leases; returns the run ids whose lease is lost."""
        ...

    async def tick(
        self, now: float, max_recoveries: int, recovery_error: str, limit: int = 100
    ) -> TickResult:
        """Fire due timers, recover expired leases and delete runs whose retention
        ended (up to `limit` of each, every partition)."""
        ...

    # -- what clients do -------------------------------------------------------------

    async def signal(
        self,
        run_id: str,
        mailbox: Mailbox,
        payload: str,
        dedup_id: str | None,
        *,
        now: float = 0.0,
        event_data: str = "",
        decision_by: str | None = None,
    ) -> bool | Refused:
        """Deliver to a mailbox: True, or False for a repeated `dedup_id`. With
        `decision_by` (an approval or denial) the run must be waiting on that
        mailbox (`NOT_WAITING`) and the actor among its approvers if the wait
        names some (`FORBIDDEN`, audited). A finished run: `TRANSITION`."""
        ...

    async def audit(
        self, run_id: str, event_type: EventType, now: float, event_data: str
    ) -> Refused | None:
        """Append an event that changes nothing else (e.g. ``auth.denied``)."""
        ...

    async def cancel(
        self, run_id: str, reason: str, now: float, *, event_data: str = ""
    ) -> Refused | None: ...

    async def resume(
        self, run_id: str, discard_key: str | None, *, now: float = 0.0, event_data: str = ""
    ) -> Refused | None:
        """Continue a failed, canceled or waiting run, dropping the record at
        `discard_key` (the failure that failed it)."""
        ...

    async def delete(self, run_id: str, now: float, *, event_data: str = "") -> Refused | None:
        """Delete a finished run: every key of it and its index entries; the
        ``run.deleted`` event goes to the feed only (`NOT_FINISHED` for a run
        that has not finished: nothing is deleted)."""
        ...

    # -- reading a run's history -------------------------------------------------------

    async def events(self, run_id: str, cursor: str | None, limit: int) -> list[StoredEvent]:
        """A page of a run's events after `cursor` (exclusive), oldest first."""
        ...

    async def checkpoints(self, run_id: str) -> list[StoredCheckpoint]:
        """A run's checkpoints, oldest first."""
        ...

    async def correlation(self, run_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        """(trace id, tenant id) of each known run."""
        ...

    async def follow(
        self, subscription: Any, timeout: float, count: int
    ) -> tuple[list[StoredEvent], Any]:
        """Events of every run published since `subscription` was made (None: make
        one now), waiting up to `timeout` for the first; returns them and the
        subscription. Live only: what is published while nobody follows is lost."""
        ...

    async def unfollow(self, subscription: Any) -> None:
        """Close a subscription `follow` made."""
        ...

    async def wait_ready(self, queues: Sequence[str] | None, timeout: float) -> bool:
        """Block until a run may be ready on these queues (or timeout)."""
        ...

    async def wait_finished(self, run_id: str, timeout: float) -> bool:
        """Block until the run has finished (or timeout); True if it has.

        Returns at once for a run that finished and was not resumed since.
        """
        ...

    # -- outbox ---------------------------------------------------------------------

    async def claim_intents(
        self, channels: Sequence[str], limit: int, now: float, lease_ttl: float
    ) -> tuple[list[IntentClaim], float | None]:
        """Lease up to `limit` due intents of `channels` for `lease_ttl` seconds; also
        when the next one is due (or a lease ends)."""
        ...

    async def settle_intent(
        self,
        claim: IntentClaim,
        outcome: Delivery,
        now: float,
        *,
        due: float | None = None,
        error: str = "",
        event_data: str = "",
    ) -> bool:
        """End a delivery. False when it no longer owns the intent (nothing changed)."""
        ...

    async def renew_intents(self, claims: Sequence[IntentClaim], expiry: float) -> list[str]:
        """Extend the leases of deliveries in progress; the ids no longer held."""
        ...

    async def intents(self, run_id: str) -> list[StoredIntent] | None:
        """A run's intents, oldest first; None for no such run."""
        ...

    async def wait_intents(self, channels: Sequence[str], timeout: float) -> bool:
        """Block until an intent of `channels` may be due (or timeout)."""
        ...

    async def close(self) -> None: ...

    def describe(self) -> dict[str, Any]:
        """What this store is, for logs (never secrets)."""
        ...
