"""The client: start runs, read them, signal, approve, cancel, resume."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import cattrs

from sdk._clock import Clock, SystemClock
from sdk._flowdef import FlowDef
from sdk._journal import Kind, Record, State
from sdk._outbox import Intent, IntentStatus
from sdk._registry import Registry, flow_def_of
from sdk._retry import RetryPolicy
from sdk._serde import converter, dumps, loads
from sdk._types import (
    Checkpoint,
    CheckpointKind,
    Decision,
    ErrorInfo,
    Event,
    EventType,
    Reason,
    RunOptions,
    RunRecord,
    RunStatus,
)
from sdk._values import Serializer
from sdk.errors import (
    Forbidden,
    InvalidTransition,
    NotWaiting,
    RunCanceled,
    RunFailed,
    RunNotFound,
    SerializationError,
)

if TYPE_CHECKING:
    from stores._protocol import RawEvent, Store, StoredRun

__all__ = ["Authorizer", "Client", "RunHandle"]

_MAX_ID = 256
_PRIORITY_RANGE = range(-4095, 4096)


class Authorizer(Protocol):
    """Decides whether `actor` may perform `action` on `run`.

    Actions: ``signal``, ``approve``, ``deny``, ``cancel``, ``resume``,
    ``replay``, ``fork``, ``delete``.
    """

    def can(self, actor: str, action: str, run: RunRecord) -> bool: ...


def _check_id(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > _MAX_ID:
        raise ValueError(
            f"{what} must be a non-empty string of at most {_MAX_ID} characters, got {value!r}"
        )
    return value


class RunHandle:
    """A started run. `result()` waits for it; it does not drive a worker."""

    __slots__ = ("_client", "run_id")

    def __init__(self, client: Client, run_id: str) -> None:
        self._client = client
        self.run_id = run_id

    def __repr__(self) -> str:
        return f"RunHandle({self.run_id!r})"

    async def status(self) -> RunStatus:
        """The run's current status."""
        return (await self._client.get(self.run_id)).status

    async def result(self, timeout: float | None = None) -> Any:
        """Wait until the run ends and return its result.

        Raises:
            RunFailed: the run failed (`.error` has type, message, step key, reason).
            RunCanceled: the run was canceled.
            TimeoutError: `timeout` seconds passed first.
            RunNotFound: no such run (or it was deleted; a run of a
                ``delete_on_success`` flow still returns its result for
                300 seconds after it completed).
        """
        store = self._client.store
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            stored = await store.get_run(self.run_id)
            if stored is None:
                # deleted on success: its tombstone holds the result for a while
                stored = await store.get_tombstone(self.run_id)
            if stored is None:
                raise RunNotFound(self.run_id)
            if stored.record.status.is_terminal:
                return self._client._outcome(stored)
            wait = 5.0 if deadline is None else deadline - loop.time()
            if wait <= 0:
                raise TimeoutError(
                    f"run {self.run_id!r} is still {stored.record.status.value} after {timeout}s"
                )
            await store.wait_finished(self.run_id, min(wait, 5.0))


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
    ) -> None:
        self.store = store
        self.authorizer = authorizer
        self.clock: Clock = clock or SystemClock()
        self.registry = registry if registry is not None else Registry.default()
        self.serializer = Serializer.of(converter)

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
        """
        if options is not None and not isinstance(options, RunOptions):
            raise TypeError(f"options must be a RunOptions, got {options!r}")
        fd = self._flow_def(flow)
        name = fd.name if isinstance(fd, FlowDef) else fd
        run_id = _check_id(run_id if run_id is not None else str(uuid.uuid4()), "run_id")
        if (
            isinstance(priority, bool)
            or not isinstance(priority, int)
            or priority not in _PRIORITY_RANGE
        ):
            raise ValueError(f"priority must be an int in -4095..4095, got {priority!r}")
        q = queue if queue is not None else (fd.queue if isinstance(fd, FlowDef) else "default")
        _check_id(q, "queue")
        if isinstance(fd, FlowDef):
            args_json = fd.encode_args(args, kwargs, self.serializer)
            version = fd.version
        else:
            enc_args = [
                self.serializer.encode(a, None, f"flow {name!r} argument {i}")[0]
                for i, a in enumerate(args)
            ]
            enc_kwargs = {
                k: self.serializer.encode(v, None, f"flow {name!r} argument {k!r}")[0]
                for k, v in kwargs.items()
            }
            args_json = dumps({"args": enc_args, "kwargs": enc_kwargs, "types": {}})
            version = None
        from stores._protocol import NewRun  # stores imports sdk: import at use

        # Keyword order, and positional vs keyword, are not part of a call's identity.
        if isinstance(fd, FlowDef):
            canonical = fd.call_identity(args_json)
        else:
            canonical = json.dumps(
                loads(args_json), sort_keys=True, separators=(",", ":"), ensure_ascii=False
            )
        digest = hashlib.sha256(f"{name}\n{canonical}".encode()).hexdigest()
        await self.store.create_run(
            NewRun(
                run_id, name, version, args_json, digest, q, priority, tenant_id,
                self.clock.time(), options or RunOptions(),
                retention=fd.retention if isinstance(fd, FlowDef) else None,
            )
        )  # fmt: skip
        return RunHandle(self, run_id)

    def _flow_def(self, flow: Callable[..., Any] | str) -> FlowDef | str:
        if isinstance(flow, str):
            return self.registry.find_flow(_check_id(flow, "flow name")) or flow
        fd = flow_def_of(flow)
        if fd is None:
            raise TypeError(f"{flow!r} is not a @flow function or a flow name")
        return fd

    def handle(self, run_id: str) -> RunHandle:
        """A handle on an existing run (no round trip)."""
        return RunHandle(self, run_id)

    # -- reading ----------------------------------------------------------------

    async def get(self, run_id: str) -> RunRecord:
        """The run's record. Raises `RunNotFound` for an unknown id."""
        stored = await self._stored(run_id)
        return self._with_result(stored)

    async def _stored(self, run_id: str) -> StoredRun:
        stored = await self.store.get_run(run_id)
        if stored is None:
            raise RunNotFound(run_id)
        return stored

    async def list_runs(
        self, status: RunStatus | str | None = None, flow: Callable[..., Any] | str | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:  # fmt: skip
        """Runs, newest first, optionally of one status and/or one flow."""
        st = RunStatus(status) if status is not None else None
        name = None
        if flow is not None:
            fd = self._flow_def(flow)
            name = fd.name if isinstance(fd, FlowDef) else fd
        return [self._with_result(s) for s in await self.store.list_runs(st, name, limit)]

    def _with_result(self, stored: StoredRun) -> RunRecord:
        import attrs

        rec = stored.record
        if rec.status is not RunStatus.COMPLETED or stored.raw_result is None:
            return rec
        try:
            return attrs.evolve(rec, result=self._result_value(stored))
        except SerializationError:
            return rec

    def _result_value(self, stored: StoredRun) -> Any:
        fd = self.registry.find_flow(stored.record.flow)
        declared = fd.return_type() if fd is not None else None
        return self.serializer.decode(
            stored.record.result, declared, stored.result_type,
            f"result of run {stored.record.run_id!r}",
        )  # fmt: skip

    def _outcome(self, stored: StoredRun) -> Any:
        rec = stored.record
        if rec.status is RunStatus.COMPLETED:
            return self._result_value(stored)
        if rec.status is RunStatus.CANCELED:
            raise RunCanceled(rec.run_id, rec.reason)
        assert rec.error is not None, f"failed run {rec.run_id!r} has no error recorded"
        raise RunFailed(rec.run_id, rec.error)

    # -- steering ---------------------------------------------------------------

    async def _authorize(
        self, actor: str | None, action: str, run_id: str, stored: StoredRun | None = None
    ) -> StoredRun | None:
        """Ask the authorizer; a refusal writes only an ``auth.denied`` event.

        Decides on `stored` when the caller has read the run already; else reads
        it and returns it (None without an authorizer), so a caller that needs
        the run does not read it again.
        """
        if self.authorizer is None:
            return None
        if stored is None:
            stored = await self._stored(run_id)
        if actor is not None and self.authorizer.can(actor, action, self._with_result(stored)):
            return stored
        await self.store.audit(
            run_id,
            EventType.AUTH_DENIED,
            self.clock.time(),
            dumps({"actor": actor, "action": action}),
        )
        if actor is None:
            raise Forbidden(f"{action} of run {run_id!r} needs an actor (an authorizer is set)")
        raise Forbidden(f"{actor!r} may not {action} run {run_id!r}")

    async def signal(
        self, run_id: str, name: str, payload: Any = None, *,
        dedup_id: str | None = None, actor: str | None = None,
    ) -> bool:  # fmt: skip
        """Send the signal `name` to a run; kept until a `wait_for(name)` consumes it.

        Returns False when `dedup_id` was already delivered to this run.
        Raises `InvalidTransition` for a terminal run (nothing is written) and
        `RunNotFound` for an unknown one.
        """
        _check_id(name, "signal name")
        await self._authorize(actor, "signal", run_id)
        data, _ = self.serializer.encode(payload, None, f"payload of signal {name!r}")
        event = {"name": name, "dedup_id": dedup_id, "actor": actor}
        return await self._deliver(run_id, "s:" + name, dumps(data), dedup_id, event)

    async def _deliver(
        self, run_id: str, mailbox: str, payload: str, dedup_id: str | None, event: dict[str, Any]
    ) -> bool:
        now, data = self.clock.time(), dumps(event)
        if dedup_id is not None:
            return await self.store.signal(
                run_id, mailbox, payload, dedup_id, now=now, event_data=data
            )
        # A connection retry can run the signal script twice; an id of our own
        # makes the second run a no-op. "Already seen" then means delivered.
        auto = f"~{uuid.uuid4().hex}"
        await self.store.signal(run_id, mailbox, payload, auto, now=now, event_data=data)
        return True

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
        _check_id(name, "wait name")
        await self._authorize(actor, action, run_id)
        data, _ = self.serializer.encode(payload, None, f"payload of {action} {name!r}")
        if not isinstance(actor, str) or not actor or "\n" in actor:
            raise ValueError(f"{action}: actor must be a non-empty name, got {actor!r}")
        decision = converter.unstructure(Decision(approved, actor, reason, data))
        event = {"name": name, "decision": action, "actor": actor, "reason": reason}
        try:
            # A fresh dedup id: a retried script run is a no-op, not a second decision.
            await self.store.signal(
                run_id, "h:" + name, dumps(decision), f"~{uuid.uuid4().hex}",
                now=self.clock.time(), event_data=dumps(event), decision_by=actor,
            )  # fmt: skip
        except NotWaiting as exc:
            raise NotWaiting(run_id, exc.status, name) from None
        return True

    async def cancel(self, run_id: str, *, reason: str, actor: str | None = None) -> None:
        """Cancel a run that has not ended. A terminal run raises `InvalidTransition`.

        A step already executing finishes, but its result is not recorded.
        """
        await self._authorize(actor, "cancel", run_id)
        await self.store.cancel(
            run_id, reason, self.clock.time(), event_data=dumps({"reason": reason, "actor": actor})
        )

    async def resume(
        self, run_id: str, *, force: bool = False, actor: str | None = None
    ) -> RunHandle:
        """Continue a failed, canceled or waiting run from its checkpoint.

        A waiting run continues from its checkpoint head; a failed or canceled
        run from its newest checkpoint before it finished. A failed run's
        recorded failure (of the step that failed, when a step failed) is
        discarded so that step runs again; every other recorded step is kept
        and not re-run. A run that failed on non-determinism resumes with the
        fixed code. The one audited way out of a terminal status.

        Args:
            force: skip re-evaluating the run's policy: the authorizer is asked
                for ``force_resume`` instead of ``resume``, and the
                ``run.resumed`` event records ``force: true``.
            actor: who resumes (required when the client has an authorizer).
        """
        authorized = await self._authorize(actor, "force_resume" if force else "resume", run_id)
        stored = authorized or await self._stored(run_id)
        discard = None
        err = stored.record.error
        if (
            stored.record.status is RunStatus.FAILED
            and err is not None
            and err.reason != Reason.NON_DETERMINISM
        ):
            discard = err.step_key
        await self.store.resume(
            run_id, discard, now=self.clock.time(),
            event_data=dumps(
                {"actor": actor, "from": stored.record.status.value, "force": force}
            ),
        )  # fmt: skip
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
        await self._authorize(actor, "delete", run_id)
        await self.store.delete(
            run_id, self.clock.time(), event_data=dumps({"reason": "deleted", "actor": actor})
        )

    # -- replay and fork --------------------------------------------------------------

    async def replay(
        self,
        run_id: str,
        *,
        checkpoint_id: str | None = None,
        actor: str | None = None,
        new_run_id: str | None = None,
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
        """
        return await self._derive("replay", run_id, checkpoint_id, actor, new_run_id, {})

    async def fork(
        self,
        run_id: str,
        *,
        checkpoint_id: str | None = None,
        actor: str | None = None,
        new_run_id: str | None = None,
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
        unknown = set(options) - _FORK_OPTIONS
        if unknown:
            raise TypeError(
                f"fork: unknown option(s) {sorted(unknown)}; known: {sorted(_FORK_OPTIONS)}"
            )
        return await self._derive("fork", run_id, checkpoint_id, actor, new_run_id, options)

    async def _derive(
        self,
        kind: str,
        run_id: str,
        checkpoint_id: str | None,
        actor: str | None,
        new_run_id: str | None,
        options: dict[str, Any],
    ) -> RunHandle:
        source = await self.store.read_lineage(run_id)  # the run, read once
        if source is None:
            raise RunNotFound(run_id)
        await self._authorize(actor, kind, run_id, source.run)
        rec = source.run.record
        if options and self.authorizer is not None:
            can_fork = getattr(self.authorizer, "can_fork", None)
            if can_fork is not None and not can_fork(actor, rec, dict(options)):
                await self.store.audit(
                    run_id, EventType.AUTH_DENIED, self.clock.time(),
                    dumps({"actor": actor, "action": "fork", "options": sorted(options)}),
                )  # fmt: skip
                raise Forbidden(f"{actor!r} may not fork run {run_id!r} with {sorted(options)}")
        cps = source.checkpoints
        if not cps:
            raise InvalidTransition(run_id, rec.status, RunStatus.RUNNING)
        wanted = (
            checkpoint_id if checkpoint_id is not None else cps[0 if kind == "replay" else -1]["id"]
        )
        chosen = next((c for c in cps if c["id"] == str(wanted)), None)
        if chosen is None:
            raise ValueError(f"run {run_id!r} has no checkpoint {wanted!r}")
        upto = int(chosen["seq"])
        # From the finish of a failed run, the failure that failed it is not
        # copied (as resume discards it): that call runs again in the new run.
        err = rec.error
        dropped = (
            err.step_key
            if chosen["kind"] == "run_finished"
            and rec.status is RunStatus.FAILED
            and err is not None
            and err.reason != Reason.NON_DETERMINISM
            else None
        )
        seed: list[tuple[str, str]] = []
        lineage: dict[str, str] = dict(source.lineage)  # the source's own, still unused
        for key, raw in source.journal.items():
            if key == dropped:
                continue
            parsed = Record.from_json(raw)
            if int(source.jseq.get(key, "0").split(":", 1)[0]) <= upto:
                # before the checkpoint: replayed as it is, except what waits again
                if parsed.state in (State.OK, State.FAILED, State.TIMEOUT):
                    seed.append((key, raw))
            elif parsed.state is State.OK and parsed.kind in _REUSABLE:
                lineage[key] = raw
        for key, _ in seed:
            lineage.pop(key, None)
        from stores._protocol import NewRun  # stores imports sdk: import at use

        versions = options.get("versions", rec.versions)
        run_opts = RunOptions(
            thread_id=options.get("thread_id", rec.thread_id),
            trace_id=options.get("trace_id"),
            environment=options.get("environment", rec.environment),
            versions=versions,
            policy_snapshot_id=options.get("policy_snapshot_id", rec.policy_snapshot_id),
        )
        retry = options.get("retry")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise TypeError(f"fork: retry must be a RetryPolicy, got {retry!r}")
        new_id = _check_id(new_run_id or str(uuid.uuid4()), "new_run_id")
        priority = options.get("priority", rec.priority)
        queue = options.get("queue", rec.queue)
        _check_id(queue, "queue")
        if (
            isinstance(priority, bool)
            or not isinstance(priority, int)
            or priority not in _PRIORITY_RANGE
        ):
            raise ValueError(f"priority must be an int in -4095..4095, got {priority!r}")
        new = NewRun(
            new_id, rec.flow, options.get("flow_version", rec.flow_version), source.run.args,
            hashlib.sha256(f"{kind}\n{run_id}\n{wanted}\n{new_id}".encode()).hexdigest(),
            queue, priority, options.get("tenant_id", rec.tenant_id), self.clock.time(),
            run_opts, source_run_id=run_id, source_checkpoint_id=str(wanted),
            root_run_id=rec.root_run_id or run_id,
            retry=retry.to_json() if retry is not None else source.run.retry,
            retention=fd.retention if (fd := self.registry.find_flow(rec.flow)) else None,
        )  # fmt: skip
        event = {
            "source_run_id": run_id, "source_checkpoint_id": str(wanted), "actor": actor,
            "options": sorted(options),
        }  # fmt: skip
        await self.store.derive_run(
            new,
            seed,
            sorted(lineage.items()),
            EventType.RUN_REPLAYED if kind == "replay" else EventType.RUN_FORKED,
            dumps(event),
        )
        return RunHandle(self, new_id)

    # -- the event log and checkpoints -------------------------------------------------

    async def events(
        self, run_id: str, *, cursor: str | None = None, limit: int = 100
    ) -> list[Event]:
        """A page of the run's event log, oldest first.

        Pass the last `Event.event_id` as `cursor` for the next page; every
        event comes exactly once across pages. Raises `RunNotFound`.
        """
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        stored = await self._stored(run_id)
        raw = await self.store.events(run_id, cursor, limit)
        rec = stored.record
        return [_event(r, rec.trace_id, rec.tenant_id) for r in raw]

    async def checkpoints(self, run_id: str) -> list[Checkpoint]:
        """The run's checkpoints, oldest first. Raises `RunNotFound`."""
        await self._stored(run_id)
        return [
            Checkpoint(
                checkpoint_id=c["id"],
                run_id=run_id,
                kind=CheckpointKind(c["kind"]),
                step_key=c["step"] or None,
                status=RunStatus(c["status"]),
                created_at=datetime.fromtimestamp(float(c["at"]), UTC),
            )
            for c in await self.store.checkpoints(run_id)
        ]

    async def intents(self, run_id: str) -> list[Intent]:
        """The run's outbox intents (`emit`), in the order they were recorded, with
        their delivery status. Raises `RunNotFound` (also for a deleted run)."""
        rows = await self.store.intents(run_id)
        if rows is None:
            raise RunNotFound(run_id)
        return [_intent(run_id, iid, h) for iid, h in rows]

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
        subscription: Any = None
        known: dict[str, tuple[str, str | None]] = {}  # run id -> (trace id, tenant id)
        try:
            while True:
                raw, subscription = await self.store.follow(subscription, poll_timeout, 100)
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # Python 3.11's asyncio.wait_for (inside redis-py) can swallow a
                    # cancel that lands as a read completes; honour it here, or a
                    # canceled follower would poll forever.
                    raise asyncio.CancelledError
                new = sorted({r.run_id for r in raw} - known.keys())
                if new:
                    known.update(await self.store.correlation(new))
                    if len(known) > 10_000:  # a bounded cache: forget the oldest half
                        for old in list(known)[:5_000]:
                            del known[old]
                for r in raw:
                    trace, tenant = known.get(r.run_id, (r.run_id, None))
                    yield _event(r, trace, tenant)
        finally:
            if subscription is not None:
                await self.store.unfollow(subscription)


_FORK_OPTIONS = frozenset(
    {"queue", "priority", "tenant_id", "flow_version", "retry", "environment", "thread_id",
     "trace_id", "versions", "policy_snapshot_id"}
)  # fmt: skip
_REUSABLE = (Kind.STEP, Kind.NOW, Kind.UUID)


def _intent(run_id: str, intent_id: str, h: dict[str, str]) -> Intent:
    body = loads(h["body"])
    error = h.get("error")
    due = h.get("due")
    return Intent(
        intent_id=intent_id,
        run_id=run_id,
        channel=h["channel"],
        payload=body["payload"],
        idempotency_key=body["idempotency_key"],
        attempt=int(h.get("n", 0)),
        created_at=datetime.fromtimestamp(float(body["created_at"]), UTC),
        step_key=h.get("step", ""),
        status=IntentStatus(h["status"]),
        failures=int(h.get("f", 0)),
        last_error=converter.structure(loads(error), ErrorInfo) if error else None,
        updated_at=datetime.fromtimestamp(float(h["at"]), UTC) if "at" in h else None,
        next_attempt_at=datetime.fromtimestamp(float(due), UTC) if due else None,
    )


def _event(raw: RawEvent, trace_id: str | None, tenant_id: str | None) -> Event:
    f = raw.fields
    data = f.get("data")
    step = f.get("step") or None
    return Event(
        event_id=raw.event_id,
        run_id=raw.run_id,
        type=f["type"],
        at=datetime.fromtimestamp(float(f["at"]), UTC),
        step_key=step,
        data=loads(data) if data else None,
        correlation={
            "run_id": raw.run_id, "trace_id": trace_id, "tenant_id": tenant_id, "step_key": step,
        },
    )  # fmt: skip
