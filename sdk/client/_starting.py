"""Starting runs: `RunStarter`, the part of `Client` that creates them (its
interceptors around one store write), and the checks and the encoding
`Client.start` and `start_child` share (`new_run`)."""

from __future__ import annotations

import functools
import hashlib
import json
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
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
from sdk._core._clock import LATEST, in_range, instant, seconds
from sdk._core._serde import converter, dumps, loads
from sdk._core._types import RunOptions, RunRecord, RunStatus, Versions
from sdk._core._values import Serializer
from sdk.client._handle import RunHandle
from sdk.client._runs import utc
from sdk.errors import CorruptRecord, IdempotencyConflict, InvalidArgument, QueueFull
from sdk.model._flowdef import FlowDef, encode_call
from sdk.model._queues import Queue
from sdk.store import CorruptData, NewRun

if TYPE_CHECKING:
    from sdk.client._clientcore import ClientCore

__all__ = ["RunStarter", "new_run", "pending_record"]


class RunStarter:
    """Creates runs: `Client.start`, and the ``on_event`` runs `Client.send_event` starts."""

    __slots__ = ("_core",)

    def __init__(self, core: ClientCore) -> None:
        self._core = core

    async def start(
        self, flow: Callable[..., Any] | str, args: tuple[Any, ...], kwargs: dict[str, Any], *,
        run_id: str | None, priority: int = 0, queue: str | None = None,
        tenant_id: str | None = None, options: RunOptions | None = None,
        cause: dict[str, Any] | None = None, concurrency_key: str | None = None,
        start_at: datetime | None = None, start_in: float | timedelta | None = None,
        actor: str | None = None,
    ) -> tuple[RunHandle, bool]:  # fmt: skip
        """`Client.start`, also saying whether it created the run; `cause` joins the
        ``run.created`` event's data (e.g. the event that started it), as does
        `actor` (who starts it: the authorizer, if any, is asked for ``start``)."""
        core = self._core
        fd = core.flow_def(flow)
        run_id = check_new_run_id(run_id if run_id is not None else str(uuid.uuid4()), "run_id")
        check_optional_id(actor, "start(): actor")
        create = functools.partial(
            self._create, fd, args, kwargs, run_id=run_id, priority=priority, queue=queue,
            tenant_id=tenant_id, cause=cause, concurrency_key=concurrency_key,
            start_at=start_at, start_in=start_in, actor=actor,
        )  # fmt: skip
        if not core.interceptors:
            return await create(options)
        name = fd.name if isinstance(fd, FlowDef) else fd
        for hook in core.interceptors:
            options = hook.run_starting(name, run_id, options or RunOptions())
        error: BaseException | None = None
        try:
            return await create(options)
        except BaseException as exc:
            error = exc
            raise
        finally:
            for hook in reversed(core.interceptors):
                hook.run_started(run_id, error)

    async def _create(
        self, fd: FlowDef | str, args: tuple[Any, ...], kwargs: dict[str, Any],
        options: RunOptions | None, *, run_id: str, priority: int, queue: str | None,
        tenant_id: str | None, cause: dict[str, Any] | None, concurrency_key: str | None,
        start_at: datetime | None, start_in: float | timedelta | None, actor: str | None,
    ) -> tuple[RunHandle, bool]:  # fmt: skip
        core = self._core
        queues = core.registry.queues()
        new = new_run(
            fd, args, kwargs, core.serializer, run_id=run_id, priority=priority, queue=queue,
            tenant_id=tenant_id, options=options, now=core.clock.time(),
            concurrency_key=concurrency_key, start_at=start_at, start_in=start_in, queues=queues,
        )  # fmt: skip
        if actor is not None:  # (the record asked about is made only for a call that names one)
            await core.authorize_new(actor, "start", pending_record(new), f"run {run_id!r}")
        declared = queues.get(new.queue)
        try:
            data = {
                "flow": new.flow, "queue": new.queue, "priority": priority, "actor": actor,
                **(cause or {}),
            }  # fmt: skip
            outcome = await core.store.create_run(
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
        return RunHandle(core, run_id), outcome.created


def new_run(
    fd: FlowDef | str, args: tuple[Any, ...], kwargs: dict[str, Any], serializer: Serializer, *,
    run_id: str, priority: int, queue: str | None, tenant_id: str | None,
    options: RunOptions | None, now: float, parent_run_id: str | None = None,
    tree_root_run_id: str | None = None, abandon: bool = False,
    concurrency_key: str | None = None, start_at: datetime | None = None,
    start_in: float | timedelta | None = None, queues: Mapping[str, Queue] | None = None,
) -> NewRun:  # fmt: skip
    """The run to create for a call of `fd` (a flow defined here, or the name of
    one defined elsewhere); raises `InvalidArgument` / `SerializationError` for
    options and arguments that cannot be stored, before anything is written."""
    name = fd.name if isinstance(fd, FlowDef) else fd
    check_int(priority, "priority", PRIORITY_RANGE)
    q = queue if queue is not None else (fd.queue if isinstance(fd, FlowDef) else "default")
    check_id(q, "queue")
    declared = (queues or {}).get(q)
    if declared is not None and not declared.priority and priority != 0:
        raise InvalidArgument(
            f"queue {q!r} is FIFO (Queue(priority=False)): priority must be 0, got {priority}"
        )
    check_optional_id(concurrency_key, "concurrency_key")
    at, delay = _delay(start_at, start_in, now)
    check_optional_id(tenant_id, "tenant_id")
    opts = check_options(options)
    if isinstance(fd, FlowDef):
        args_json = fd.encode_args(args, kwargs, serializer)
        version = fd.version
        # Keyword order, and positional vs keyword, are not part of a call's identity.
        canonical = fd.call_identity(args_json)
    else:
        # a flow this process does not define: no annotations here, so its
        # values keep their types by recorded type paths (the worker's
        # annotations, if any, win)
        for k in kwargs:
            check_id(k, f"flow {name!r} keyword name")
        args_json = encode_call(name, args, kwargs, serializer, _unannotated)
        version = None
        canonical = json.dumps(
            loads(args_json), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
    digest = hashlib.sha256(f"{name}\n{canonical}".encode()).hexdigest()
    return NewRun(
        run_id, name, version, args_json, digest, q, priority, tenant_id, now,
        thread_id=opts.thread_id, trace_id=opts.trace_id, environment=opts.environment,
        versions=_versions(opts.versions), policy_snapshot_id=opts.policy_snapshot_id,
        retention=fd.retention if isinstance(fd, FlowDef) else None,
        timeout=fd.timeout if isinstance(fd, FlowDef) else None,
        parent_run_id=parent_run_id, tree_root_run_id=tree_root_run_id, abandon=abandon,
        concurrency_key=concurrency_key, start_at=at, start_in=delay,
    )  # fmt: skip


def pending_record(new: NewRun, *, schedule_id: str | None = None) -> RunRecord:
    """The record of `new` as it will be once created (pending): what the authorizer
    is asked about before a start, or a schedule operation, writes anything."""
    return RunRecord(
        run_id=new.run_id, flow=new.flow, status=RunStatus.PENDING,
        created_at=utc(new.created_at), queue=new.queue, priority=new.priority,
        flow_version=new.flow_version, tenant_id=new.tenant_id, thread_id=new.thread_id,
        trace_id=new.trace_id or new.run_id, environment=new.environment,
        versions=Versions() if new.versions is None else converter.structure(
            loads(new.versions), Versions
        ),
        policy_snapshot_id=new.policy_snapshot_id, root_run_id=new.run_id,
        parent_run_id=new.parent_run_id, tree_root_run_id=new.tree_root_run_id,
        schedule_id=schedule_id, concurrency_key=new.concurrency_key,
        start_at=_when(new.start_at),
    )  # fmt: skip


def _when(at: float | None) -> datetime | None:
    """A delayed start's time, as a datetime (None when there is none or it has none)."""
    try:
        return None if at is None else utc(at)
    except (ValueError, OverflowError, OSError):  # beyond datetime: the start's own checks say
        return None


def _delay(
    start_at: datetime | None, start_in: float | timedelta | None, now: float
) -> tuple[float | None, float | None]:
    """A delayed start: (epoch seconds, seconds after creation); at most one given,
    and a time `instant` accepts either way (so that every reader can show it)."""
    if start_at is not None and start_in is not None:
        raise InvalidArgument("start_at and start_in cannot both be given: pick one")
    if start_at is not None:
        return instant(start_at, "start_at"), None
    if start_in is not None:
        delay = seconds(start_in, "start_in")
        if delay < 0:
            raise InvalidArgument(f"start_in must not be negative, got {show(start_in)}")
        if not in_range(now + delay):
            raise InvalidArgument(
                f"start_in: {show(start_in)} from now is after {LATEST.isoformat()}"
            )
        return None, delay
    return None, None


def _versions(versions: Versions) -> str | None:
    return None if versions == Versions() else dumps(converter.unstructure(versions))


def _unannotated(index: int | None, name: str | None) -> tuple[str, Any]:
    """A call's parameter, for a flow this process does not define: no annotation."""
    return (str(index) if name is None else name), None
