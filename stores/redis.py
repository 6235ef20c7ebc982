"""The Redis store: the canonical implementation of the store protocol.

One `RedisStore` wraps one redis-py asyncio client. Clients belong to the
event loop that created them, so make a store inside the loop that uses it
(never at module level). How runs are laid out in Redis (keys in
`stores._keys`, scripts in ``stores/lua``, encodings in `stores._codec`)
stays inside `stores`.

`RedisStore` holds a `StoreCore` (`stores._storecore`: the clients, the key
layout, the scripts and how they are sent, the partition-count check, the
blocking waits) and hands each call of the protocol to one part built over
it, each a plain object that owns its concern:

- `Starts` (`stores._starts`): `create_run`, `create_runs`, `derive_run`;
- `Claims` (`stores._claiming`): `claim`, `poll`, `renew`, `tick`, `quarantine`;
- `FencedWrites` (`stores._writes`): an activation's writes (`record`,
  `record_many`, `consume`, `suspend`, `finish`...);
- `RunReads` (`stores._reads`): runs, lineage, events, checkpoints, the live
  feed, wake-up and finish waits;
- `RunControl` (`stores._control`): signal, audit, cancel, resume, delete;
- `Outbox` (`stores._outbox`), `WorkerBeats` (`stores._workers`),
  `EventDelivery` (`stores._events`), `Schedules` (`stores._schedules`),
  `Queues` (`stores._queuestore`), `AuditLogs` (`stores._audit`): the
  deployment's audit logs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast
from urllib.parse import urlsplit

import redis.asyncio as aioredis

from sdk.store import (
    AuditLog,
    Claim,
    Consumed,
    Delivery,
    EventDelivered,
    EventType,
    EventWatch,
    FlowScope,
    IntentClaim,
    Lineage,
    Mailbox,
    NewIntent,
    NewRun,
    NewSchedule,
    Parked,
    QueueLimits,
    QueueStats,
    Refused,
    Renewal,
    Rewind,
    RunStatus,
    ScheduleFire,
    ScheduleOp,
    StartOutcome,
    StepEvent,
    StoredAuditEntry,
    StoredCheckpoint,
    StoredEvent,
    StoredIntent,
    StoredRun,
    StoredSchedule,
    StoreLimits,
    TickResult,
    WorkerBeat,
)
from stores._audit import AuditLogs
from stores._claiming import Claims
from stores._clients import redact, redis_clients
from stores._cluster import CLUSTER_SCHEMES, DEFAULT_PARTITIONS, cluster_clients
from stores._control import RunControl
from stores._events import EventDelivery
from stores._keys import Keys
from stores._outbox import Outbox
from stores._queuestore import Queues
from stores._reads import RunReads
from stores._redispy import ScriptRunner, unavailable
from stores._schedules import Schedules
from stores._starts import Starts
from stores._storecore import STORE_OPTIONS, StoreCore
from stores._wakeups import ShardedWaits
from stores._workers import WorkerBeats
from stores._writes import FencedWrites

__all__ = ["RedisStore"]


class RedisStore:
    """Steadyflow's storage on Redis (or on fakeredis, for ``memory://``).

    Args:
        client: a redis-py asyncio client created with ``decode_responses=True``
            and ``encoding_errors="surrogateescape"`` (`from_url` and
            ``open_store`` make theirs so): then a stored value that is not
            UTF-8 damages only its run (see ``stores._redispy``).
            Store operations (Lua scripts) go over connections the store keeps
            checked out of its pool, up to half the pool (see ``stores._redispy``);
            a client that does not allow that (Redis Cluster, a single-connection
            client) gets redis-py's own script path.
        prefix: first part of every key; deployments sharing a Redis use different ones.
        partitions: how many hash-tag partitions runs spread over (1 unless on a
            Redis Cluster); every process of a deployment must use the same number.
        max_events_per_run: a run's event log keeps about this many newest events
            (trimmed in blocks of 100; at least 100). Its audit events are kept
            past that in its audit trail (`sdk.store.StoreLimits`).
        max_refusals_per_run: the run's audit trail takes refusals
            (``auth.denied``) while it holds fewer entries than this (1,000).
        max_message_bytes: the largest message a caller may leave in a run's
            mailbox, in bytes of JSON (2 MiB): `PayloadTooLarge` beyond.
        max_pending_messages: messages a run may hold that its flow has not
            taken (1,000), and `max_pending_bytes` their bytes together
            (16 MiB): `MailboxFull` beyond.
        blocking_client: a client for blocking reads (BLPOP wake-ups, BRPOPLPUSH
            result waits, the feed's Pub/Sub), which hold a connection for
            seconds; default `client`. `from_url` gives
            them a pool of their own.

    Each method of the store protocol (`sdk.store.Store`, documented there)
    hands the call to the part that does it (see the module).

    Example::

        store = RedisStore.from_url("redis://localhost:6379/0")
    """

    def __init__(
        self, client: aioredis.Redis, *, prefix: str = "sf", partitions: int = 1,
        blocking_client: aioredis.Redis | None = None, max_events_per_run: int = 10_000,
        max_refusals_per_run: int = 1_000, max_message_bytes: int = 2 * 1024 * 1024,
        max_pending_messages: int = 1_000, max_pending_bytes: int = 16 * 1024 * 1024,
    ) -> None:  # fmt: skip
        limits = StoreLimits(
            max_events_per_run=max_events_per_run,
            max_refusals_per_run=max_refusals_per_run,
            max_message_bytes=max_message_bytes,
            max_pending_messages=max_pending_messages,
            max_pending_bytes=max_pending_bytes,
        )
        core = StoreCore(
            client,
            prefix=prefix,
            partitions=partitions,
            blocking_client=blocking_client,
            limits=limits,
        )
        self._core = core
        self._starts = Starts(core)
        self._claims = Claims(core)
        self._writes = FencedWrites(core)
        self._reads = RunReads(core)
        self._control = RunControl(core)
        self._outbox = Outbox(core)
        self._workers = WorkerBeats(core)
        self._events = EventDelivery(core)
        self._schedules = Schedules(core)
        self._queues = Queues(core)
        self._audit = AuditLogs(core)
        #: What `describe` calls the store (its URL without a password).
        self._label = "redis"

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str = "sf", partitions: int | None = None, **kwargs: Any
    ) -> RedisStore:
        """A store on a ``redis://``, ``rediss://`` (TLS), ``unix://`` or Redis
        Cluster (``redis+cluster://``, ``rediss+cluster://``) URL.

        User, password and database come from the URL. ``max_connections``
        (default 64) bounds the connections for script calls (every store
        operation), and as many again for other commands: the pool holds up
        to twice that, and a command waits for a free connection rather than
        failing. ``max_events_per_run``, ``max_refusals_per_run``,
        ``max_message_bytes``, ``max_pending_messages`` and ``max_pending_bytes``
        are the store's own (see the class).
        Other keyword arguments go to redis-py's connection pool
        (``ssl_ca_certs=...``, ``socket_timeout=...``).

        A cluster URL names one or more nodes,
        ``redis+cluster://[user:password@]host:port[,host:port...]``; the
        client finds the others. `partitions` defaults to 1, and to 16 on a
        cluster (`stores._cluster`, docs/operations.md#redis-cluster-and-partitions).
        """
        scheme = urlsplit(url).scheme
        # Options of the store itself, not of the connection pool.
        caps = {k: kwargs.pop(k) for k in STORE_OPTIONS if k in kwargs}
        StoreLimits(**caps)  # checked before any client or pool exists
        if scheme in CLUSTER_SCHEMES:
            partitions = DEFAULT_PARTITIONS if partitions is None else partitions
            Keys(prefix, partitions)  # checked before any client is made
            found = cluster_clients(url, **kwargs)
            # Typed as a Redis: the cluster client answers the same commands.
            client, blocking = cast("tuple[aioredis.Redis, aioredis.Redis]", found)
        else:
            if scheme not in ("redis", "rediss", "unix"):
                raise ValueError(f"unsupported store URL scheme {scheme!r} in {redact(url)!r}")
            client, blocking = redis_clients(url, **kwargs)
            partitions = 1 if partitions is None else partitions
        store = cls(client, prefix=prefix, partitions=partitions, blocking_client=blocking, **caps)
        store._label = redact(url)
        return store

    # -- what the core holds ------------------------------------------------------

    @property
    def client(self) -> aioredis.Redis:
        """The client for commands and script calls."""
        return self._core.client

    @property
    def blocking_client(self) -> aioredis.Redis:
        """The client for blocking reads (`client` unless given one)."""
        return self._core.blocking_client

    @property
    def keys(self) -> Keys:
        """The store's key names (`stores._keys`)."""
        return self._core.keys

    @property
    def cluster(self) -> bool:
        """Whether `client` is a Redis Cluster client."""
        return self._core.cluster

    @property
    def max_events_per_run(self) -> int:
        """About how many newest events a run's event log keeps."""
        return self._core.max_events_per_run

    @property
    def limits(self) -> StoreLimits:
        """The bounds this store holds each run to (its options)."""
        return self._core.limits

    @property
    def _scripts(self) -> dict[str, Any]:
        """The store's scripts by name (redis-py script objects: their SHA, their source)."""
        return self._core.scripts

    @property
    def _runner(self) -> ScriptRunner:
        """How script calls are sent (a benchmark may swap it)."""
        return self._core.runner

    @_runner.setter
    def _runner(self, runner: ScriptRunner) -> None:
        self._core.runner = runner

    @property
    def _waits(self) -> ShardedWaits | None:
        """The cluster wake-up waits, once the first wait made them."""
        return self._core.waits

    def describe(self) -> dict[str, Any]:
        return {
            "store": self._label,
            "prefix": self._core.keys.prefix,
            "partitions": self._core.keys.partitions,
        }

    async def close(self) -> None:
        await self._core.close()

    def is_unavailable(self, error: BaseException) -> bool:
        return unavailable(error)

    def key_of(self, run_id: str, part: str) -> str:
        return self._core.key(part, run_id)

    # -- runs -------------------------------------------------------------------

    async def create_run(
        self, new: NewRun, event_data: str = "", *, max_pending: int | None = None
    ) -> StartOutcome:
        return await self._starts.create_run(new, event_data, max_pending=max_pending)

    async def create_runs(
        self, news: Sequence[NewRun], event_data: Sequence[str]
    ) -> list[StartOutcome]:
        return await self._starts.create_runs(news, event_data)

    async def derive_run(
        self, new: NewRun, journal: Sequence[tuple[str, str]], lineage: Sequence[tuple[str, str]],
        event_type: EventType, event_data: str, mail: Sequence[tuple[Mailbox, str, str]] = (),
    ) -> Refused | None:  # fmt: skip
        return await self._starts.derive_run(new, journal, lineage, event_type, event_data, mail)

    async def get_run(self, run_id: str) -> StoredRun | None:
        return await self._reads.get_run(run_id)

    async def get_tombstone(self, run_id: str) -> StoredRun | None:
        return await self._reads.get_tombstone(run_id)

    async def read_lineage(self, run_id: str) -> Lineage | None:
        return await self._reads.read_lineage(run_id)

    async def list_runs(
        self, status: RunStatus | None, flow: str | None, limit: int, *,
        parent_run_id: str | None = None,
    ) -> list[StoredRun]:  # fmt: skip
        return await self._reads.list_runs(status, flow, limit, parent_run_id=parent_run_id)

    # -- claims and leases ----------------------------------------------------------

    async def claim(
        self, owner: str, queues: Sequence[str] | None, limit: int, now: float, lease_ttl: float,
        *, flows: Sequence[FlowScope] | None = None, limits: Sequence[QueueLimits] = (),
    ) -> list[Claim]:  # fmt: skip
        return await self._claims.claim(
            owner, queues, limit, now, lease_ttl, flows=flows, limits=limits
        )

    async def poll(
        self, owner: str, queues: Sequence[str] | None, limit: int, now: float, lease_ttl: float,
        max_recoveries: int, recovery_error: str, *, flows: Sequence[FlowScope] | None = None,
        limits: Sequence[QueueLimits] = (),
    ) -> tuple[list[Claim], TickResult]:  # fmt: skip
        return await self._claims.poll(
            owner, queues, limit, now, lease_ttl, max_recoveries, recovery_error,
            flows=flows, limits=limits,
        )  # fmt: skip

    async def renew(self, leases: Sequence[tuple[str, int]], expiry: float) -> Renewal:
        return await self._claims.renew(leases, expiry)

    async def tick(
        self, now: float, max_recoveries: int, recovery_error: str, limit: int = 100
    ) -> TickResult:
        return await self._claims.tick(now, max_recoveries, recovery_error, limit)

    async def quarantine(self, run_id: str, fence: int | None, now: float, error: str) -> bool:
        return await self._claims.quarantine(run_id, fence, now, error)

    # -- an activation's writes -------------------------------------------------------

    async def record(
        self, run_id: str, fence: int, key: str, record: str, *, now: float = 0.0,
        event: StepEvent | None = None, intents: Sequence[NewIntent] = (),
    ) -> bool:  # fmt: skip
        return await self._writes.record(
            run_id, fence, key, record, now=now, event=event, intents=intents
        )

    async def record_many(
        self, run_id: str, fence: int, records: Sequence[tuple[str, str]], *, now: float,
        events: Sequence[StepEvent | None],
    ) -> bool:  # fmt: skip
        return await self._writes.record_many(run_id, fence, records, now=now, events=events)

    async def mark(self, run_id: str, fence: int, key: str, now: float) -> bool:
        return await self._writes.mark(run_id, fence, key, now)

    async def consume(
        self, run_id: str, fence: int, key: str, mailbox: Mailbox, now: float,
        deadline: float | None, record: str, timeout_record: str, *,
        watch: EventWatch | None = None,
    ) -> tuple[Consumed, str | None]:  # fmt: skip
        return await self._writes.consume(
            run_id, fence, key, mailbox, now, deadline, record, timeout_record, watch=watch
        )

    async def suspend(
        self, run_id: str, fence: int, now: float, deadline: float | None, status: RunStatus,
        records: Sequence[tuple[str, str]], mailboxes: Sequence[Mailbox], *,
        approvers: Mapping[Mailbox, Sequence[str]] | None = None, sticky: float | None = None,
        waiting_on: str | None = None,
    ) -> Parked:  # fmt: skip
        return await self._writes.suspend(
            run_id, fence, now, deadline, status, records, mailboxes,
            approvers=approvers, sticky=sticky, waiting_on=waiting_on,
        )  # fmt: skip

    async def finish(
        self, run_id: str, fence: int, status: RunStatus, now: float, *, result: str | None = None,
        result_type: str | None = None, error: str | None = None, reason: str | None = None,
        retention: float | None = None, delete_until: float | None = None,
    ) -> Refused | None:  # fmt: skip
        return await self._writes.finish(
            run_id, fence, status, now, result=result, result_type=result_type, error=error,
            reason=reason, retention=retention, delete_until=delete_until,
        )  # fmt: skip

    async def continue_as_new(
        self, run_id: str, fence: int, now: float, args: str, event_data: str, archive_data: str
    ) -> Refused | None:
        return await self._writes.continue_as_new(
            run_id, fence, now, args, event_data, archive_data
        )

    async def release(self, run_id: str, fence: int) -> None:
        await self._writes.release(run_id, fence)

    # -- what clients do -------------------------------------------------------------

    async def signal(
        self, run_id: str, mailbox: Mailbox, payload: str, dedup_id: str | None, *,
        now: float = 0.0, event_data: str = "", decision_by: str | None = None,
    ) -> bool | Refused:  # fmt: skip
        return await self._control.signal(
            run_id, mailbox, payload, dedup_id,
            now=now, event_data=event_data, decision_by=decision_by,
        )  # fmt: skip

    async def audit(
        self, run_id: str, event_type: EventType, now: float, event_data: str
    ) -> Refused | None:
        return await self._control.audit(run_id, event_type, now, event_data)

    async def cancel(
        self, run_id: str, reason: str, now: float, *, event_data: str = "",
        grace_until: float | None = None, request_data: str = "", forced_data: str = "",
        forcing_data: str = "",
    ) -> Refused | None:  # fmt: skip
        return await self._control.cancel(
            run_id, reason, now, event_data=event_data, grace_until=grace_until,
            request_data=request_data, forced_data=forced_data, forcing_data=forcing_data,
        )  # fmt: skip

    async def resume(
        self, run_id: str, discard_key: str | None, *, now: float = 0.0, event_data: str = "",
        version: str | None = None, rewind: Rewind | None = None,
    ) -> Refused | None:  # fmt: skip
        return await self._control.resume(
            run_id, discard_key, now=now, event_data=event_data, version=version, rewind=rewind
        )

    async def delete(
        self, run_id: str, now: float, *, event_data: str = "", audit_data: str = ""
    ) -> Refused | None:
        return await self._control.delete(run_id, now, event_data=event_data, audit_data=audit_data)

    # -- the deployment's audit logs -----------------------------------------------------

    async def append_audit(
        self, log: AuditLog, event_type: EventType, now: float, data: str, *,
        run_id: str | None = None, schedule_id: str | None = None,
    ) -> None:  # fmt: skip
        await self._audit.append_audit(
            log, event_type, now, data, run_id=run_id, schedule_id=schedule_id
        )

    async def audit_log(
        self, log: AuditLog, cursor: str | None, limit: int
    ) -> list[StoredAuditEntry]:
        return await self._audit.audit_log(log, cursor, limit)

    # -- a run's history, and waits ------------------------------------------------------

    async def events(self, run_id: str, cursor: str | None, limit: int) -> list[StoredEvent]:
        return await self._reads.events(run_id, cursor, limit)

    async def checkpoints(self, run_id: str) -> list[StoredCheckpoint]:
        return await self._reads.checkpoints(run_id)

    async def approvers(self, run_id: str) -> dict[Mailbox, tuple[str, ...]]:
        return await self._reads.approvers(run_id)

    async def correlation(self, run_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        return await self._reads.correlation(run_ids)

    async def follow(
        self, subscription: Any, timeout: float, count: int
    ) -> tuple[list[StoredEvent], Any]:
        return await self._reads.follow(subscription, timeout, count)

    async def unfollow(self, subscription: Any) -> None:
        await self._reads.unfollow(subscription)

    async def wait_ready(
        self, queues: Sequence[str] | None, timeout: float, *, owner: str | None = None
    ) -> bool:
        return await self._reads.wait_ready(queues, timeout, owner=owner)

    async def wait_finished(self, run_id: str, timeout: float) -> bool:
        return await self._reads.wait_finished(run_id, timeout)

    # -- the outbox ------------------------------------------------------------------

    async def claim_intents(
        self, channels: Sequence[str], limit: int, now: float, lease_ttl: float
    ) -> tuple[list[IntentClaim], float | None]:
        return await self._outbox.claim_intents(channels, limit, now, lease_ttl)

    async def settle_intent(
        self, claim: IntentClaim, outcome: Delivery, now: float, *, due: float | None = None,
        error: str = "", event_data: str = "",
    ) -> bool:  # fmt: skip
        return await self._outbox.settle_intent(
            claim, outcome, now, due=due, error=error, event_data=event_data
        )

    async def renew_intents(self, claims: Sequence[IntentClaim], expiry: float) -> list[str]:
        return await self._outbox.renew_intents(claims, expiry)

    async def intents(self, run_id: str) -> list[StoredIntent] | None:
        return await self._outbox.intents(run_id)

    async def wait_intents(self, channels: Sequence[str], timeout: float) -> bool:
        return await self._outbox.wait_intents(channels, timeout)

    # -- live workers, events, schedules, queues --------------------------------------

    async def beat(self, beat: WorkerBeat) -> None:
        await self._workers.beat(beat)

    async def forget_worker(self, worker_id: str) -> None:
        await self._workers.forget_worker(worker_id)

    async def workers(self, now: float) -> list[WorkerBeat]:
        return await self._workers.workers(now)

    async def event_shapes(self, event: str) -> set[str]:
        return await self._events.event_shapes(event)

    async def event_listeners(self, tokens: Sequence[str]) -> list[tuple[str, str]]:
        return await self._events.event_listeners(tokens)

    async def deliver_event(
        self, run_id: str, token: str, mailbox: Mailbox, payload: str, dedup_id: str, *,
        now: float, event_data: str,
    ) -> EventDelivered | Refused:  # fmt: skip
        return await self._events.deliver_event(
            run_id, token, mailbox, payload, dedup_id, now=now, event_data=event_data
        )

    def schedule_run_id(self, run_id: str) -> str:
        return self._schedules.schedule_run_id(run_id)

    async def save_schedule(
        self, new: NewSchedule, *, replace: bool, now: float, audit_data: str = ""
    ) -> int:
        return await self._schedules.save_schedule(
            new, replace=replace, now=now, audit_data=audit_data
        )

    async def schedule_op(
        self, schedule_id: str, op: ScheduleOp, now: float, next_at: float | None = None, *,
        audit_data: str = "",
    ) -> bool:  # fmt: skip
        return await self._schedules.schedule_op(
            schedule_id, op, now, next_at, audit_data=audit_data
        )

    async def schedules(self, schedule_ids: Sequence[str] | None = None) -> list[StoredSchedule]:
        return await self._schedules.schedules(schedule_ids)

    async def due_schedules(
        self, flows: Sequence[str], now: float
    ) -> tuple[list[StoredSchedule], float | None]:
        return await self._schedules.due_schedules(flows, now)

    async def fire_schedules(self, fires: Sequence[ScheduleFire]) -> list[list[str] | None]:
        return await self._schedules.fire_schedules(fires)

    async def queue_stats(
        self, queues: Sequence[str], limits: Sequence[QueueLimits], now: float
    ) -> list[QueueStats]:
        return await self._queues.queue_stats(queues, limits, now)
