"""What starting a run writes: the checks and the encoding `Client.start` and
`start_child` share (`new_run`)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sdk._checks import PRIORITY_RANGE, check_id, check_int, check_optional_id, check_options
from sdk._flowdef import FlowDef, encode_call
from sdk._serde import converter, dumps, loads
from sdk._types import RunOptions, Versions
from sdk._values import Serializer
from stores.protocol import NewRun

__all__ = ["new_run"]


def new_run(
    fd: FlowDef | str, args: tuple[Any, ...], kwargs: dict[str, Any], serializer: Serializer, *,
    run_id: str, priority: int, queue: str | None, tenant_id: str | None,
    options: RunOptions | None, now: float, parent_run_id: str | None = None,
    tree_root_run_id: str | None = None, abandon: bool = False,
) -> NewRun:  # fmt: skip
    """The run to create for a call of `fd` (a flow defined here, or the name of
    one defined elsewhere); raises `InvalidArgument` / `SerializationError` for
    options and arguments that cannot be stored, before anything is written."""
    name = fd.name if isinstance(fd, FlowDef) else fd
    check_int(priority, "priority", PRIORITY_RANGE)
    q = queue if queue is not None else (fd.queue if isinstance(fd, FlowDef) else "default")
    check_id(q, "queue")
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
    )  # fmt: skip


def _versions(versions: Versions) -> str | None:
    return None if versions == Versions() else dumps(converter.unstructure(versions))


def _unannotated(index: int | None, name: str | None) -> tuple[str, Any]:
    """A call's parameter, for a flow this process does not define: no annotation."""
    return (str(index) if name is None else name), None
