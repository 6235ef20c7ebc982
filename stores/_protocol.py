"""The store protocol: the one seam between the engine and its storage.

Every method is one round trip unless its docstring says otherwise. Writes an
activation makes take its fencing token and raise `LeaseLost` when the token
is no longer current (lease expired and taken over, run canceled).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs

from sdk._journal import StepEvent
from sdk._outbox import NewIntent
from sdk._types import RunOptions, RunRecord, RunStatus

__all__ = [
    "Claim",
    "IntentClaim",
    "Lineage",
    "NewIntent",
    "NewRun",
    "RawEvent",
    "StartOutcome",
    "StepEvent",
    "Store",
    "StoredRun",
    "TickResult",
]


@attrs.frozen
class NewRun:
    """What `Client.start` writes."""

    run_id: str
    flow: str
    flow_version: str | None
    args: str  # JSON text: {"args": [...], "kwargs": {...}, "types": {...}}
    args_hash: str
    queue: str
    priority: int
    tenant_id: str | None
    created_at: float
    options: RunOptions = attrs.field(factory=RunOptions)
    source_run_id: str | None = None
    source_checkpoint_id: str | None = None
    root_run_id: str | None = None
    retry: str | None = None  # JSON of a RetryPolicy that replaces the flow's default
    retention: float | None = None  # seconds a completed or canceled run is kept (the flow's)


@attrs.frozen
class Lineage:
    """What a replay or fork reads of its source, in one round trip."""

    run: StoredRun
    journal: dict[str, str]
    jseq: dict[str, str]
    lineage: dict[str, str]
    checkpoints: list[dict[str, str]]


@attrs.frozen
class RawEvent:
    """An event as stored: stream id and fields (type, at, step, data)."""

    event_id: str
    run_id: str
    fields: dict[str, str]


@attrs.frozen
class StoredRun:
    """A run record plus the fields only the engine needs."""

    record: RunRecord
    args: str
    fence: int
    result_type: str | None
    raw_result: str | None
    retry: str | None = None  # JSON RetryPolicy replacing the flow's default (a fork's)


@attrs.frozen
class Claim:
    """A run a worker now holds a lease on, with its whole journal (raw JSON) and
    the names of its mailboxes that held signals when it was claimed."""

    run: StoredRun
    journal: dict[str, str]
    mail: frozenset[str] = frozenset()
    lineage: dict[str, str] = attrs.field(factory=dict)


@attrs.frozen
class StartOutcome:
    """`created` is False when the run id existed (same arguments)."""

    created: bool
    status: RunStatus


@attrs.frozen
class TickResult:
    """Timers fired and runs recovered by one `tick`, and when the next is due."""

    fired: int
    recovered: int
    next_due: float | None


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


class Store(Protocol):
    """Run records, journals, mailboxes, timers, queues and leases."""

    async def create_run(self, new: NewRun) -> StartOutcome:
        """Create a pending run and queue it, or report the existing one.

        Raises `IdempotencyConflict` when the id exists with other arguments.
        """
        ...

    async def get_run(self, run_id: str) -> StoredRun | None: ...

    async def read_lineage(self, run_id: str) -> Lineage | None:
        """A run with its journal, journal sequence, lineage and checkpoints."""
        ...

    async def derive_run(
        self,
        new: NewRun,
        journal: Sequence[tuple[str, str]],
        lineage: Sequence[tuple[str, str]],
        event_type: str,
        event_data: str,
    ) -> None:
        """Create a replayed/forked run seeded with `journal` and `lineage` records.

        Raises `IdempotencyConflict` if the new run id exists.
        """
        ...

    async def list_runs(
        self, status: RunStatus | None, flow: str | None, limit: int
    ) -> list[StoredRun]:
        """Newest first. Several round trips (one per page of 100 per partition)."""
        ...

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
    ) -> None:
        """One fenced journal write, with its event and checkpoint: one round trip."""
        ...

    async def mark(self, run_id: str, fence: int, key: str, now: float) -> None:
        """The optional `step.started` event and checkpoint (one round trip)."""
        ...

    async def consume(
        self,
        run_id: str,
        fence: int,
        key: str,
        mailbox: str,
        now: float,
        deadline: float | None,
        record_prefix: str,
        timeout_record: str,
    ) -> tuple[int, str | None]:
        """Pop one signal into the journal: (1, payload); or time out: (2, None); or (0, None)."""
        ...

    async def suspend(
        self,
        run_id: str,
        fence: int,
        now: float,
        deadline: float | None,
        status: RunStatus,
        records: Sequence[tuple[str, str]],
        mailboxes: Sequence[str],
        *,
        approvers: Mapping[str, Sequence[str]] | None = None,
    ) -> bool:
        """Park a run; False when a signal or the deadline is already there (re-queued)."""
        ...

    async def finish(
        self,
        run_id: str,
        fence: int,
        status: RunStatus,
        now: float,
        fields: dict[str, str],
        *,
        event_data: str = "",
        retention: float | None = None,
        delete_until: float | None = None,
    ) -> None:
        """End a run. A completed or canceled run gets an expiry `retention` seconds
        after `now` (default: the retention recorded at start, if any). With
        `delete_until`, a completed run is deleted at once, leaving only a
        tombstone (`get_tombstone`) and its done notice until that time."""
        ...

    async def release(self, run_id: str, fence: int) -> None: ...

    async def renew(self, leases: Sequence[tuple[str, int]], expiry: float) -> list[str]:
        """Extend leases; returns the run ids whose lease is lost. One round trip."""
        ...

    async def tick(
        self, now: float, max_recoveries: int, recovery_error: str, limit: int = 100
    ) -> TickResult:
        """Fire due timers, recover expired leases and delete runs whose retention
        ended (up to `limit` of each, every partition)."""
        ...

    async def signal(
        self,
        run_id: str,
        mailbox: str,
        payload: str,
        dedup_id: str | None,
        *,
        now: float = 0.0,
        event_data: str = "",
        decision_by: str | None = None,
    ) -> bool:
        """Deliver to a mailbox. With `decision_by` (an approval or denial) the run
        must be waiting on that mailbox (`NotWaiting`) and the actor among its
        approvers, if the wait names some (`Forbidden`, audited)."""
        ...

    async def audit(self, run_id: str, event_type: str, now: float, event_data: str) -> None:
        """Append an event that changes nothing else (e.g. ``auth.denied``)."""
        ...

    async def cancel(
        self, run_id: str, reason: str, now: float, *, event_data: str = ""
    ) -> None: ...

    async def delete(self, run_id: str, now: float, *, event_data: str = "") -> None:
        """Delete a finished run: every key of it and its index entries; the
        ``run.deleted`` event goes to the feed only. `InvalidTransition` for a run
        that has not finished (nothing is deleted), `RunNotFound` for none."""
        ...

    async def get_tombstone(self, run_id: str) -> StoredRun | None:
        """What is left of a run deleted on success (its record without arguments)
        until its grace period ends; None otherwise."""
        ...

    async def resume(
        self, run_id: str, discard_key: str | None, *, now: float = 0.0, event_data: str = ""
    ) -> None: ...

    async def events(self, run_id: str, cursor: str | None, limit: int) -> list[RawEvent]:
        """A page of a run's events after `cursor` (exclusive), oldest first."""
        ...

    async def checkpoints(self, run_id: str) -> list[dict[str, str]]:
        """A run's checkpoints, oldest first (fields: id, kind, step, status, at, seq)."""
        ...

    async def correlation(self, run_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        """(trace id, tenant id) of each known run, in one round trip."""
        ...

    async def follow(
        self, subscription: Any, timeout: float, count: int
    ) -> tuple[list[RawEvent], Any]:
        """Events of every run published since `subscription` was made (None: make one
        now), waiting up to `timeout` for the first; returns them and the subscription.
        Live only: what is published while nobody is subscribed is not kept."""
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

    # -- outbox --------------------------------------------------------------------

    async def record_out(
        self,
        run_id: str,
        fence: int,
        key: str,
        record: str,
        intents: Sequence[NewIntent],
        *,
        now: float = 0.0,
        event: StepEvent | None = None,
    ) -> None:
        """`record` plus the step's outbox intents, in the same script (one round trip)."""
        ...

    async def claim_intents(
        self, channels: Sequence[str], limit: int, now: float, lease_ttl: float
    ) -> tuple[list[IntentClaim], float | None]:
        """Lease up to `limit` due intents of `channels` for `lease_ttl` seconds; also
        when the next one is due (or a lease ends). One round trip per partition."""
        ...

    async def settle_intent(
        self,
        claim: IntentClaim,
        outcome: str,
        now: float,
        *,
        due: float | None = None,
        error: str = "",
        event_data: str = "",
    ) -> bool:
        """End a delivery: ``sent``, ``retry`` (at `due`), ``dead`` or ``release``.
        False when the delivery no longer owns the intent (nothing changed)."""
        ...

    async def renew_intents(self, claims: Sequence[IntentClaim], expiry: float) -> list[str]:
        """Extend the leases of deliveries in progress; the ids no longer held."""
        ...

    async def intents(self, run_id: str) -> list[tuple[str, dict[str, str]]] | None:
        """A run's intents (id, stored fields), oldest first; None for no such run."""
        ...

    async def wait_intents(self, channels: Sequence[str], timeout: float) -> bool:
        """Block until an intent of `channels` may be due (or timeout)."""
        ...

    async def close(self) -> None: ...

    def describe(self) -> dict[str, Any]:
        """What this store is, for logs (never secrets)."""
        ...
