"""Replay and fork: new runs that re-execute a run from one of its checkpoints (`RunDeriver`)."""

from __future__ import annotations

import hashlib
import uuid
from typing import TYPE_CHECKING, Any

from sdk._core._checks import (
    PRIORITY_RANGE,
    check_id,
    check_int,
    check_new_run_id,
    check_optional_id,
    check_options,
    show,
)
from sdk._core._retry import RetryPolicy
from sdk._core._serde import converter, dumps
from sdk._core._types import EventType, Reason, RunOptions, RunStatus, Versions
from sdk.client._handle import RunHandle
from sdk.client._runs import raise_refused, run_record
from sdk.client._treecopy import CHILDREN, create_copies, plan_copy
from sdk.errors import CorruptRecord, Forbidden, InvalidArgument, InvalidTransition, RunNotFound
from sdk.store import CheckpointKind, CorruptData, Lineage, NewRun

if TYPE_CHECKING:
    from sdk.client._clientcore import ClientCore

__all__ = ["FORK_OPTIONS", "RunDeriver"]

#: What a fork may change.
FORK_OPTIONS = frozenset(
    {"queue", "priority", "tenant_id", "flow_version", "retry", "environment", "thread_id",
     "trace_id", "versions", "policy_snapshot_id"}
)  # fmt: skip


