"""What every part of `Client` shares: its store, clock, registry, serializer, authorizer."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from sdk._core._checks import MAX_ID, PRIORITY_RANGE, check_id, check_seconds
from sdk._core._clock import Clock
from sdk._core._serde import dumps
from sdk._core._types import EventType, Reason, RunRecord, RunStatus, WorkerInfo
from sdk._core._values import Serializer
from sdk.client._runs import raise_refused, run_record, utc
from sdk.errors import (
    CorruptRecord,
    Forbidden,
    InvalidArgument,
    RunCanceled,
    RunFailed,
    RunNotFound,
    SerializationError,
)
from sdk.model._flowdef import FlowDef
from sdk.model._registry import Registry, flow_def_of

if TYPE_CHECKING:
    from sdk.store import Store, StoredRun

__all__ = ["MAX_ID", "PRIORITY_RANGE", "Authorizer", "ClientBase", "RunHandle", "check_id"]

log = logging.getLogger("steadyflow.client")

#: Seconds `RunHandle.result` waits on a pending run before it checks, once,
#: that some live worker serves it (and logs a warning if none does).
PENDING_HINT_AFTER = 5.0

#: How long after its deadline `RunHandle.result` ends a wait the store has not
#: ended itself. Redis ends a blocking read at its next cron tick (every 100 ms
#: with its default ``hz 10``) when nothing else wakes it, so the last wait of a
#: ``result(timeout=)`` is cut here instead (the read's connection is closed,
#: as after any cancelled read, and the next read opens another).
RESULT_CUT_AFTER = 0.005


class Authorizer(Protocol):
    """Decides whether `actor` may perform `action` on `run`.

    Actions: ``signal``, ``approve``, ``deny``, ``cancel``, ``resume``,
    ``force_resume``, ``replay``, ``fork``, ``delete``, ``send_event`` (per run
    the event would reach).
    """

    def can(self, actor: str, action: str, run: RunRecord) -> bool: ...


class RunHandle:
    """A started run. `result()` waits for it; it does not drive a worker."""

    __slots__ = ("_client", "run_id")

    def __init__(self, client: ClientBase, run_id: str) -> None:
        self._client = client
        self.run_id = run_id

    def __repr__(self) -> str:
        return f"RunHandle({self.run_id!r})"

    async def status(self) -> RunStatus:
        """The run's current status."""
        return (await self._client._stored(self.run_id)).status

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
        if timeout is not None:
            timeout = check_seconds(timeout, "result(): timeout")
        store = self._client.store
        loop = asyncio.get_running_loop()
        began = loop.time()
        deadline = None if timeout is None else began + timeout
        warned = False
        run_id = self.run_id
        while True:
            stored = await store.get_run(run_id)
            if stored is None:
                # deleted on success: its tombstone holds the result for a while
                stored = await store.get_tombstone(run_id)
            if stored is None:
                raise RunNotFound(run_id)
            if stored.status.is_terminal:
                if stored.reason == Reason.CONTINUED_AS_NEW and "~g" in run_id:
                    # an archived generation ("<run id>~g<n>"): the result is the run's
                    run_id = run_id.rpartition("~g")[0]
                    continue
                return self._client._outcome(stored)
            wait = 5.0 if deadline is None else deadline - loop.time()
            if wait <= 0:
                hint = await self._client._unserved(stored)
                raise TimeoutError(
                    f"run {run_id!r} is still {stored.status.value} after {timeout}s"
                    + (f": {hint}" if hint else "")
                )
            if (
                not warned
                and stored.status is RunStatus.PENDING
                and loop.time() - began >= PENDING_HINT_AFTER
            ):
                warned = True  # once: pending for a while may just be a busy deployment
                hint = await self._client._unserved(stored)
                if hint:
                    log.warning("run %s is still pending: %s", run_id, hint)
            if deadline is None or wait > 5.0:
                await store.wait_finished(run_id, min(wait, 5.0))
            else:  # the last wait: it ends at the deadline, whenever the store would
                with contextlib.suppress(TimeoutError):  # the next pass reads it, then raises
                    await asyncio.wait_for(
                        store.wait_finished(run_id, wait), wait + RESULT_CUT_AFTER
                    )


