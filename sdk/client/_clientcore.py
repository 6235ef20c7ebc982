"""What every part of `Client` shares: `ClientCore` (its store, clock, registry,
serializer, authorizer and interceptors, and the helpers every part needs: a run
read, its public record, authorization and its audit), and the `Authorizer` protocol
(the built-in role model implementing it is `sdk.client._roles`).

`Client` builds one core and hands it to each of its parts (`sdk.client._client`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from sdk._core._checks import check_id, show
from sdk._core._clock import Clock
from sdk._core._serde import dumps
from sdk._core._types import EventType, RunRecord, RunStatus, WorkerInfo
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
from sdk.model._intercept import Interceptor
from sdk.model._registry import Registry, flow_def_of
from sdk.store import AuditLog

if TYPE_CHECKING:
    from sdk.store import Store, StoredRun

__all__ = ["Authorizer", "ClientCore"]


class Authorizer(Protocol):
    """Decides whether `actor` may perform `action` on `run`.

    Actions on a run (`run` is its record as read just before): ``signal``,
    ``approve``, ``deny``, ``cancel``, ``resume``, ``force_resume``, ``replay``,
    ``fork``, ``delete``, ``send_event`` (per run the event would reach).

    Actions that create or change what has no stored run yet: ``start`` (`run`
    is the record of the run about to be created: status ``pending``, its id,
    flow, queue, tenant...), and ``create_schedule``, ``pause_schedule``,
    ``resume_schedule``, ``delete_schedule``, ``trigger_schedule`` (`run` is the
    record of a run the schedule starts: its `RunRecord.schedule_id`, flow and
    queue; its `run_id` is the schedule's id). These are asked when the call
    names an actor (every call of the HTTP API and the console does).

    Answer False for an action you do not know: a later version may ask about more.
    """

    def can(self, actor: str, action: str, run: RunRecord) -> bool: ...


class ClientCore:
    """The state of a `Client`, and the helpers all of its parts use.

    `Client`'s attributes (``client.store``, ``client.authorizer``...) read and
    set these, so a part always sees what the client holds now.
    """

    __slots__ = ("authorizer", "clock", "interceptors", "registry", "serializer", "store")

    def __init__(
        self,
        store: Store,
        authorizer: Authorizer | None,
        clock: Clock,
        registry: Registry,
        serializer: Serializer,
        interceptors: Sequence[Interceptor],
    ) -> None:
        self.store = store
        self.authorizer = authorizer
        self.clock = clock
        self.registry = registry
        self.serializer = serializer
        self.interceptors = list(interceptors)

    def flow_def(self, flow: Callable[..., Any] | str) -> FlowDef | str:
        """`flow`'s definition; a flow name the registry does not know stays a name."""
        if isinstance(flow, str):
            return self.registry.find_flow(check_id(flow, "flow name")) or flow
        fd = flow_def_of(flow)
        if fd is None:
            raise InvalidArgument(f"{show(flow)} is not a @flow function or a flow name")
        return fd

    async def stored(self, run_id: str) -> StoredRun:
        """The run as stored. Raises `RunNotFound`."""
        check_id(run_id, "run_id")
        stored = await self.store.get_run(run_id)
        if stored is None:
            raise RunNotFound(run_id)
        return stored

    def record(self, stored: StoredRun) -> RunRecord:
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

    def outcome(self, stored: StoredRun) -> Any:
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

    async def workers(self) -> list[WorkerInfo]:
        """The workers alive on this store and prefix, from their heartbeats."""
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

    async def unserved(self, stored: StoredRun) -> str | None:
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

    async def authorize(
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
            stored = await self.stored(run_id)
        if actor is not None and self.authorizer.can(actor, action, self.record(stored)):
            return stored
        await self.audit_denied(run_id, {"actor": actor, "action": action})
        if actor is None:
            raise Forbidden(f"{action} of run {run_id!r} needs an actor (an authorizer is set)")
        raise Forbidden(f"{actor!r} may not {action} run {run_id!r}")

    async def authorize_new(
        self, actor: str | None, action: str, record: RunRecord, what: str, *,
        schedule_id: str | None = None,
    ) -> None:  # fmt: skip
        """Ask the authorizer about `action` on what has no stored run to decide on
        or to log a refusal in: a start (`record`: the run about to be created) or
        a schedule operation (`record`: a run the schedule starts). Only a call
        that names an actor is asked (one without is the application's own, as
        before these actions were put to the authorizer). A refusal writes only
        an ``auth.denied`` entry in the audit log's refusals (`what` names the
        target in the error)."""
        if self.authorizer is None or actor is None:
            return
        if self.authorizer.can(actor, action, record):
            return
        run_id = None if schedule_id is not None else record.run_id
        said = {"actor": actor, "action": action, "flow": record.flow}
        await self.store.append_audit(
            AuditLog.REFUSALS, EventType.AUTH_DENIED, self.clock.time(), dumps(said),
            run_id=run_id, schedule_id=schedule_id,
        )  # fmt: skip
        raise Forbidden(f"{actor!r} may not {action} {what}")

    async def audit_denied(self, run_id: str, data: dict[str, Any]) -> None:
        """Write the ``auth.denied`` event of a refusal (`data`: who, what)."""
        refused = await self.store.audit(
            run_id, EventType.AUTH_DENIED, self.clock.time(), dumps(data)
        )
        raise_refused(run_id, refused)