class RunDeriver:
    """`Client.replay` and `Client.fork`: a new run from a checkpoint of another."""

    __slots__ = ("_core",)

    def __init__(self, core: ClientCore) -> None:
        self._core = core

    async def replay(
        self, run_id: str, checkpoint_id: str | None, actor: str | None,
        new_run_id: str | None, children: str,
    ) -> RunHandle:  # fmt: skip
        return await self._derive("replay", run_id, checkpoint_id, actor, new_run_id, {}, children)

    async def fork(
        self, run_id: str, checkpoint_id: str | None, actor: str | None,
        new_run_id: str | None, children: str, options: dict[str, Any],
    ) -> RunHandle:  # fmt: skip
        unknown = set(options) - FORK_OPTIONS
        if unknown:
            raise InvalidArgument(
                f"fork: unknown option(s) {sorted(unknown)}; known: {sorted(FORK_OPTIONS)}"
            )
        return await self._derive(
            "fork", run_id, checkpoint_id, actor, new_run_id, options, children
        )

    async def _derive(
        self,
        kind: str,
        run_id: str,
        checkpoint_id: str | None,
        actor: str | None,
        new_run_id: str | None,
        options: dict[str, Any],
        children: str,
    ) -> RunHandle:
        check_id(run_id, "run_id")
        if children not in CHILDREN:
            raise InvalidArgument(
                f"{kind}(): children must be one of {', '.join(map(repr, CHILDREN))}, "
                f"got {show(children)}"
            )
        if checkpoint_id is not None and (
            isinstance(checkpoint_id, bool) or not isinstance(checkpoint_id, (str, int))
        ):
            raise InvalidArgument(
                f"{kind}(): checkpoint_id must be a str, got {show(checkpoint_id)}"
            )
        check_optional_id(actor, "actor")
        check_optional_id(new_run_id, "new_run_id")
        _check_fork_options(options)
        core = self._core
        try:
            source = await core.store.read_lineage(run_id)  # the run, read once
        except CorruptData as e:  # a damaged source is not copied
            raise CorruptRecord(e.run_id, e.key, e.detail) from None
        if source is None:
            raise RunNotFound(run_id)
        await core.authorize(actor, kind, run_id, source.run)
        rec = run_record(source.run)
        if options and core.authorizer is not None:
            can_fork = getattr(core.authorizer, "can_fork", None)
            if can_fork is not None and not can_fork(actor, rec, dict(options)):
                await core.audit_denied(
                    run_id, {"actor": actor, "action": "fork", "options": sorted(options)}
                )
                raise Forbidden(f"{actor!r} may not fork run {run_id!r} with {sorted(options)}")
        cps = source.checkpoints
        if not cps:
            raise InvalidTransition(run_id, rec.status, RunStatus.RUNNING)
        wanted = (
            checkpoint_id
            if checkpoint_id is not None
            else str(cps[0 if kind == "replay" else -1].checkpoint_id)
        )
        chosen = next((c for c in cps if str(c.checkpoint_id) == str(wanted)), None)
        if chosen is None:
            raise InvalidArgument(
                f"checkpoint_id: run {run_id!r} has no checkpoint {show(wanted)}; "
                f"its checkpoints are {cps[0].checkpoint_id}..{cps[-1].checkpoint_id}"
            )
        # From the finish of a failed run, the failure that failed it is not
        # copied (as resume discards it): that call runs again in the new run.
        err = rec.error
        dropped = (
            err.step_key
            if chosen.kind is CheckpointKind.RUN_FINISHED
            and rec.status is RunStatus.FAILED
            and err is not None
            and err.reason != Reason.NON_DETERMINISM
            else None
        )
        new = self._new_run(kind, source, rec.flow, str(wanted), new_run_id, options)
        copy = await plan_copy(core.store, source, chosen.seq, dropped, children, new.run_id)
        event = {
            "source_run_id": run_id, "source_checkpoint_id": str(wanted), "actor": actor,
            "options": sorted(options),
        }  # fmt: skip
        if children != "reuse":
            event["children"] = children
        refused = await core.store.derive_run(
            new, copy.seed, sorted(copy.lineage.items()),
            EventType.RUN_REPLAYED if kind == "replay" else EventType.RUN_FORKED, dumps(event),
            copy.mail,
        )  # fmt: skip
        raise_refused(new.run_id, refused)
        # the children its journal names whose outcome it must wait for: after it, so
        # that their end finds their parent
        await create_copies(core.store, copy.children, new, core.registry)
        return RunHandle(core, new.run_id)

    def _new_run(
        self,
        kind: str,
        source: Lineage,
        flow: str,
        wanted: str,
        new_run_id: str | None,
        options: dict[str, Any],
    ) -> NewRun:
        run = source.run
        rec = run_record(run)
        retry = options.get("retry")
        versions = options.get("versions", rec.versions)
        new_id = check_new_run_id(new_run_id or str(uuid.uuid4()), "new_run_id")
        priority = options.get("priority", rec.priority)
        queue = options.get("queue", rec.queue)
        version = options.get("flow_version", rec.flow_version)
        registry = self._core.registry
        fd = registry.find_version(flow, version) or registry.find_flow(flow)
        return NewRun(
            new_id, flow, version, run.args,
            hashlib.sha256(f"{kind}\n{run.run_id}\n{wanted}\n{new_id}".encode()).hexdigest(),
            queue, priority, options.get("tenant_id", rec.tenant_id), self._core.clock.time(),
            thread_id=options.get("thread_id", rec.thread_id),
            trace_id=options.get("trace_id"),
            environment=options.get("environment", rec.environment),
            versions=None if versions == Versions() else dumps(converter.unstructure(versions)),
            policy_snapshot_id=options.get("policy_snapshot_id", rec.policy_snapshot_id),
            source_run_id=run.run_id, source_checkpoint_id=wanted,
            root_run_id=rec.root_run_id or run.run_id,
            retry=retry.to_json() if retry is not None else run.retry,
            retention=fd.retention if fd is not None else None,
            timeout=fd.timeout if fd is not None else None,
        )  # fmt: skip


def _check_fork_options(options: dict[str, Any]) -> None:
    """Every option of a fork can be stored (checked before anything is read or written)."""
    for name, value in options.items():
        what = f"fork(): {name}"
        if name == "queue":
            check_id(value, what)
        elif name == "priority":
            check_int(value, what, PRIORITY_RANGE)
        elif name == "retry":
            if not isinstance(value, RetryPolicy):
                raise InvalidArgument(f"{what} must be a RetryPolicy, got {show(value)}")
        elif name == "versions":
            check_options(RunOptions(versions=value))
        else:
            check_optional_id(value, what)
