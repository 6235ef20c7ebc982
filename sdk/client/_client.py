"""The client: start runs, read them, signal, approve, cancel, resume, delete.

Replay and fork (`sdk.client._lineage`) and reading a run's history (`sdk.client._history`)
are parts of `Client` of their own; `sdk.client._clientbase` holds what they share.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import cattrs

from sdk._core._checks import (
    check_count,
    check_id,
    check_name,
    check_new_run_id,
    check_optional_id,
    check_status,
    check_text,
    check_wait_kind,
    show,
)
from sdk._core._clock import Clock, SystemClock, seconds
from sdk._core._serde import converter, dumps
from sdk._core._types import Decision, Reason, RunOptions, RunRecord, RunStatus, WaitKind
from sdk._core._values import Serializer
from sdk._core._waiting import runs_waiting_on
from sdk.client._clientbase import Authorizer, RunHandle
from sdk.client._export import Exporting
from sdk.client._history import History
from sdk.client._lineage import Lineages
from sdk.client._queuing import Queuing
from sdk.client._rewind import read_rewind
from sdk.client._runs import DEFAULT_CANCEL_GRACE, cancel_run, raise_refused, refusal_error
from sdk.client._schedclient import ScheduleClient
from sdk.client._sending import EventSending
from sdk.client._starting import new_run
from sdk.errors import (
    CorruptRecord,
    IdempotencyConflict,
    InvalidArgument,
    QueueFull,
    SerializationError,
)
from sdk.model._flowdef import FlowDef
from sdk.model._intercept import Interceptor
from sdk.model._registry import Registry
from sdk.store import CorruptData, Mailbox, Refusal, Refused

if TYPE_CHECKING:
    from sdk.store import Store

__all__ = ["Authorizer", "Client", "RunHandle"]

#: How often `resume` reads a canceled run again when it changed meanwhile (it was
#: resumed and canceled again between the read and the write).
_REREADS = 5


class Client(History, Lineages, EventSending, Queuing, ScheduleClient, Exporting):
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
        self.store = store
        self.authorizer = authorizer
        self.clock: Clock = clock or SystemClock()
        self.registry = registry if registry is not None else Registry.default()
        self.serializer = Serializer.of(converter)
        self.interceptors = list(interceptors)

    # -- starting -----------------------------------------------------------

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

        Raises:
            QueueFull: the queue holds its ``Queue(max_pending=...)`` ready runs
                (the queue as declared in the client's registry); nothing was written.
        """
        handle, _ = await self._start(
            flow, args, kwargs, run_id=run_id, priority=priority, queue=queue,
            tenant_id=tenant_id, options=options, concurrency_key=concurrency_key,
            start_at=start_at, start_in=start_in,
        )  # fmt: skip
        return handle

    async def _start(
        self, flow: Callable[..., Any] | str, args: tuple[Any, ...], kwargs: dict[str, Any], *,
        run_id: str | None, priority: int = 0, queue: str | None = None,
        tenant_id: str | None = None, options: RunOptions | None = None,
        cause: dict[str, Any] | None = None, concurrency_key: str | None = None,
        start_at: datetime | None = None, start_in: float | timedelta | None = None,
    ) -> tuple[RunHandle, bool]:  # fmt: skip
        """`start`, also saying whether it created the run; `cause` joins the
        ``run.created`` event's data (e.g. the event that started it)."""
        fd = self._flow_def(flow)
        run_id = check_new_run_id(run_id if run_id is not None else str(uuid.uuid4()), "run_id")
        create = functools.partial(
            self._create, fd, args, kwargs, run_id=run_id, priority=priority, queue=queue,
            tenant_id=tenant_id, cause=cause, concurrency_key=concurrency_key,
            start_at=start_at, start_in=start_in,
        )  # fmt: skip
        if not self.interceptors:
            return await create(options)
        name = fd.name if isinstance(fd, FlowDef) else fd
        for hook in self.interceptors:
            options = hook.run_starting(name, run_id, options or RunOptions())
        error: BaseException | None = None
        try:
            return await create(options)
        except BaseException as exc:
            error = exc
            raise
        finally:
            for hook in reversed(self.interceptors):
                hook.run_started(run_id, error)

    async def _create(
        self, fd: FlowDef | str, args: tuple[Any, ...], kwargs: dict[str, Any],
        options: RunOptions | None, *, run_id: str, priority: int, queue: str | None,
        tenant_id: str | None, cause: dict[str, Any] | None, concurrency_key: str | None,
        start_at: datetime | None, start_in: float | timedelta | None,
    ) -> tuple[RunHandle, bool]:  # fmt: skip
        queues = self.registry.queues()
        new = new_run(
            fd, args, kwargs, self.serializer, run_id=run_id, priority=priority, queue=queue,
            tenant_id=tenant_id, options=options, now=self.clock.time(),
            concurrency_key=concurrency_key, start_at=start_at, start_in=start_in, queues=queues,
        )  # fmt: skip
        declared = queues.get(new.queue)
        try:
            data = {"flow": new.flow, "queue": new.queue, "priority": priority, **(cause or {})}
            outcome = await self.store.create_run(
                new, dumps(data), max_pending=declared.max_pending if declared else None
            )
        except CorruptData as exc:  # the run id is taken by a damaged run
            raise CorruptRecord(exc.run_id, exc.key, exc.detail) from None
        if outcome.full is not None:
            raise QueueFull(new.queue, outcome.full)
        if outcome.conflict:
            raise IdempotencyConflict(
                f"run {run_id!r} already exists with different arguments or flow"
            )
        return RunHandle(self, run_id), outcome.created

    # -- reading ----------------------------------------------------------------

    async def get(self, run_id: str) -> RunRecord:
        """The run's record. Raises `RunNotFound` for an unknown id."""
        return self._record(await self._stored(run_id))

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
            fd = self._flow_def(flow)
            name = fd.name if isinstance(fd, FlowDef) else fd

        async def read(of: RunStatus | None, n: int) -> list[RunRecord]:
            found = await self.store.list_runs(of, name, n, parent_run_id=parent_run_id)
            return [self._record(s) for s in found]

        if kind is None:
            return await read(st, limit)
        return await runs_waiting_on(read, kind, st, limit)

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
        check_id(run_id, "run_id")
        check_name(name, "signal name")
        check_optional_id(dedup_id, "dedup_id")
        check_optional_id(actor, "actor")
        await self._authorize(actor, "signal", run_id)
        data = self._payload(payload, f"payload of signal {name!r}")
        event = {"name": name, "dedup_id": dedup_id, "actor": actor}
        # A connection retry can run the signal script twice; an id of our own
        # makes the second run a no-op. "Already seen" then means delivered.
        reply = await self.store.signal(
            run_id, Mailbox(name), dumps(data), dedup_id or f"~{uuid.uuid4().hex}",
            now=self.clock.time(), event_data=dumps(event),
        )  # fmt: skip
        if isinstance(reply, Refused):
            raise refusal_error(run_id, reply)
        return reply or dedup_id is None

    async def approve(
        self, run_id: str, name: str, *, actor: str, reason: str | None = None, payload: Any = None
    ) -> bool:
        """Approve the human wait `name`: its `wait_for` returns a `Decision(approved=True)`."""
        return await self._decide(run_id, name, True, actor, reason, payload, "approve")

    async def deny(
        self, run_id: str, name: str, *, actor: str, reason: str | None = None, payload: Any = None
    ) -> bool:
        """Deny the human wait `name`: its `wait_for` returns a `Decision(approved=False)`."""
        return await self._decide(run_id, name, False, actor, reason, payload, "deny")

    async def _decide(
        self, run_id: str, name: str, approved: bool, actor: str, reason: str | None,
        payload: Any, action: str,
    ) -> bool:  # fmt: skip
        check_id(run_id, "run_id")
        check_id(name, "wait name")
        check_id(actor, f"{action}(): actor")
        check_text(reason, f"{action}(): reason", optional=True)
        await self._authorize(actor, action, run_id)
        data = self._payload(payload, f"payload of {action} {name!r}")
        decision = converter.unstructure(Decision(approved, actor, reason, data))
        event = {"name": name, "decision": action, "actor": actor, "reason": reason}
        # A fresh dedup id: a retried script run is a no-op, not a second decision.
        reply = await self.store.signal(
            run_id, Mailbox(name, human=True), dumps(decision), f"~{uuid.uuid4().hex}",
            now=self.clock.time(), event_data=dumps(event), decision_by=actor,
        )  # fmt: skip
        if isinstance(reply, Refused):
            raise refusal_error(run_id, reply, what=name)
        return True

    def _payload(self, payload: Any, what: str) -> Any:
        """A signal's or decision's payload as JSON data. `wait_for` returns it as
        JSON gives it back, so a value that JSON would change is refused."""
        data, tpath = self.serializer.encode(payload, None, what)
        if tpath is not None:
            raise SerializationError(
                f"{what}: a {tpath.replace('builtins:', '')} would reach wait_for() as "
                f"{type(data).__name__} {show(data, 60)}; send plain JSON data (dict, list, "
                "str, int, float, bool, None) and rebuild your type in the flow"
            )
        return data

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
        check_id(run_id, "run_id")
        check_text(reason, "cancel(): reason")
        check_optional_id(actor, "actor")
        secs = seconds(grace, "cancel(): grace")
        if secs < 0:
            raise InvalidArgument(f"cancel(): grace must not be negative, got {grace!r:.80}")
        await self._authorize(actor, "cancel", run_id)
        said = {"reason": reason, "actor": actor}
        refused = await cancel_run(self.store, run_id, reason, self.clock.time(), secs, said)
        raise_refused(run_id, refused)

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
        check_id(run_id, "run_id")
        if not isinstance(force, bool):
            raise InvalidArgument(f"resume(): force must be a bool, got {force!r}")
        check_optional_id(actor, "actor")
        check_optional_id(version, "resume(): version")
        authorized = await self._authorize(actor, "force_resume" if force else "resume", run_id)
        stored = authorized or await self._stored(run_id)
        discard = None
        err = self._record(stored).error
        if (
            stored.status is RunStatus.FAILED
            and err is not None
            and err.reason != Reason.NON_DETERMINISM
        ):
            discard = err.step_key
        said: dict[str, Any] = {"actor": actor, "from": stored.status.value, "force": force}
        if version is not None:
            said.update(version=version, from_version=stored.flow_version)
        for _ in range(_REREADS):
            rewind = None
            if stored.status is RunStatus.CANCELED:
                rewind = await read_rewind(self.store, run_id)
            refused = await self.store.resume(
                run_id, discard, now=self.clock.time(), event_data=dumps(said),
                version=version, rewind=rewind,
            )  # fmt: skip
            if refused is None or refused.why is not Refusal.CHANGED:
                break  # (changed: resumed and canceled again since it was read)
        raise_refused(run_id, refused)
        return RunHandle(self, run_id)

    async def delete(self, run_id: str, *, actor: str | None = None) -> None:
        """Delete a finished run and all of its data, at once and for good.

        Deletes the record, journal, event log, checkpoints, mailboxes, dedup
        ids and lineage of the run and takes it off every index; the run id is
        free again. Its event log goes with it, so the ``run.deleted`` event
        (with `actor`) reaches only live `follow` listeners.

        Raises:
            InvalidTransition: the run has not finished (pending, running,
                waiting...): nothing is deleted. Cancel it first.
            RunNotFound: no such run.
            Forbidden: the authorizer refused ``delete`` (audited as ``auth.denied``).
        """
        check_id(run_id, "run_id")
        check_optional_id(actor, "actor")
        await self._authorize(actor, "delete", run_id)
        refused = await self.store.delete(
            run_id, self.clock.time(), event_data=dumps({"reason": "deleted", "actor": actor})
        )
        raise_refused(run_id, refused)
