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

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from sdk.store._audit import MAX_AUDIT_ENTRIES, AuditLog, AuditStore, StoredAuditEntry
from sdk.store._limits import AUDIT_EVENTS, StoreLimits, is_audit_event
from sdk.store._parts import (
    ChildStore,
    EventStore,
    HistoryReads,
    OutboxStore,
    ScheduleStore,
    WorkerRegistry,
)
from sdk.store._queues import QueueLimits, QueueReads, QueueStats
from sdk.store._records import (
    Claim,
    Consumed,
    CorruptData,
    CorruptIndex,
    Damaged,
    Delivery,
    EventDelivered,
    EventWatch,
    FailedRun,
    FlowScope,
    IntentClaim,
    Lineage,
    Mailbox,
    NewIntent,
    NewRun,
    Parked,
    PartitionsMismatch,
    Rebuilt,
    Refusal,
    Refused,
    Renewal,
    Rewind,
    StartOutcome,
    StepEvent,
    StoredCheckpoint,
    StoredEvent,
    StoredIntent,
    StoredRun,
    TickResult,
    WorkerBeat,
)
from sdk.store._schedules import (
    NewSchedule,
    ScheduleFire,
    ScheduleOp,
    StoredSchedule,
    TickKind,
    TickStart,
)
from sdk.store._statuses import RESUMABLE, TRANSITIONS, CheckpointKind, EventType, RunStatus

__all__ = [
    "AUDIT_EVENTS",
    "MAX_AUDIT_ENTRIES",
    "RESUMABLE",
    "TRANSITIONS",
    "AuditLog",
    "AuditStore",
    "CheckpointKind",
    "Claim",
    "Consumed",
    "CorruptData",
    "CorruptIndex",
    "Damaged",
    "Delivery",
    "EventDelivered",
    "EventStore",
    "EventType",
    "EventWatch",
    "FailedRun",
    "FlowScope",
    "HistoryReads",
    "IntentClaim",
    "Lineage",
    "Mailbox",
    "NewIntent",
    "NewRun",
    "NewSchedule",
    "OutboxStore",
    "Parked",
    "PartitionsMismatch",
    "QueueLimits",
    "QueueReads",
    "QueueStats",
    "Rebuilt",
    "Refusal",
    "Refused",
    "Renewal",
    "Rewind",
    "RunStatus",
    "ScheduleFire",
    "ScheduleOp",
    "ScheduleStore",
    "StartOutcome",
    "StepEvent",
    "Store",
    "StoreLimits",
    "StoredAuditEntry",
    "StoredCheckpoint",
    "StoredEvent",
    "StoredIntent",
    "StoredRun",
    "StoredSchedule",
    "TickKind",
    "TickResult",
    "TickStart",
    "WorkerBeat",
    "WorkerRegistry",
    "is_audit_event",
]


