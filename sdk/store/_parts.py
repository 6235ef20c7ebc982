"""The parts of the store protocol beyond a run's lifecycle: reading a run's
history, the outbox, and the registry of live workers. `sdk.store._protocol.Store`
is all of them together; see its docstring for what holds for every method."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from sdk.store._records import (
    Delivery,
    EventDelivered,
    IntentClaim,
    Mailbox,
    NewRun,
    Refused,
    StartOutcome,
    StepEvent,
    StoredCheckpoint,
    StoredEvent,
    StoredIntent,
    WorkerBeat,
)
from sdk.store._schedules import NewSchedule, ScheduleFire, ScheduleOp, StoredSchedule

__all__ = [
    "ChildStore", "EventStore", "HistoryReads", "OutboxStore", "ScheduleStore", "WorkerRegistry",
]  # fmt: skip


class ChildStore(Protocol):
    """Child flows: a fan-out's starts, and the journal records of their handles,
    in batches. Each run's write is the same atomic script as `Store.create_run` /
    `Store.record` (a child may live on another partition than its parent); a
    batch is one round trip (a pipeline), not one per run."""

    async def create_runs(
        self, news: Sequence[NewRun], event_data: Sequence[str]
    ) -> list[StartOutcome]:
        """`Store.create_run` for each of `news` (with its ``run.created`` event
        data), in order. Safe to repeat, as `create_run` is."""
        ...

    async def record_many(
        self,
        run_id: str,
        fence: int,
        records: Sequence[tuple[str, str]],
        *,
        now: float,
        events: Sequence[StepEvent | None],
    ) -> bool:
        """`Store.record` (without intents) of each (key, record) with its event.
        False when fenced out: then none was written, or (a lease lost during
        the batch) the ones before it were; the activation stops either way."""
        ...


class EventStore(Protocol):
    """Events matched by key (``send_event`` / ``wait_for_event``).

    A wait registers itself when it is consumed (`Store.consume` with a
    `EventWatch`): its run joins the index of its filter's token in the run's
    own partition, and the filter's shape joins the event's shapes there. A
    send reads the shapes, then the indexes of the tokens the event's data
    gives, then delivers to each run found, one call per run.
    """

    async def event_shapes(self, event: str) -> set[str]:
        """The filter shapes registered for `event`, over every partition (one
        round trip per partition, concurrently)."""
        ...

    async def event_listeners(self, tokens: Sequence[str]) -> list[tuple[str, str]]:
        """(token, run id) for each run in the index of each of `tokens`, over every
        partition (one round trip per partition, concurrently); may name runs
        that no longer listen."""
        ...

    async def deliver_event(
        self,
        run_id: str,
        token: str,
        mailbox: Mailbox,
        payload: str,
        dedup_id: str,
        *,
        now: float,
        event_data: str,
    ) -> EventDelivered | Refused:
        """Put an event in the mailbox of a run that listens there (an
        ``event.delivered`` event; the run woken if it waits on it). Safe to
        repeat: the dedup id makes a second call `DUPLICATE`. A run that does
        not listen there (ended, gone, stopped waiting) is `NOT_LISTENING` and
        taken off the index of `token`. `Refused` (`CORRUPT`) for damaged data;
        `TOO_LARGE` or `FULL` past the store's bounds on mailboxes, as `signal`."""
        ...


class HistoryReads(Protocol):
    """Reading a run's history, and waiting for runs to be ready or to finish."""

    async def events(self, run_id: str, cursor: str | None, limit: int) -> list[StoredEvent]:
        """A page of a run's events after `cursor` (exclusive), oldest first: what
        its log keeps, with the audit events trimmed out of it (its audit trail,
        see `StoreLimits`) in their places. `CorruptData` when the log, the trail
        or an entry of the page cannot be read (its detail names the entry: the
        next page starts after it)."""
        ...

    async def checkpoints(self, run_id: str) -> list[StoredCheckpoint]:
        """A run's checkpoints, oldest first. `CorruptData` when they cannot be read."""
        ...

    async def approvers(self, run_id: str) -> dict[Mailbox, tuple[str, ...]]:
        """Who may decide each human wait the run is parked on, for the waits that
        name their approvers (`park`'s `approvers`); empty when none does or the
        run is not parked. `CorruptData` when they cannot be read."""
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

    async def wait_ready(
        self, queues: Sequence[str] | None, timeout: float, *, owner: str | None = None
    ) -> bool:
        """Block until a run may be ready on these queues (or timeout). With
        `owner`, also until a run that worker parked with a sticky delay (see
        `Store.suspend`) is ready: its wake-ups go to that worker first."""
        ...

    async def wait_finished(self, run_id: str, timeout: float) -> bool:
        """Block until the run has finished (or timeout); True if it has.

        Returns at once for a run that finished and was not resumed since.
        """
        ...