class ClientBase:
    """The state of a `Client`, and the helpers all of its operations use."""

    store: Store
    authorizer: Authorizer | None
    clock: Clock
    registry: Registry
    serializer: Serializer

    def _flow_def(self, flow: Callable[..., Any] | str) -> FlowDef | str:
        if isinstance(flow, str):
            return self.registry.find_flow(check_id(flow, "flow name")) or flow
        fd = flow_def_of(flow)
        if fd is None:
            raise InvalidArgument(f"{flow!r} is not a @flow function or a flow name")
        return fd

    def handle(self, run_id: str) -> RunHandle:
        """A handle on an existing run (no round trip)."""
        return RunHandle(self, check_id(run_id, "run_id"))

    async def _stored(self, run_id: str) -> StoredRun:
        check_id(run_id, "run_id")
        stored = await self.store.get_run(run_id)
        if stored is None:
            raise RunNotFound(run_id)
        return stored

    def _record(self, stored: StoredRun) -> RunRecord:
        """The run's public record, its result rebuilt into its type when its flow is known."""
        rec = run_record(stored)
        if rec.status is not RunStatus.COMPLETED or stored.result is None:
            return rec
        try:
            return attrs.evolve(rec, result=self._result_value(stored, rec))
        except SerializationError:
            return rec

    def _result_value(self, stored: StoredRun, rec: RunRecord) -> Any:
        """`rec`'s result (the JSON data of `stored`'s) rebuilt into its type."""
        registry = self.registry
        fd = registry.find_version(stored.flow, stored.flow_version) or registry.find_flow(
            stored.flow
        )
        declared = fd.return_type() if fd is not None else None
        return self.serializer.decode(
            rec.result, declared, stored.result_type, f"result of run {stored.run_id!r}"
        )

    async def workers(self) -> list[WorkerInfo]:
        """The workers alive on this store and prefix, from their heartbeats.

        A worker serving (`Worker.run`, ``steadyflow worker``) renews its
        registration every third of its lease TTL and drops it when it stops;
        one that died counts as alive until its last registration expires
        (one lease TTL).
        """
        return [
            WorkerInfo(
                b.worker_id,
                b.host,
                b.pid,
                b.flows,
                b.queues,
                b.concurrency,
                b.in_flight,
                utc(b.started_at),
                utc(b.beat_at),
            )
            for b in await self.store.workers(self.clock.time())
        ]

    async def _unserved(self, stored: StoredRun) -> str | None:
        """Why a pending run may not start: no live worker serves its flow and queue."""
        if stored.status is not RunStatus.PENDING:
            return None
        try:
            workers = await self.workers()
        except Exception:  # a hint is not worth failing for
            return None
        if any(w.serves(stored.flow, stored.queue, stored.flow_version) for w in workers):
            return None
        at = "" if stored.flow_version is None else f" at version {stored.flow_version!r}"
        return (
            f"no live worker serves flow {stored.flow!r}{at} on queue {stored.queue!r} "
            f"({len(workers)} live worker(s) on this store and key prefix); start one with "
            "the same store and prefix, e.g. `steadyflow worker MODULE` with STEADYFLOW_STORE "
            "and STEADYFLOW_PREFIX set (in a FlowTestEnv, call run_until_idle())"
        )

    def _outcome(self, stored: StoredRun) -> Any:
        """A finished run's result, or the error it ended with."""
        rec = run_record(stored)
        if rec.damage is not None and stored.status is not RunStatus.FAILED:
            # a failed one reports its damage as its error (reason corrupt_record)
            raise CorruptRecord(rec.run_id, self.store.key_of(rec.run_id, "run"), rec.damage)
        if stored.status is RunStatus.COMPLETED:
            return self._result_value(stored, rec)
        if rec.status is RunStatus.CANCELED:
            raise RunCanceled(rec.run_id, rec.reason)
        assert rec.error is not None, f"failed run {rec.run_id!r} has no error recorded"
        raise RunFailed(rec.run_id, rec.error)

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
        if actor is not None and self.authorizer.can(actor, action, self._record(stored)):
            return stored
        await self._audit_denied(run_id, {"actor": actor, "action": action})
        if actor is None:
            raise Forbidden(f"{action} of run {run_id!r} needs an actor (an authorizer is set)")
        raise Forbidden(f"{actor!r} may not {action} run {run_id!r}")

    async def _audit_denied(self, run_id: str, data: dict[str, Any]) -> None:
        refused = await self.store.audit(
            run_id, EventType.AUTH_DENIED, self.clock.time(), dumps(data)
        )
        raise_refused(run_id, refused)
