"""What starting a run writes: the checks and the encoding `Client.start` and
`start_child` share (`new_run`)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from sdk._core._checks import (
    PRIORITY_RANGE,
    check_id,
    check_int,
    check_optional_id,
    check_options,
    show,
)
from sdk._core._clock import seconds
from sdk._core._serde import converter, dumps, loads
from sdk._core._types import RunOptions, Versions
from sdk._core._values import Serializer
from sdk.errors import InvalidArgument
from sdk.model._flowdef import FlowDef, encode_call
from sdk.model._queues import Queue
from sdk.store import NewRun

__all__ = ["new_run"]


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
    at, delay = _delay(start_at, start_in)
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


def _delay(
    start_at: datetime | None, start_in: float | timedelta | None
) -> tuple[float | None, float | None]:
    """A delayed start: (epoch seconds, seconds after creation); at most one given."""
    if start_at is not None and start_in is not None:
        raise InvalidArgument("start_at and start_in cannot both be given: pick one")
    if start_at is not None:
        if not isinstance(start_at, datetime) or start_at.utcoffset() is None:
            raise InvalidArgument(
                f"start_at must be a timezone-aware datetime, got {show(start_at)}"
            )
        at = start_at.timestamp()
        if not math.isfinite(at):
            raise InvalidArgument(f"start_at is out of range: {show(start_at)}")
        return at, None
    if start_in is not None:
        delay = seconds(start_in, "start_in")
        if delay < 0:
            raise InvalidArgument(f"start_in must not be negative, got {show(start_in)}")
        return None, delay
    return None, None


def _versions(versions: Versions) -> str | None:
    return None if versions == Versions() else dumps(converter.unstructure(versions))


def _unannotated(index: int | None, name: str | None) -> tuple[str, Any]:
    """A call's parameter, for a flow this process does not define: no annotation."""
    return (str(index) if name is None else name), None
