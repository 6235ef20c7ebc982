"""The JSON shapes of the records operators read: one serialization for every surface.

``steadyflow ... --json`` prints them and the HTTP runtime API answers with
them, so a script written against one reads the other. Each shape is the
record's attrs fields, *every* field present (a field at its default is
written too, unlike the journal's compact form), values through the one
converter (`sdk._core._serde.converter`): datetimes as ISO 8601 strings with their
UTC offset, enums as their string values, tuples as lists, durations
(`timedelta`) as seconds. A new field of a record appears as a new key; no key
is renamed or dropped without a changelog entry (docs/operations.md,
"JSON shapes").

Example::

    shape(await client.get("order-42"))  # {"run_id": "order-42", "flow": ..., ...}
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import attrs

from sdk._core._serde import converter
from sdk._core._types import RunRecord
from sdk.client._timeline import TimelineEntry

__all__ = ["run_page_shape", "shape", "shapes", "timeline_shape"]


def shape(record: Any) -> dict[str, Any]:
    """The JSON data of an attrs record (`RunRecord`, `Event`, `Checkpoint`,
    `WorkerInfo`, `QueueInfo`, `ScheduleInfo`, `Intent`...): every field, by name."""
    if not attrs.has(type(record)):
        raise TypeError(f"shape(): {type(record).__qualname__} is not an attrs record")
    return {f.name: _value(getattr(record, f.name)) for f in attrs.fields(type(record))}


def shapes(records: Any) -> list[dict[str, Any]]:
    """`shape` of each record, in order."""
    return [shape(r) for r in records]


def run_page_shape(runs: list[RunRecord], next_cursor: str | None) -> dict[str, Any]:
    """A page of runs: ``{"runs": [run...], "next_cursor": str | null}``."""
    return {"runs": shapes(runs), "next_cursor": next_cursor}


def timeline_shape(entry: TimelineEntry) -> dict[str, Any]:
    """A `TimelineEntry` with its `duration` (seconds or null), its entries likewise."""
    data = shape(entry)
    data["duration"] = entry.duration
    data["entries"] = [timeline_shape(e) for e in entry.entries]
    return data


def _value(value: Any) -> Any:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if attrs.has(type(value)):
        return shape(value)
    if isinstance(value, tuple) and any(attrs.has(type(v)) for v in value):
        return [_value(v) for v in value]  # records in a tuple: every field too
    try:
        return converter.unstructure(value)
    except Exception:  # a result of a user type the converter cannot take apart
        return repr(value)
