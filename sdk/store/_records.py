"""The records that cross the store seam, and the outcomes a store reports.

Part of the store protocol (`sdk.store._protocol` exports them). JSON texts are
the engine's, kept opaque by stores.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence

import attrs

from sdk.errors import CorruptIndex, CorruptRecord, SteadyflowError
from sdk.store._statuses import CheckpointKind, EventType, RunStatus

__all__ = [
    "MAX_PRIORITY",
    "Claim",
    "Consumed",
    "CorruptData",
    "CorruptIndex",
    "Damaged",
    "Delivery",
    "EventDelivered",
    "EventWatch",
    "FailedRun",
    "FlowScope",
    "IntentClaim",
    "Lineage",
    "Mailbox",
    "NewIntent",
    "NewRun",
    "Parked",
    "PartitionsMismatch",
    "Rebuilt",
    "Refusal",
    "Refused",
    "Renewal",
    "StartOutcome",
    "StepEvent",
    "StoredCheckpoint",
    "StoredEvent",
    "StoredIntent",
    "StoredRun",
    "TickResult",
    "WorkerBeat",
]


#: What a worker serves, for `Store.claim` / `Store.poll` (``flows=``): a flow
#: name (runs of that flow at any version), or a (name, version) pair (runs of
#: that flow started at exactly that version; None: started unversioned).
FlowScope = str | tuple[str, str | None]

#: Priorities a run may have: -MAX_PRIORITY..MAX_PRIORITY (stores keep them
#: exact in a queue score next to a 40-bit sequence number).
MAX_PRIORITY = 4095


# -- what a store is asked to write ------------------------------------------------


class PartitionsMismatch(SteadyflowError, ValueError):
    """The store was opened with another partition count than the deployment under
    its prefix was first used with. Runs live in the partition their id hashes to
    among N, so a process with another N would look for them, and put new ones,
    where the rest of the deployment does not: nothing is written or read."""

    def __init__(self, prefix: str, recorded: str, given: int) -> None:
        self.prefix = prefix
        self.recorded = recorded
        self.given = given
        super().__init__(
            f"the deployment under key prefix {prefix!r} uses {recorded} partition(s); this "
            f"store was opened with partitions={given}: open it with partitions={recorded} "
            f"(--partitions {recorded}) in every process"
        )


@attrs.frozen
class Mailbox:
    """Where signals for one ``wait_for`` name wait: plain signals, or human decisions."""

    name: str
    human: bool = False


@attrs.frozen
class EventWatch:
    """What a ``wait_for_event`` listens for: the event's name, its filter's shape
    (the filter's field names, as the engine encodes them) and the index token of
    the filter (event name, field names and values; opaque to the store)."""

    event: str
    shape: str
    token: str


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
    timeout: float | None = None  # seconds from its start (claim) until it fails timed_out
    parent_run_id: str | None = None  # a child flow's parent run
    tree_root_run_id: str | None = None  # the top of a child flow's tree of runs
    abandon: bool = False  # a child flow that a canceled parent leaves running
    concurrency_key: str | None = None  # counted against its queue's key_concurrency
    start_at: float | None = None  # queued at this time (kept pending on a timer until then)
    start_in: float | None = None  # ...or this many seconds after created_at


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
    generation: int = 0  # how many times the run continued as new (`Store.continue_as_new`)
    parent_run_id: str | None = None  # a child flow's parent run
    tree_root_run_id: str | None = None  # the top of a child flow's tree of runs
    abandon: bool = False  # a child flow that a canceled parent leaves running
    concurrency_key: str | None = None  # counted against its queue's key_concurrency
    start_at: float | None = None  # a delayed start: when it is (was) queued
    cancel_reason: str | None = None  # a cancel request's reason (`Store.cancel` with grace)
    cancel_deadline: float | None = None  # ...and when its grace ends (then it is forced)
    schedule_id: str | None = None  # the schedule whose tick started the run (field schedule)
    lease_owner: str | None = None  # the worker holding the run's lease, while one does
    lease_expires_at: float | None = None  # ...and when that lease runs out unless renewed
    args_hash: str | None = None  # what a start with the same id compares (`NewRun.args_hash`)
    waiting_on: str | None = None  # JSON: what a parked run waits for (`Store.suspend`)
    damage: str | None = None
    """What of the stored record could not be read ("<key>: <what>; ..."), None
    when all of it could: the fields it names hold their defaults here, and a
    status that cannot be read is reported as ``failed``."""


@attrs.frozen
class Damaged:
    """A run whose stored data a store cannot read or work with: which key, and what
    is wrong with it (``"field 'priority' is not an integer"``, ``"holds a string,
    not a hash"``...).

    The engine fails such a run alone (`Store.quarantine`). `fence` is the fencing
    token when the run was leased to the caller as it was found (a claim whose
    data the store read, but could not decode); None when it was not leased.
    """

    run_id: str
    key: str
    detail: str
    fence: int | None = None


@attrs.frozen
class Rebuilt:
    """A key that runs share (a queue, the list of queues, a wake-up list, the
    workers' registry) that a tick found holding what it cannot work with, and
    deleted so that it starts over: derived data, rebuilt as runs are queued
    (the repair pass queues a queue's runs again). See `CorruptIndex`."""

    key: str
    detail: str  # what was wrong with it


class CorruptData(CorruptRecord):
    """A store found a run's stored data unreadable while serving a call (an
    activation's write, a read of its history). Nothing was written. A
    `sdk.errors.CorruptRecord` (so in the `SteadyflowError` tree: a caller of
    the store that does not handle it sees the user-facing error); the worker
    fails the run alone with reason ``corrupt_record``."""


@attrs.frozen
class Claim:
    """A run a worker now holds a lease on, with its whole journal (step key ->
    record JSON), the mailboxes that held signals when it was claimed, and the
    reusable records of its lineage (a replay's or fork's source runs).

    With `damage`, the store could not read the run: nothing else of the claim
    is usable (`run` holds what could be read), and the caller should fail the
    run (`Store.quarantine`) instead of executing it.

    With `cached`, the claimer parked this run last with a sticky delay and
    nothing was written to it since (`Store.suspend`): `journal` and `lineage`
    are left out (empty), the claimer holds them.
    """

    run: StoredRun
    journal: dict[str, str]
    mail: frozenset[Mailbox] = frozenset()
    lineage: dict[str, str] = attrs.field(factory=dict)
    damage: Damaged | None = None
    cached: bool = False


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
class Rewind:
    """What resuming a canceled run whose flow was given its cancel discards
    (`Store.resume`): the journal records at `keys` (the cancel, and what the
    flow's cleanup wrote after it), chosen by the engine from the run as it read
    it at fencing token `fence`. The run continues from checkpoint
    `checkpoint_id` (0: none)."""

    fence: int
    keys: tuple[str, ...]
    checkpoint_id: int


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
    full: int | None = None  # not created: the queue held `max_pending` runs (its depth)


@attrs.frozen
class FailedRun:
    """A run that a maintenance pass failed by itself (a `TickResult`'s)."""

    run_id: str
    flow: str
    reason: str  # the `Reason` code: ``timed_out`` or ``max_recoveries_exceeded``


@attrs.frozen
class TickResult:
    """Timers fired and runs recovered by one `tick`, and when the next is due;
    runs the repair pass put back on an index (`repaired`), runs found damaged
    (`damaged`: the caller fails them, `Store.quarantine`), and keys runs share
    that it found damaged and rebuilt (`rebuilt`: the caller logs them)."""

    fired: int
    recovered: int
    next_due: float | None
    repaired: int = 0
    damaged: tuple[Damaged, ...] = ()
    failed: tuple[FailedRun, ...] = ()  # runs the pass failed (timed out, recovered too often)
    capped: bool = False  # a poll: a queue's ready run waits for this caller's worker cap
    schedules_due: float | None = None  # a poll: when a served flow's schedule needs a worker
    rebuilt: tuple[Rebuilt, ...] = ()


class Consumed(enum.Enum):
    """What `Store.consume` did."""

    SIGNAL = "signal"  # took a signal (its payload comes with it)
    TIMEOUT = "timeout"  # the deadline had passed: recorded the timeout
    EMPTY = "empty"  # nothing to take, deadline not reached
    FENCED = "fenced"  # the activation's lease is lost: nothing written


class EventDelivered(enum.Enum):
    """What `Store.deliver_event` did."""

    DELIVERED = "delivered"  # put in the mailbox (the run woken if it waits on it)
    DUPLICATE = "duplicate"  # the run already had this dedup id: nothing written
    NOT_LISTENING = "not_listening"  # no wait of the run listens there: index entry dropped


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
    CORRUPT = "corrupt"  # the run's stored data cannot be worked with (`key`, `detail`)
    CHANGED = "changed"  # the run changed since the caller read it (`status`: now): read again
    TOO_LARGE = "too_large"  # a message over `StoreLimits.max_message_bytes` (`size`, `limit`)
    FULL = "full"  # the run holds its pending messages (`detail`: "messages" or "bytes")


@attrs.frozen
class Refused:
    """A store's refusal: nothing was written (but an audit event, for FORBIDDEN)."""

    why: Refusal
    status: RunStatus | None = None
    requested: RunStatus | None = None
    actor: str | None = None
    key: str | None = None  # CORRUPT: the damaged key
    detail: str | None = None  # CORRUPT: what is wrong with it; FULL: which bound
    size: int | None = None  # TOO_LARGE: the message's bytes; FULL: what the run holds
    limit: int | None = None  # TOO_LARGE, FULL: the bound


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


@attrs.frozen
class WorkerBeat:
    """A worker's heartbeat: who it is and what it serves, alive until `expires_at`.

    `flows` are the flow names it serves; `queues` None means every queue.
    """

    worker_id: str
    host: str
    pid: int
    flows: tuple[str, ...]
    queues: tuple[str, ...] | None
    concurrency: int
    in_flight: int
    started_at: float
    beat_at: float
    expires_at: float


class Renewal(list[str]):
    """What `Store.renew` found. As a list: the run ids whose lease is lost.

    `cancel_requested`: run id -> reason, for the runs whose lease holds and that
    have a cancel request (`Store.cancel` with a grace deadline) their flow has not
    been given yet.
    """

    cancel_requested: dict[str, str]

    def __init__(
        self, lost: Sequence[str] = (), cancel_requested: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(lost)
        self.cancel_requested = dict(cancel_requested or {})
