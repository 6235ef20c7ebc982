"""The client: start runs, read them, signal, approve, cancel, resume, delete.

`Client` is what users hold; it documents every operation and hands each to
the part that does it, all built in its `__init__` over one `ClientCore`
(`sdk.client._clientcore`: the store, clock, registry, serializer, authorizer
and interceptors, and the helpers every part needs):

- `RunStarter` (`sdk.client._starting`): `start`;
- `RunSteering` (`sdk.client._steering`): signals, decisions, cancel, resume, delete;
- `RunHistory` (`sdk.client._history`): events, checkpoints, approvers, intents, follow;
- `RunDeriver` (`sdk.client._lineage`): replay and fork;
- `EventSender` (`sdk.client._sending`): `send_event` (it starts runs with the starter);
- `QueueReport` (`sdk.client._queuing`) and `Schedules` (`sdk.client._schedclient`);
- `Exporter` (`sdk.client._export`): `export`;
- `AuditTrail` (`sdk.client._audit`): `audit_log`.

`get`, `list_runs`, `handle` and `workers` are small enough to be here.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import cattrs

from sdk._core._checks import (
    check_count,
    check_id,
    check_optional_id,
    check_status,
    check_wait_kind,
)
from sdk._core._clock import Clock, SystemClock
from sdk._core._types import (
    AuditEntry,
    Checkpoint,
    Event,
    RunOptions,
    RunRecord,
    RunStatus,
    WaitKind,
    WorkerInfo,
)
from sdk._core._values import Serializer
from sdk._core._waiting import runs_waiting_on
from sdk.client._audit import AuditTrail
from sdk.client._clientcore import Authorizer, ClientCore
from sdk.client._export import Exporter, Redact
from sdk.client._handle import RunHandle
from sdk.client._history import RunHistory
from sdk.client._lineage import RunDeriver
from sdk.client._queuing import QueueReport
from sdk.client._runs import DEFAULT_CANCEL_GRACE
from sdk.client._schedclient import Schedules
from sdk.client._sending import EventSender
from sdk.client._starting import RunStarter
from sdk.client._steering import RunSteering
from sdk.model._flowdef import FlowDef
from sdk.model._intercept import Interceptor
from sdk.model._registry import Registry

if TYPE_CHECKING:
    from sdk.model._channels import Intent
    from sdk.model._queues import QueueInfo
    from sdk.model._schedules import ScheduleInfo
    from sdk.store import Store

__all__ = ["Authorizer", "Client", "RunHandle"]


class Client:
    """Starts and steers runs.

    Args:
        store: where runs live (see `stores.open_store`).
        authorizer: optional `Authorizer`; with one, privileged calls need an actor.
        clock: injected clock (tests pass a `FakeClock`).
        registry: where flow names are looked up, to encode a start's arguments
            and rebuild results into their types (default: `Registry.default()`).
        converter: how values become JSON: a `Serializer`, or a cattrs converter
            (wrapped in one); the workers must use the same (default:
            `Serializer.default()`).
        interceptors: hooks `start` calls before it creates a run (e.g.
            `sdk.otel.OtelInterceptor`, which records the caller's trace context).

    Example::

        client = Client(open_store("redis://localhost:6379/0"))
        handle = await client.start(checkout, "order-42", run_id="checkout-order-42")
        print(await handle.result(timeout=60))
    """

    def __init__(
        self,
        store: Store,
        authorizer: Authorizer | None = None,
        *,
        clock: Clock | None = None,
        registry: Registry | None = None,
        converter: Serializer | cattrs.Converter | None = None,
        interceptors: Sequence[Interceptor] = (),
    ) -> None:
        self._core = core = ClientCore(
            store,
            authorizer,
            clock or SystemClock(),
            registry if registry is not None else Registry.default(),
            Serializer.of(converter),
            interceptors,
        )
        self._starter = RunStarter(core)
        self._steering = RunSteering(core)
        self._history = RunHistory(core)
        self._deriver = RunDeriver(core)
        self._events = EventSender(core, self._starter)
        self._queues = QueueReport(core)
        self._schedules = Schedules(core)
        self._exporter = Exporter(core)
        self._audit = AuditTrail(core)

    # What the client was made with; every part reads it from the core, so setting
    # one here changes it for all of them.

    @property
    def store(self) -> Store:
        """Where runs live."""
        return self._core.store

    @store.setter
    def store(self, store: Store) -> None:
        self._core.store = store

    @property
    def authorizer(self) -> Authorizer | None:
        """Who may do what (None: anyone may do anything)."""
        return self._core.authorizer

    @authorizer.setter
    def authorizer(self, authorizer: Authorizer | None) -> None:
        self._core.authorizer = authorizer

    @property
    def clock(self) -> Clock:
        """The clock the client dates what it writes with."""
        return self._core.clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self._core.clock = clock

    @property
    def registry(self) -> Registry:
        """Where flow names are looked up."""
        return self._core.registry

    @registry.setter
    def registry(self, registry: Registry) -> None:
        self._core.registry = registry

    @property
    def serializer(self) -> Serializer:
        """How values become JSON and back."""
        return self._core.serializer

    @serializer.setter
    def serializer(self, serializer: Serializer) -> None:
        self._core.serializer = serializer

    @property
    def interceptors(self) -> list[Interceptor]:
        """The hooks `start` calls around creating a run."""
        return self._core.interceptors

    @interceptors.setter
    def interceptors(self, interceptors: list[Interceptor]) -> None:
        self._core.interceptors = interceptors

    # -- starting -----------------------------------------------------------------

    async def start(
        self,
        flow: Callable[..., Any] | str,
        *args: Any,
        run_id: str | None = None,
        priority: int = 0,
        queue: str | None = None,
        tenant_id: str | None = None,
        options: RunOptions | None = None,
        concurrency_key: str | None = None,
        start_at: datetime | None = None,
        start_in: float | timedelta | None = None,
        actor: str | None = None,
        **kwargs: Any,
    ) -> RunHandle:
        """Start a run of `flow` (a `@flow` function or a registered flow name).

        Starting the same `run_id` again returns the existing run; with other
        arguments it raises `IdempotencyConflict`. Arguments that cannot be
        stored raise `SerializationError` before anything is written.

        Args:
            run_id: your id for the run (default: a random UUID).
            priority: lower runs first (-4095..4095); FIFO within a priority.
            queue: default the flow's queue.
            tenant_id: recorded on the run (and on each of its events).
            options: `RunOptions`: thread, trace id, environment, versions, policy
                snapshot, recorded on the run.
            concurrency_key: counted against the queue's ``key_concurrency``
                (e.g. a tenant id: one tenant cannot take every slot).
            start_at: a timezone-aware datetime: the run stays ``pending`` on a
                durable timer until then, and is queued then.
            start_in: the same, in seconds (or a `timedelta`) from now. Not with
                `start_at`.
            actor: who starts it, recorded in the ``run.created`` event. With an
                authorizer, a start that names an actor is put to it (action
                ``start``, about the record of the run to be created); one that
                names none is your application's own and is not asked.

        Raises:
            QueueFull: the queue holds its ``Queue(max_pending=...)`` ready runs
                (the queue as declared in the client's registry); nothing was written.
            Forbidden: the authorizer refused ``start``: nothing was written but
                an ``auth.denied`` entry in the audit log's refusals (`audit_log`).
        """
        handle, _ = await self._starter.start(
            flow, args, kwargs, run_id=run_id, priority=priority, queue=queue,
            tenant_id=tenant_id, options=options, concurrency_key=concurrency_key,
            start_at=start_at, start_in=start_in, actor=actor,
        )  # fmt: skip
        return handle

    # -- reading ------------------------------------------------------------------

    async def get(self, run_id: str) -> RunRecord:
        """The run's record. Raises `RunNotFound` for an unknown id."""
        return self._core.record(await self._core.stored(run_id))

    async def list_runs(
        self, status: RunStatus | str | None = None, flow: Callable[..., Any] | str | None = None,
        limit: int = 100, *, parent_run_id: str | None = None,
        waiting_on: WaitKind | str | None = None,
    ) -> list[RunRecord]:  # fmt: skip
        """Runs, newest first, optionally of one status and/or one flow; with
        `parent_run_id`, only the child flows that run started (`start_child`);
        with `waiting_on` (a `WaitKind`: ``"human"``, ``"signal"``, ``"event"``,
        ``"child"``, ``"sleep"``, ``"retry"``...), only the waiting runs whose
        `RunRecord.waiting_on` has an entry of that kind.

        Example::

            approvals = await client.list_runs(waiting_on="human", flow=refund)
        """
        st = None if status is None else check_status(status)
        check_count(limit, "list_runs(): limit")
        check_optional_id(parent_run_id, "list_runs(): parent_run_id")
        kind = (
            None if waiting_on is None else check_wait_kind(waiting_on, "list_runs(): waiting_on")
        )
        name = None
        if flow is not None:
            fd = self._core.flow_def(flow)
            name = fd.name if isinstance(fd, FlowDef) else fd

        async def read(of: RunStatus | None, n: int) -> list[RunRecord]:
            found = await self._core.store.list_runs(of, name, n, parent_run_id=parent_run_id)
            return [self._core.record(s) for s in found]

        if kind is None:
            return await read(st, limit)
        return await runs_waiting_on(read, kind, st, limit)

    def handle(self, run_id: str) -> RunHandle:
        """A handle on an existing run (no round trip)."""
        return RunHandle(self._core, check_id(run_id, "run_id"))

    async def workers(self) -> list[WorkerInfo]:
        """The workers alive on this store and prefix, from their heartbeats.

        A worker serving (`Worker.run`, ``steadyflow worker``) renews its
        registration every third of its lease TTL and drops it when it stops;
        one that died counts as alive until its last registration expires
        (one lease TTL).
        """
        return await self._core.workers()

    # -- steering -----------------------------------------------------------------

    async def signal(
        self, run_id: str, name: str, payload: Any = None, *,
        dedup_id: str | None = None, actor: str | None = None,
    ) -> bool:  # fmt: skip
        """Send the signal `name` to a run; kept until a `wait_for(name)` consumes it.

        Returns False when `dedup_id` was already delivered to this run, in any
        status (also once the run ended: a retried delivery is answered as a
        duplicate). Raises `InvalidTransition` for a new signal to a terminal
        run (nothing is written) and `RunNotFound` for an unknown one.
        """
        return await self._steering.signal(run_id, name, payload, dedup_id, actor)

    async def approve(
        self, run_id: str, name: str, *, actor: str, reason: str | None = None, payload: Any = None
    ) -> bool:
        """Approve the human wait `name`: its `wait_for` returns a `Decision(approved=True)`."""
        return await self._steering.decide(run_id, name, True, actor, reason, payload, "approve")

    async def deny(
        self, run_id: str, name: str, *, actor: str, reason: str | None = None, payload: Any = None
    ) -> bool:
        """Deny the human wait `name`: its `wait_for` returns a `Decision(approved=False)`."""
        return await self._steering.decide(run_id, name, False, actor, reason, payload, "deny")

    async def cancel(
        self,
        run_id: str,
        *,
        reason: str,
        actor: str | None = None,
        grace: float | timedelta = DEFAULT_CANCEL_GRACE,
    ) -> None:
        """Cancel a run that has not ended; the flow may clean up first, for up to `grace`.

        A run that has started (running, replaying, waiting) gets a durable
        cancel *request* (event ``run.cancel_requested``): at its next
        activation (a waiting run is woken for it; a running one learns of it
        at its worker's next heartbeat, within about ``lease_ttl / 3``) the
        flow gets ``asyncio.CancelledError`` at the await it is parked on. A
        step executing then is interrupted (its task gets ``CancelledError``,
        nothing of it is recorded) and the flow gets ``CancelledError`` at that
        step's await. Its ``except asyncio.CancelledError:`` / ``finally:``
        blocks may run compensation steps, waits and sleeps, journaled like any
        others; whatever the flow then does (re-raises, returns, raises), the
        run ends ``canceled`` with this `reason` (a value it returned is kept
        as the run's result, an error it raised as its error). A flow that ends
        before the cancel reaches it keeps its own outcome.

        The cancel is forced (the run ends ``canceled`` at once, its activation
        fenced out, its pending outbox intents canceled) when the grace period
        runs out, by a second `cancel` of a run that has a request (the
        request's reason is kept), with ``grace=0``, and for a ``pending`` run
        (no flow code has run). A terminal run raises `InvalidTransition`.

        Args:
            reason: why; the run's `RunRecord.reason`.
            actor: who cancels (required when the client has an authorizer).
            grace: seconds or a `timedelta` the flow has to clean up after it is
                asked to stop (default 30 seconds); 0 cancels at once.

        Example::

            await client.cancel(run_id, reason="customer left", grace=60)
        """
        await self._steering.cancel(run_id, reason, actor, grace)

    async def resume(
        self,
        run_id: str,
        *,
        force: bool = False,
        actor: str | None = None,
        version: str | None = None,
    ) -> RunHandle:
        """Continue a failed, canceled or waiting run from its checkpoint.

        A waiting run continues from its checkpoint head; a failed run from
        its newest checkpoint before it finished; a canceled run from its
        newest checkpoint before its flow was given the cancel. A failed run's
        recorded failure (of the step that failed, when a step failed) is
        discarded so that step runs again; a canceled run's cancel and what
        its cleanup recorded after it are discarded, so it is not canceled
        again; every other recorded step is kept and not re-run. A run that
        failed on non-determinism resumes with the fixed code. The one audited
        way out of a terminal status.

        Args:
            force: skip re-evaluating the run's policy: the authorizer is asked
                for ``force_resume`` instead of ``resume``, and the
                ``run.resumed`` event records ``force: true``.
            actor: who resumes (required when the client has an authorizer).
            version: move the run onto this version of its flow (version
                routing: docs/changing-flows.md): from then on only workers
                serving the flow at `version` execute it, replaying its journal
                on that code. Also accepted for a run stuck queued (``pending``,
                or ``replaying`` after its lease expired) because no worker serves
                its version: it keeps its place in the queue. The authorizer is
                asked for ``resume`` (``force_resume``) as usual, and the
                ``run.resumed`` event records the old and new versions.

        Example::

            await client.resume(run_id, version="2024-06-01", actor="ops@example.com")
        """
        return await self._steering.resume(run_id, force, actor, version)

    async def delete(self, run_id: str, *, actor: str | None = None) -> None:
        """Delete a finished run and all of its data, at once and for good.

        Deletes the record, journal, event log, checkpoints, mailboxes, dedup
        ids and lineage of the run and takes it off every index; the run id is
        free again. Its event log goes with it; the deletion itself is recorded
        outside it, by the same atomic write: a ``run.deleted`` entry in the
        deployment's audit log (`audit_log`: who, and the run's flow, status,
        tenant and creation time), and the ``run.deleted`` event on the live feed
        (`follow`). With an authorizer, `actor` needs ``delete``.

        Raises:
            InvalidTransition: the run has not finished (pending, running,
                waiting...): nothing is deleted. Cancel it first.
            RunNotFound: no such run.
            Forbidden: the authorizer refused ``delete`` (audited as ``auth.denied``).
        """
        await self._steering.delete(run_id, actor)

    async def audit_log(
        self, *, cursor: str | None = None, limit: int = 100, refusals: bool = False
    ) -> list[AuditEntry]:
        """A page of the deployment's audit log, oldest first: what is kept apart
        from the runs' own logs, so that it outlives them.

        The changes log (default) holds each run deletion (``run.deleted``) and
        each schedule operation (``schedule.created``, ``schedule.paused``,
        ``schedule.resumed``, ``schedule.deleted``, ``schedule.triggered``), with
        its actor. With ``refusals=True``, the refusals log: the ``auth.denied``
        of starts and schedule operations (a refusal about an existing run is in
        that run's own log). They are apart so that refusals, which anyone can
        provoke, never push changes out: each keeps at least its newest
        ``sdk.store.MAX_AUDIT_ENTRIES`` (100,000) entries per store partition.

        Pass the last `AuditEntry.entry_id` as `cursor` for the next page; every
        entry comes exactly once across pages.

        Example::

            for entry in await client.audit_log():
                print(entry.at, entry.type, entry.actor, entry.run_id or entry.schedule_id)
        """
        return await self._audit.audit_log(cursor, limit, refusals)

    # -- history ------------------------------------------------------------------

    async def events(
        self, run_id: str, *, cursor: str | None = None, limit: int = 100
    ) -> list[Event]:
        """A page of the run's event log, oldest first.

        Pass the last `Event.event_id` as `cursor` for the next page; every
        event comes exactly once across pages. Raises `RunNotFound`, and
        `CorruptRecord` when the log, or an entry of the page, cannot be read
        (it names the entry: pass its id as `cursor` to read on after it).
        """
        return await self._history.events(run_id, cursor, limit)

    async def checkpoints(self, run_id: str) -> list[Checkpoint]:
        """The run's checkpoints, oldest first. Raises `RunNotFound`, and
        `CorruptRecord` when they cannot be read."""
        return await self._history.checkpoints(run_id)

    async def approvers(self, run_id: str) -> dict[str, tuple[str, ...]]:
        """Who may decide the human waits the run is parked on: wait name -> the
        actors its ``wait_for(..., human=True, approvers=[...])`` names. A human
        wait without `approvers` is not listed (the client's `Authorizer` alone
        decides it); empty when the run is not parked on one. Raises
        `RunNotFound`, and `CorruptRecord` when they cannot be read."""
        return await self._history.approvers(run_id)

    async def intents(self, run_id: str) -> list[Intent]:
        """The run's outbox intents (`emit`), in the order they were recorded, with
        their delivery status. Raises `RunNotFound` (also for a deleted run)."""
        return await self._history.intents(run_id)

    async def follow(self, *, poll_timeout: float = 5.0) -> AsyncIterator[Event]:
        """Every run's events as they happen (from now on), for dashboards and tools.

        An endless async iterator; break out of it (or cancel the task) to stop.
        Live only (Redis Pub/Sub): events published while no follower is
        connected are not kept for it; each run's own log (`events`) is the
        durable record, and the way to catch up.

        Example::

            async for event in client.follow():
                print(event.run_id, event.type)
        """
        async with contextlib.aclosing(self._history.follow(poll_timeout)) as events:
            async for event in events:
                yield event

    # -- replay and fork ----------------------------------------------------------

    async def replay(
        self,
        run_id: str,
        *,
        checkpoint_id: str | None = None,
        actor: str | None = None,
        new_run_id: str | None = None,
        children: str = "reuse",
    ) -> RunHandle:
        """Re-execute a run as a new run from one of its checkpoints (default: the first).

        The source is never changed. The new run's journal holds the source's
        records up to the checkpoint (replayed as they are); after it, each step
        follows its `replay` policy: ``use_recorded_result`` reuses the source's
        result (event ``side_effect.reused``; `IdempotencyConflict` if the step is
        now called with other arguments), ``require_human`` waits for the
        approval ``replay:{step_key}`` (a denial reuses the result),
        ``reexecute`` runs it again. ``now()``/``uuid4()`` values are reused;
        waits and sleeps wait again. Idempotency keys stay those of the lineage's
        first run, so a re-executed side effect can be deduplicated remotely.
        From the finish of a failed run, the failure that failed it is left out
        (as `resume` discards it), so the failing call runs again.

        `children` says what the new run does with the child runs the source
        started: ``"reuse"`` (default) reuses a child that completed (none of
        its steps runs again; the new run's handle is the source's child, and
        ``result()`` returns its recorded result) and replays the others;
        ``"replay"`` replays every child as a new child of the new run (its
        recorded step results reused under their policies, its own children
        under the same option); ``"rerun"`` starts every child afresh.
        """
        return await self._deriver.replay(run_id, checkpoint_id, actor, new_run_id, children)

    async def fork(
        self,
        run_id: str,
        *,
        checkpoint_id: str | None = None,
        actor: str | None = None,
        new_run_id: str | None = None,
        children: str = "reuse",
        **options: Any,
    ) -> RunHandle:
        """Like `replay`, from a checkpoint (default: the head), with other options.

        Options: ``queue``, ``priority``, ``tenant_id``, ``flow_version``,
        ``retry`` (a `RetryPolicy` replacing the flow's default), and the
        `RunOptions` fields ``environment``, ``thread_id``, ``trace_id``,
        ``versions``, ``policy_snapshot_id``. With an authorizer, the actor needs
        ``fork``, and the authorizer's optional ``can_fork(actor, run, options)``
        (the environment's policy) must not refuse the changed options.
        """
        return await self._deriver.fork(run_id, checkpoint_id, actor, new_run_id, children, options)

    # -- events -------------------------------------------------------------------

    async def send_event(
        self, name: str, data: Any = None, *, event_id: str | None = None,
        actor: str | None = None,
    ) -> list[str]:  # fmt: skip
        """Send the event `name`: deliver it to every run whose ``wait_for_event(name,
        match=...)`` is listening with a filter `data` satisfies, and start one run
        of each ``@flow(on_event=name)`` flow this client's registry knows.

        It reads the filters in use for `name` and the runs listening with the
        ones `data` satisfies (one round trip per partition each), then
        delivers to each of those runs in a call of its own (concurrently). A
        wait that began after the event was sent does not get it.

        Args:
            name: the event's name.
            data: its data: a JSON object (field -> value; ``wait_for_event``
                filters match its top-level fields) or None. Anything else (a
                string, a number, a list) no filter could match: `InvalidArgument`.
            event_id: de-duplicates: an event id reaches each listening wait at
                most once, and starts each ``on_event`` flow at most once (run id
                ``f"{flow name}:{event_id}"``), so sending it again (a retried
                webhook, or a send cut short by a crash) delivers only what the
                first send did not. Default: a new random id.
            actor: who sends; required with an authorizer, which is asked for
                ``send_event`` on each run the event would reach (a refused run
                does not get it and logs ``auth.denied``).

        Returns:
            The ids of the runs this call delivered the event to (sorted), then
            of the runs it started. A repeated event id returns only what is new.

        Example::

            await client.send_event("payment.succeeded", {"order_id": "o-42", "amount": 30},
                                    event_id=webhook_delivery_id)
        """
        return await self._events.send_event(name, data, event_id, actor)

    # -- queues and schedules -----------------------------------------------------

    async def queues(self) -> list[QueueInfo]:
        """Every queue that has had runs, and every queue declared in the client's
        registry, by name: ready runs, executing runs, limits, the limit holding
        runs back now, and the age of the oldest ready run.

        Example::

            for q in await client.queues():
                print(q.name, q.pending, q.executing, q.limited_by)
        """
        return await self._queues.queues()

    async def create_schedule(
        self,
        schedule_id: str,
        flow: Callable[..., Any] | str,
        *,
        cron: str,
        args: tuple[Any, ...] | list[Any] = (),
        kwargs: dict[str, Any] | None = None,
        tz: str = "UTC",
        overlap: str = "skip",
        catchup: timedelta | None = None,
        actor: str | None = None,
    ) -> ScheduleInfo:
        """Run `flow` on a cron schedule: each tick starts one run, with the tick time
        (an aware datetime with the schedule's UTC offset) as its first argument,
        then `args` and `kwargs`. Workers that serve the flow fire the ticks.

        Creating the same schedule again (same id and definition) changes nothing;
        the same id with another definition raises `IdempotencyConflict` (delete
        it first). See `sdk.scheduled` for `tz`, `overlap` and `catchup`.

        Every schedule operation that names an `actor` is put to the authorizer,
        if any (``create_schedule``, ``pause_schedule``, ``resume_schedule``,
        ``delete_schedule``, ``trigger_schedule``; a refusal raises `Forbidden`
        and is kept in the audit log's refusals), and each one that changes a
        schedule is an entry of the audit log (`audit_log`), with its actor.

        Example::

            await client.create_schedule("nightly", report, cron="30 2 * * *",
                                         tz="Europe/Paris", args=("eu",), actor="ops")
        """
        return await self._schedules.create(
            schedule_id, flow, cron, args, kwargs, tz, overlap, catchup, actor
        )

    async def pause_schedule(self, schedule_id: str, *, actor: str | None = None) -> ScheduleInfo:
        """Stop firing ticks until `resume_schedule` (a buffered tick is dropped;
        a run in progress goes on). Raises `ScheduleNotFound`. Audited as
        ``schedule.paused`` (see `create_schedule`)."""
        return await self._schedules.pause(schedule_id, actor)

    async def resume_schedule(self, schedule_id: str, *, actor: str | None = None) -> ScheduleInfo:
        """Fire ticks again, from the first tick after now: ticks that came while it
        was paused are not caught up. Raises `ScheduleNotFound`. Audited as
        ``schedule.resumed`` (see `create_schedule`)."""
        return await self._schedules.resume(schedule_id, actor)

    async def delete_schedule(self, schedule_id: str, *, actor: str | None = None) -> None:
        """Delete the schedule (its runs are kept). Raises `ScheduleNotFound`. A
        ``@scheduled`` flow's schedule is created again by the next worker that
        starts serving the flow. Audited as ``schedule.deleted`` (see
        `create_schedule`)."""
        await self._schedules.delete(schedule_id, actor)

    async def list_schedules(self) -> list[ScheduleInfo]:
        """Every schedule, oldest first."""
        return await self._schedules.list_all()

    async def trigger_schedule(self, schedule_id: str, *, actor: str | None = None) -> RunHandle:
        """Start a run of the schedule now (also when paused; the overlap policy does
        not apply), with now as its tick time. The next pass of a worker serving
        the flow starts it (workers are woken); the handle's run id is
        ``f"{schedule_id}@{now}"``. Raises `ScheduleNotFound`. Audited as
        ``schedule.triggered`` (see `create_schedule`)."""
        return await self._schedules.trigger(schedule_id, actor)

    # -- export -------------------------------------------------------------------

    async def export(self, run_id: str, *, redact: Redact | None = None) -> dict[str, Any]:
        """A run's record, journal, checkpoints and events, as JSON-able data.

        ``json.dumps`` of the result is the file ``testing.replay`` reads back
        (see docs/changing-flows.md, "Replaying production journals"). Payloads
        (the start arguments, the result and error, step results, signal
        payloads, error messages, event data) are kept as they are, unless
        `redact` is given: it is called as ``redact(path, value)`` on every leaf
        (string, number, bool, null) of every payload, and its return value
        (JSON data) takes the leaf's place. `path` says where the leaf sits,
        e.g. ``("journal", "charge#1", "value", "email")``,
        ``("args", "args", 0)``, ``("record", "result", "note")``,
        ``("events", "1700000000000-0", "data", "payload", "email")``. Keys of
        dicts are kept. To keep an export replayable, return a value of the same
        type (a masked string for a string): the current code decodes it.

        Archived generations of a run that continued as new are not included
        (they are finished and never replay); export one by its own id,
        ``f"{run_id}~g{n}"``.

        Raises `RunNotFound` for an unknown (or deleted) run, and
        `CorruptRecord` when its stored data cannot be read.

        Example::

            def mask(path, value):
                return "***" if path[-1] == "email" else value

            exported = await client.export("checkout-A-1", redact=mask)
            Path("checkout-A-1.json").write_text(json.dumps(exported, indent=1))
        """
        return await self._exporter.export(run_id, redact)
