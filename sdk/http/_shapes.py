"""JSON Schemas of the records the API answers with, derived from the records.

The answers themselves are `sdk.client._jsonshapes.shape` of each record (the same
JSON as ``steadyflow ... --json``): every attrs field by name, datetimes as
ISO 8601 strings, durations as seconds, enums as their values. The schemas
here are read off the same attrs fields and their annotations, so a field
added to a record appears in the OpenAPI document without an edit here.
"""

from __future__ import annotations

import enum
import types
import typing
from datetime import datetime, timedelta
from typing import Any

import attrs

from sdk._core._types import (
    AuditEntry,
    Checkpoint,
    CheckpointKind,
    ErrorInfo,
    Event,
    EventType,
    Reason,
    RunRecord,
    RunStatus,
    WaitingOn,
    WaitKind,
    WorkerInfo,
)
from sdk.client._timeline import TimelineEntry
from sdk.http._problems import ErrorCode
from sdk.model._queues import QueueInfo
from sdk.model._schedules import ScheduleInfo

__all__ = ["ENUMS", "RECORDS", "components", "ref"]

#: The records answers carry, by their schema name.
RECORDS: tuple[type, ...] = (
    RunRecord, Event, Checkpoint, QueueInfo, WorkerInfo, ScheduleInfo, TimelineEntry, WaitingOn,
    AuditEntry,
)  # fmt: skip
#: The enums shown as enums: statuses, reason codes, event types, error codes.
ENUMS: tuple[type[enum.Enum], ...] = (
    RunStatus, Reason, EventType, CheckpointKind, ErrorCode, WaitKind,
)  # fmt: skip

# Fields whose annotation is a plain str but whose values are an enum's.
_ENUM_FIELDS: dict[tuple[type, str], type[enum.Enum]] = {
    (Event, "type"): EventType,
    (AuditEntry, "type"): EventType,
    (ErrorInfo, "reason"): Reason,
    (WaitingOn, "kind"): WaitKind,
}
_DESCRIBED: dict[type[enum.Enum], str] = {
    RunStatus: "A run's status (docs/lifecycle.md).",
    Reason: "Why a step or a run failed (`ErrorInfo.reason`).",
    EventType: "The type of an event in a run's log.",
    CheckpointKind: "When a checkpoint was taken.",
    ErrorCode: "The stable `code` of an error answer (application/problem+json).",
    WaitKind: "What a waiting run waits for (`WaitingOn.kind`).",
}


def ref(name: str) -> dict[str, Any]:
    """A reference to the component schema `name`."""
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _schema(tp: Any, out: dict[str, Any]) -> dict[str, Any]:
    """The schema of annotation `tp`; records and enums it uses are added to `out`."""
    if tp is Any:
        return {"description": "any JSON value"}
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        inner = _schema(members[0], out) if len(members) == 1 else {}
        return _nullable(inner) if type(None) in typing.get_args(tp) else inner
    if origin in (tuple, list):
        return {"type": "array", "items": _schema(typing.get_args(tp)[0], out)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _schema(typing.get_args(tp)[1], out)}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        _enum(tp, out)
        return ref(tp.__name__)
    if isinstance(tp, type) and attrs.has(tp):
        _record(tp, out)
        return ref(tp.__name__)
    simple: dict[Any, dict[str, Any]] = {
        str: {"type": "string"},
        int: {"type": "integer"},
        float: {"type": "number"},
        bool: {"type": "boolean"},
        datetime: {"type": "string", "format": "date-time"},
        timedelta: {"type": "number", "description": "seconds"},
    }
    return dict(simple.get(tp, {}))


def _enum(cls: type[enum.Enum], out: dict[str, Any]) -> None:
    out[cls.__name__] = {
        "type": "string",
        "enum": [m.value for m in cls],
        "description": _DESCRIBED.get(cls, (cls.__doc__ or "").strip().splitlines()[0]),
    }


def _record(cls: type, out: dict[str, Any]) -> None:
    if cls.__name__ in out:
        return
    out[cls.__name__] = {}  # placed first: a record that refers to itself stops here
    attrs.resolve_types(cls)
    props: dict[str, Any] = {}
    for f in attrs.fields(cls):
        forced = _ENUM_FIELDS.get((cls, f.name))
        if forced is not None:
            _enum(forced, out)
            props[f.name] = ref(forced.__name__)
            if typing.get_origin(f.type) in (types.UnionType, typing.Union):
                props[f.name] = _nullable(props[f.name])
        else:
            props[f.name] = _schema(f.type, out)
    doc = (cls.__doc__ or "").strip().splitlines()
    out[cls.__name__] = {
        "type": "object",
        "description": doc[0] if doc else cls.__name__,
        "properties": props,
        # `shape` writes every field, also at its default
        "required": [f.name for f in attrs.fields(cls)],
    }


def components() -> dict[str, Any]:
    """The schemas of every record and enum the API uses, by name."""
    out: dict[str, Any] = {}
    for cls in ENUMS:
        _enum(cls, out)
    for record in RECORDS:
        _record(record, out)
    # `timeline_shape` adds the entry's duration (a property, not a field)
    entry = out["TimelineEntry"]
    entry["properties"]["duration"] = _nullable({"type": "number", "description": "seconds"})
    entry["required"].append("duration")
    return dict(sorted(out.items()))
