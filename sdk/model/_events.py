"""Events matched by key: how a ``wait_for_event`` filter is indexed, and
what `Client.send_event` looks up and starts.

A filter (``match``: top-level fields that must equal the event's) has a
*shape*, its sorted field names, and a *token*: a hash of the event name, the
shape and the fields' values as canonical JSON. A waiting run sits in the
index of its token; the store also keeps, per event name, the shapes in use.
A send computes, for each shape, the one token its data gives, so it reads
O(shapes) indexes and touches only the runs listening there, never every
waiting run. Values compare as JSON: ``1`` and ``1.0`` differ, as do
``"1"`` and ``1``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from sdk._core._checks import check_id, show
from sdk._core._values import Serializer
from sdk.errors import InvalidArgument, SerializationError
from sdk.store import EventWatch, Mailbox

__all__ = [
    "check_event_data",
    "event_mailbox",
    "json_data",
    "match_data",
    "run_id_for",
    "tokens_for",
    "watch_for",
]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _token(event: str, shape: str, values: Iterable[Any]) -> str:
    # canonical JSON holds no raw newline, so the joined text is unambiguous
    text = "\n".join([event, shape, *(_canonical(v) for v in values)])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def event_mailbox(token: str) -> Mailbox:
    """The mailbox a filter's events are delivered to (in the reserved ``~`` namespace)."""
    return Mailbox(f"~event:{token}")


def json_data(value: Any, serializer: Serializer, what: str) -> Any:
    """`value` as JSON data; a value JSON would hand back as another type is refused."""
    data, tpath = serializer.encode(value, None, what)
    if tpath is not None:
        raise SerializationError(
            f"{what}: a {tpath.replace('builtins:', '')} would come back as "
            f"{type(data).__name__} {show(data, 60)}; use plain JSON data (dict, list, "
            "str, int, float, bool, None)"
        )
    return data


def check_event_data(event: str, data: Any) -> None:
    """Refuse event data no wait can tell apart: a filter matches top-level fields
    of a JSON object, so an event's data is an object (field -> value) or null."""
    if data is not None and not isinstance(data, dict):
        raise InvalidArgument(
            f"data of event {event!r} must be a JSON object (field -> value) or null, got "
            f"{type(data).__name__} {show(data, 60)}: wait_for_event filters match the fields "
            'of an event\'s data (send {"value": ...} to carry one value)'
        )


def match_data(event: str, match: Any, serializer: Serializer) -> dict[str, Any]:
    """The filter of ``wait_for_event(event, match=match)`` as JSON data, by field
    name (sorted); raises `InvalidArgument` / `SerializationError` for a bad one."""
    if match is None:
        match = {}
    if not isinstance(match, Mapping):
        raise InvalidArgument(
            f"wait_for_event({event!r}): match must be a dict of field -> value, got "
            f"{type(match).__name__}: {show(match)}"
        )
    fields = sorted(check_id(f, f"wait_for_event({event!r}): a match field") for f in match)
    return {
        f: json_data(match[f], serializer, f"wait_for_event({event!r}): match[{f!r}]")
        for f in fields
    }


def watch_for(event: str, match: Any, serializer: Serializer) -> EventWatch:
    """The index entry of ``wait_for_event(event, match=match)``."""
    data = match_data(event, match, serializer)
    shape = _canonical(list(data))
    return EventWatch(event, shape, _token(event, shape, data.values()))


def tokens_for(event: str, data: Any, shapes: Iterable[str]) -> list[str]:
    """The tokens an event's JSON data gives for each shape in use (a shape whose
    fields the data does not all have gives none)."""
    tokens = []
    for shape in sorted(shapes):
        try:
            fields = json.loads(shape)
        except ValueError:
            continue  # not written by this engine: nothing of ours listens there
        if not isinstance(fields, list):
            continue
        if fields and not (isinstance(data, dict) and all(f in data for f in fields)):
            continue
        tokens.append(_token(event, shape, [data[f] for f in fields]))
    return tokens


def run_id_for(flow: str, event_id: str) -> str:
    """The run an ``on_event`` flow starts for one event: the same event id, the same run."""
    return f"{flow}:{event_id}"