class OutboxStore(Protocol):
    """Outbox intents: claimed, settled and renewed by the workers' dispatchers."""

    async def claim_intents(
        self, channels: Sequence[str], limit: int, now: float, lease_ttl: float
    ) -> tuple[list[IntentClaim], float | None]:
        """Lease up to `limit` due intents of `channels` for `lease_ttl` seconds,
        earliest due first, channel by channel in the order given; also when
        the next one is due (or a lease ends). Each claim counts a delivery."""
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
        """End a delivery. False when it no longer owns the intent (nothing
        changed): a failure or release from other than the newest delivery, or
        any outcome once the intent is settled (so also when repeated)."""
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


class WorkerRegistry(Protocol):
    """Live workers, from their heartbeats."""

    async def beat(self, beat: WorkerBeat) -> None:
        """Register a worker, or renew its registration, until `beat.expires_at`."""
        ...

    async def forget_worker(self, worker_id: str) -> None:
        """Drop a worker's registration (it stopped)."""
        ...

    async def workers(self, now: float) -> list[WorkerBeat]:
        """The workers whose registration has not expired at `now`."""
        ...


class ScheduleStore(Protocol):
    """Schedules (``@scheduled``, ``Client.create_schedule``): durable timers that
    workers fire. The engine computes tick times (cron, time zones); the store
    keeps them and starts a tick's run in the same atomic write that advances
    the schedule, so a tick is fired once whatever the number of workers, and a
    crash cannot lose or double it. A tick's run gets its id from
    `schedule_run_id`, so that it lives where one write can create it with the
    schedule (a Redis store with several partitions keeps both in its first)."""

    def schedule_run_id(self, run_id: str) -> str:
        """The id a tick run named `run_id` gets: `run_id`, or a deterministic
        variant of it (the same for every caller) that this store can write in
        one atomic step with the schedule. No I/O."""
        ...

    async def save_schedule(
        self, new: NewSchedule, *, replace: bool, now: float, audit_data: str = ""
    ) -> int:
        """Create a schedule: 1. The same spec again: 0, nothing written. Another
        spec under the same id: -1 (nothing written), or with `replace` 2: its
        spec and next tick are replaced, its state (paused, last run, counters)
        kept. With `audit_data`, a save that writes (1, 2) also appends a
        ``schedule.created`` (``schedule.replaced``) entry with it to the audit
        log (`AuditLog.CHANGES`), in the same atomic step."""
        ...

    async def schedule_op(
        self,
        schedule_id: str,
        op: ScheduleOp,
        now: float,
        next_at: float | None = None,
        *,
        audit_data: str = "",
    ) -> bool:
        """Pause (a buffered tick is dropped), resume (next tick `next_at`; only a
        paused schedule changes), delete, or trigger (a run at `now`, started by the
        next worker pass that fires the schedule). False for no such schedule.
        With `audit_data`, an operation on a schedule that exists also appends a
        ``schedule.paused`` (``resumed``, ``deleted``, ``triggered``) entry with it
        to the audit log (`AuditLog.CHANGES`), in the same atomic step."""
        ...

    async def schedules(self, schedule_ids: Sequence[str] | None = None) -> list[StoredSchedule]:
        """These schedules (default: every one, oldest first), with their last
        run's status; unknown ids are left out. A few round trips."""
        ...

    async def due_schedules(
        self, flows: Sequence[str], now: float
    ) -> tuple[list[StoredSchedule], float | None]:
        """Schedules of `flows` that need a worker at `now` (a tick due, a trigger, a
        buffered tick whose previous run ended), a batch at most; and the earliest
        time after `now` that one will (None: none)."""
        ...

    async def fire_schedules(self, fires: Sequence[ScheduleFire]) -> list[list[str] | None]:
        """Each fire, atomically (one round trip for all): None when its schedule is
        no longer at its version (fired by another worker, changed, deleted: nothing
        written), else the run ids it started, applying the schedule's overlap
        policy to each tick. A tick run whose id exists is not created again."""
        ...