class Store(
    HistoryReads, OutboxStore, WorkerRegistry, EventStore, ChildStore, QueueReads,
    ScheduleStore, AuditStore, Protocol,
):  # fmt: skip
    """Run records, journals, mailboxes, timers, queues and leases.

    **Repeating a call.** A call whose reply was lost (a dropped connection)
    may have been applied. The engine never repeats an activation's write: it
    abandons the activation, and the run is recovered from what was recorded
    when its lease expires. Clients and users do repeat calls, so each method
    says what a second identical call answers. In short: `create_run`,
    `derive_run`, `consume`, `signal` with a dedup id, `renew`, `tick`,
    `beat` and `forget_worker` are safe to repeat; `record` with intents
    adds nothing the second time; `finish`, `suspend` and `release` answer
    FENCED (the first moved the run off its lease); a repeated `claim` has
    already taken the run, which waits for its lease to expire.

    **Damaged data.** A run whose stored data cannot be read or worked with (a
    key of another type, a field that is not a number, bytes that are not
    UTF-8) never fails a call for other runs, and is never half-written:
    operations on it change nothing and answer `Refused` with
    `Refusal.CORRUPT` (clients' operations) or raise `CorruptData` (an
    activation's writes, history reads); claims and ticks report it
    (`Claim.damage`, `TickResult.damaged`) for the engine to `quarantine`.
    A key that runs share (a queue, an index) that cannot be worked with is no
    run's damage: a call that needs it raises `CorruptIndex` naming it and
    changes nothing; ticks rebuild what they can (`TickResult.rebuilt`).
    """

    @property
    def limits(self) -> StoreLimits:
        """The bounds this store holds each run to: its event log and audit trail,
        its mailboxes (`StoreLimits`)."""
        ...

    # -- runs ------------------------------------------------------------------

    async def create_run(
        self, new: NewRun, event_data: str = "", *, max_pending: int | None = None
    ) -> StartOutcome:
        """Create a pending run and queue it, or report the existing one.

        The same id again creates nothing: `StartOutcome.created` is False with
        the run's status, and `conflict` is True when its `args_hash` differs
        (the id was used with other arguments). `event_data` is the
        ``run.created`` event's data. With `max_pending`, a new run whose queue
        already holds that many ready runs (in its partition) is not created:
        `StartOutcome.full` is the queue's depth. A run with `NewRun.start_at`
        (or `start_in`) later than its creation is queued only then (`tick`).
        """
        ...

    async def get_run(self, run_id: str) -> StoredRun | None:
        """The run as stored; None for no such run. A record that cannot be read
        whole comes back with `StoredRun.damage` saying what (never an error)."""
        ...

    async def get_tombstone(self, run_id: str) -> StoredRun | None:
        """What is left of a run deleted on success (its record without arguments)
        until its grace period ends; None otherwise."""
        ...

    async def read_lineage(self, run_id: str) -> Lineage | None:
        """A run with its journal, write numbers, lineage and checkpoints.
        `CorruptData` when any of them cannot be read."""
        ...

    async def derive_run(
        self,
        new: NewRun,
        journal: Sequence[tuple[str, str]],
        lineage: Sequence[tuple[str, str]],
        event_type: EventType,
        event_data: str,
        mail: Sequence[tuple[Mailbox, str, str]] = (),
    ) -> Refused | None:
        """Create a replayed/forked run seeded with `journal` and `lineage` records,
        announced by an `event_type` event (`run.replayed`, `run.forked`); its
        mailboxes start with `mail` (mailbox, payload, dedup id: the id is kept
        as a `signal`'s would be). A run with `NewRun.parent_run_id` is listed
        among that run's children (`list_runs(parent_run_id=...)`).
        `Refusal.EXISTS` when the id is taken (so also when repeated)."""
        ...

    async def list_runs(
        self,
        status: RunStatus | None,
        flow: str | None,
        limit: int,
        *,
        parent_run_id: str | None = None,
    ) -> list[StoredRun]:
        """Newest first. Several round trips. A run whose record cannot be read
        whole is listed with `StoredRun.damage` set (never an error). With
        `parent_run_id`, only that run's child flows."""
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
        flows: Sequence[FlowScope] | None = None,
        limits: Sequence[QueueLimits] = (),
    ) -> list[Claim]:
        """Take up to `limit` ready runs, highest priority first, with their journals.

        Each claimed run moves to ``running`` with a new fencing token, leased
        to `owner` until ``now + lease_ttl``. With `flows` (`FlowScope`: a
        name, or a name at one version), only runs of those flows (versions) are
        taken; others stay queued for the workers that serve them (a store may
        look only so deep into a queue for one: Redis looks at the first 64).
        Not repeatable: a claim whose reply was lost holds its runs
        until their leases expire and `tick` recovers them.

        `limits` are the caller's declared queue limits (`QueueLimits`): a run
        is taken only while its queue, its concurrency key and (a first
        activation) the queue's rate allow; a run counts against them from its
        claim until it parks, ends, is released or its lease expires.

        A run whose data cannot be read (or worked with) comes back as a claim
        with `Claim.damage` set, taken off its queue, and leased only if its data
        was read (`Damaged.fence`); the others of the batch are unaffected. The
        caller fails it with `quarantine`.
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
        flows: Sequence[FlowScope] | None = None,
        limits: Sequence[QueueLimits] = (),
    ) -> tuple[list[Claim], TickResult]:
        """`tick` then `claim`, in one round trip per partition (a worker's loop).
        `TickResult.next_due` is as for `tick`; damaged runs come back as for
        both (`TickResult.damaged`, `Claim.damage`)."""
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
        intents: one round trip. False when fenced out (nothing written).

        With `intents`, a repeated call that finds `record` already at `key`
        writes nothing (the intents are there). Without, it writes again: the
        same record, and its event a second time.
        """
        ...

    async def mark(self, run_id: str, fence: int, key: str, now: float) -> bool:
        """The optional `step.started` event and checkpoint. False when fenced out;
        repeated, a second event and checkpoint."""
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
        *,
        watch: EventWatch | None = None,
    ) -> tuple[Consumed, str | None]:
        """Take one signal into the journal at `key`: `record` (a JSON object the
        engine made) with the signal's JSON payload as its member ``"value"``; or,
        with none and the deadline passed, `timeout_record`. Safe to run twice: a
        second run answers as the first did. Returns what happened and the payload.

        With `watch` (a ``wait_for_event``), the wait at `key` listens on
        `mailbox` first (see `EventStore`), and stops listening when it takes an
        event or times out; the last wait of the run to stop listening on that
        mailbox drops the events left in it."""
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
        sticky: float | None = None,
        waiting_on: str | None = None,
    ) -> Parked:
        """Park a run on its mailboxes and deadline, writing `records` first, and
        re-checking the mailboxes (a signal that landed meanwhile is not lost).

        `waiting_on` (the engine's JSON, kept opaque) describes what the run
        waits for: a parked run keeps it as `StoredRun.waiting_on` until it
        leaves its waiting status (any transition out of it clears it); a run
        that is `READY` instead does not keep it.

        With `sticky` (seconds), the lease owner keeps the parked run in memory:
        when it is ready again, `wait_ready(owner=...)` of that owner wakes, and
        claims by other owners pass it over for `sticky` seconds from when one
        of them first sees it ready. The owner's next claim of it, while no
        fenced write or lease change happened since (its fencing token and
        journal write count are as this park left them), has
        `Claim.cached` set and leaves journal and lineage out.

        `status` is the waiting status to move to. `READY` when a mailbox holds
        a signal or the deadline has passed: the run is queued again (pending)
        instead. `approvers` names, per human mailbox, who may decide. Repeated,
        `FENCED`: the run is no longer running on that token.
        """
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
        notice until that time. `Refusal.TRANSITION` when the transition table
        forbids it; `Refusal.FENCED` when fenced out, so also when repeated."""
        ...

    async def continue_as_new(
        self, run_id: str, fence: int, now: float, args: str, event_data: str, archive_data: str
    ) -> Refused | None:
        """End the run's current generation and start its next, atomically.

        Generation n (`StoredRun.generation`) is archived as the finished run
        ``f"{run_id}~g{n}"`` (status completed, reason ``continued_as_new``; its
        journal, checkpoints and lineage move there, its log gets one event with
        `archive_data`). The run keeps its id, mailboxes, dedup ids and event log
        (an event with `event_data`), and goes on running from an empty journal
        with `args` and generation n + 1, queued again. `Refusal.FENCED` when
        fenced out, so also when repeated."""
        ...

    async def release(self, run_id: str, fence: int) -> None:
        """Give a claimed run back to its queue (worker shutdown), with a new
        fencing token; nothing when fenced out (so also when repeated)."""
        ...

    async def renew(self, leases: Sequence[tuple[str, int]], expiry: float) -> Renewal:
        """Extend leases held on these fencing tokens to `expiry`; returns the run
        ids whose lease is lost (nothing changes for those), and among the others
        those with a cancel request their flow has not been given yet (the
        journal holds no ``~cancel`` record): `Renewal.cancel_requested`."""
        ...

    async def tick(
        self, now: float, max_recoveries: int, recovery_error: str, limit: int = 100
    ) -> TickResult:
        """Fire due timers, recover expired leases and delete runs whose retention
        ended (up to `limit` of each, every partition).

        A recovered run gets a new fencing token and goes back to its queue
        (``replaying``), or fails with `recovery_error` (JSON of an error) after
        `max_recoveries` recoveries without progress. A run whose timeout
        deadline (`NewRun.timeout` seconds after its claim from ``pending``, or
        after a resume) has passed and that has not ended fails with reason
        ``timed_out`` (error type ``builtins:TimeoutError``), fenced out of any
        activation, in one step; `fired` counts these too. `next_due` is the
        earliest timer, run deadline or lease expiry left (None: none), so a
        worker can sleep until then.

        It also runs the repair pass, at most once a second (of `now`) per
        partition and over at most `limit` runs a time, walking the runs that
        have not ended: a run no index reaches (pending off its queue, running
        or replaying with neither a lease nor a queue entry, waiting with
        neither a timer nor a wait) is queued again with a ``run.repaired``
        event (`TickResult.repaired`). Runs found damaged on the way (here or
        by the timers and leases) are not touched: they come back in
        `TickResult.damaged` for the caller to `quarantine`; so do waiting
        runs whose keys a wake-up would need (their mailboxes, dedup ids, event
        log...) cannot be worked with, as nothing else would end them. A queue,
        the list of queues, a wake-up list or the workers' registry of the
        wrong type is deleted and starts over (`TickResult.rebuilt`): the pass
        queues the runs the queue held again as it reaches them.
        """
        ...

    async def quarantine(self, run_id: str, fence: int | None, now: float, error: str) -> bool:
        """Fail a run whose data cannot be read: status ``failed``, reason
        ``corrupt_record``, `error` (the engine's error JSON), taken off every
        queue, timer, lease and status index but ``failed``, with a ``run.failed``
        event and a done notice for waiters, as far as its damaged keys allow.
        What was damaged stays as it was found (for inspection).

        With `fence`, only while the run is leased on it; without, only while no
        lease is held. False when nothing was done: the run ended, is gone, is
        held by another lease, or its record is not a hash (then nothing of it
        can be written). Repeated: False.
        """
        ...

    def key_of(self, run_id: str, part: str) -> str:
        """Where `part` of a run is kept, for messages about damaged data:
        ``"run"`` (its record), ``"journal"`` or ``"lineage"``. A Redis store
        answers the key's name."""
        ...

    def is_unavailable(self, error: BaseException) -> bool:
        """Whether `error`, raised by a call of this store, means the store cannot
        be reached or is not serving right now (retry later), rather than a
        fault in the data or the call."""
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
        """Deliver to a mailbox: True, or False for a repeated `dedup_id`, in
        any status (a duplicate is recognised before the checks below, and
        writes nothing). With `decision_by` (an approval or denial) the run
        must be waiting on that mailbox (`NOT_WAITING`) and the actor among its
        approvers if the wait names some (`FORBIDDEN`, audited). A finished run:
        `TRANSITION`. Without a `dedup_id`, a repeated call delivers a second
        signal.

        The bounds of `limits`, checked in the same atomic step as the write:
        a `payload` over ``max_message_bytes`` is `TOO_LARGE`; a signal to a run
        that holds ``max_pending_messages`` messages its flow has not taken, or
        would hold more than ``max_pending_bytes``, is `FULL` (a decision is
        not: the run waits for it). A child's outcome (mailbox ``~child:<id>``,
        delivered by the engine) is not bounded."""
        ...

    async def audit(
        self, run_id: str, event_type: EventType, now: float, event_data: str
    ) -> Refused | None:
        """Append an event that changes nothing else (e.g. ``auth.denied``);
        repeated, a second event."""
        ...

    async def cancel(
        self,
        run_id: str,
        reason: str,
        now: float,
        *,
        event_data: str = "",
        grace_until: float | None = None,
        request_data: str = "",
        forced_data: str = "",
        forcing_data: str = "",
    ) -> Refused | None:
        """Move a run that has not ended to ``canceled`` (its lease, if any, is
        fenced out; its pending intents are canceled). `TRANSITION` for an
        ended run, so also when repeated.

        With `grace_until`, a run that has started (running, replaying or
        waiting) and has no cancel request yet gets one instead: its reason
        and deadline are kept on the run (`StoredRun.cancel_reason`,
        `cancel_deadline`), a ``run.cancel_requested`` event (`request_data`)
        is written, a waiting run is woken, and the flow is given the cancel at
        its next activation (`renew` reports it to the worker holding the
        lease). At `grace_until`, `tick` forces the cancel (``run.canceled``
        with `forced_data`). A cancel of a run that has a request forces it at
        once, keeping the request's reason (``run.canceled`` with
        `forcing_data`); so does one of a pending run or one without
        `grace_until` (`event_data`). Also when the flow ends after it was given
        the cancel, the run ends ``canceled`` (`finish`)."""
        ...

    async def resume(
        self,
        run_id: str,
        discard_key: str | None,
        *,
        now: float = 0.0,
        event_data: str = "",
        version: str | None = None,
        rewind: Rewind | None = None,
    ) -> Refused | None:
        """Continue a failed, canceled or waiting run, dropping the record at
        `discard_key` (the failure that failed it): the run is queued again,
        and a canceled run's canceled intents are pending again.
        `TRANSITION` from any other status (so also when repeated).

        With `rewind` (a canceled run), its records at `rewind.keys` are dropped
        too, and their step_completed checkpoints are still listed by
        `checkpoints`; the intents those records made stay canceled for good;
        ``resume_from_checkpoint`` becomes `rewind.checkpoint_id`; a worker that
        keeps the run in memory (`suspend` with `sticky`) must not continue it
        (its next claim reads the journal). `CHANGED` (with the status now)
        when the run is not canceled at fencing token `rewind.fence` any more:
        nothing is written; read it again.

        With `version`, the run's ``flow_version`` becomes `version` too, and a
        queued run no activation holds (``pending``, or ``replaying`` after its
        lease expired) is accepted as well: it keeps its status and its queue
        position, and workers serving `version` may claim it."""
        ...

    async def delete(
        self, run_id: str, now: float, *, event_data: str = "", audit_data: str = ""
    ) -> Refused | None:
        """Delete a finished run: every key of it and its index entries. The
        ``run.deleted`` event (`event_data`: who deleted it) goes to the feed,
        and, in the same atomic step as the deletion, to the audit log
        (`AuditLog.CHANGES`, with `audit_data`, default `event_data`): a deletion
        is never without its record. `NOT_FINISHED` for a run that has not
        finished (nothing is deleted); `NOT_FOUND` when repeated."""
        ...

    async def close(self) -> None: ...

    def describe(self) -> dict[str, Any]:
        """What this store is, for logs (never secrets)."""
        ...
