"""`Client.export`: a run's record, journal, checkpoints and events as versioned JSON data.

The export is what `testing.replay` checks current flow code against, offline.
Its layout (format 1)::

    {"steadyflow_export": "run", "format": 1, "exported_at": ISO time,
     "run_id": ..., "record": RunRecord (JSON data), "args": the start arguments,
     "result_type": ..., "generation": ..., "retry": ... | null,
     "journal": [record, ...] (in call order), "written": {key: write number},
     "lineage": {key: record}, "checkpoints": [...], "events": [...]}

Records are kept as the engine wrote them (their own format version ``"v"``
included), so an export replays the way the stored journal would.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sdk._core._checks import check_id, show
from sdk._core._serde import converter, dumps, loads
from sdk.client._runs import run_record
from sdk.errors import CorruptRecord, InvalidArgument, RunNotFound
from sdk.store import CorruptData, StoredEvent

if TYPE_CHECKING:
    from sdk.client._clientcore import ClientCore

__all__ = ["EXPORT_FORMAT", "EXPORT_MARKER", "Exporter", "Redact"]

#: The export's format version (its ``"format"``); a reader refuses a newer one.
EXPORT_FORMAT = 1
#: The key whose presence says "this is a Steadyflow export" (its value: what of).
EXPORT_MARKER = "steadyflow_export"

#: ``redact(path, value) -> value``: called on every leaf of every payload.
Redact = Callable[[tuple[str | int, ...], Any], Any]

_PAGE = 1000
_LEAF = (str, int, float, bool, type(None))


class Exporter:
    """`Client.export`."""

    __slots__ = ("_core",)

    def __init__(self, core: ClientCore) -> None:
        self._core = core

    async def export(self, run_id: str, redact: Redact | None) -> dict[str, Any]:
        check_id(run_id, "run_id")
        if redact is not None and not callable(redact):
            raise InvalidArgument(f"export(): redact must be callable, got {show(redact)}")
        store = self._core.store
        try:
            source = await store.read_lineage(run_id)  # record and journal, read once
        except CorruptData as e:
            raise CorruptRecord(e.run_id, e.key, e.detail) from None
        if source is None:
            raise RunNotFound(run_id)
        events: list[StoredEvent] = []
        cursor: str | None = None
        try:
            while True:  # every page of the log
                page = await store.events(run_id, cursor, _PAGE)
                events.extend(page)
                if len(page) < _PAGE:
                    break
                cursor = page[-1].event_id
        except CorruptData as e:
            raise CorruptRecord(e.run_id, e.key, e.detail) from None
        stored = source.run
        try:
            journal = sorted((loads(text) for text in source.journal.values()), key=_pos)
            lineage = {key: loads(text) for key, text in sorted(source.lineage.items())}
            args = loads(stored.args)
            event_data = [loads(e.data) if e.data else None for e in events]
            retry = loads(stored.retry) if stored.retry else None
        except ValueError as e:
            raise CorruptRecord(run_id, store.key_of(run_id, "journal"), str(e)) from None
        data: dict[str, Any] = {
            EXPORT_MARKER: "run",
            "format": EXPORT_FORMAT,
            "exported_at": datetime.fromtimestamp(self._core.clock.time(), UTC).isoformat(),
            "run_id": run_id,
            "record": converter.unstructure(run_record(stored)),
            "args": args,
            "result_type": stored.result_type,
            "generation": stored.generation,
            "retry": retry,
            "journal": journal,
            "written": {k: source.written[k] for k in sorted(source.written, key=str)},
            "lineage": lineage,
            "checkpoints": [
                {
                    "checkpoint_id": str(c.checkpoint_id),
                    "kind": str(c.kind.value),
                    "step_key": c.step_key,
                    "status": str(c.status.value),
                    "at": c.at,
                    "seq": c.seq,
                }
                for c in source.checkpoints
            ],
            "events": [
                {
                    "event_id": e.event_id,
                    "type": str(e.type),
                    "at": e.at,
                    "step_key": e.step_key,
                    "data": d,
                }
                for e, d in zip(events, event_data, strict=True)
            ],
        }
        if redact is not None:
            _redact_payloads(data, redact)
        dumps(data)  # what `json.dumps` will be asked to do: fail here if it cannot
        return data


def _pos(record: dict[str, Any]) -> int:
    pos = record.get("pos")
    return pos if isinstance(pos, int) else -1


def _redact_payloads(data: dict[str, Any], redact: Redact) -> None:
    """Replace every payload leaf of `data` by what `redact` makes of it."""
    data["args"] = _walk(("args",), data["args"], redact)
    record = data["record"]
    for name in ("result", "error"):
        record[name] = _walk(("record", name), record.get(name), redact)
    for section in ("journal", "lineage"):
        items = data[section] if section == "journal" else data[section].values()
        for rec in items:
            for name in ("value", "error"):
                if name in rec:
                    rec[name] = _walk((section, str(rec.get("key")), name), rec[name], redact)
    for event in data["events"]:
        event["data"] = _walk(("events", event["event_id"], "data"), event["data"], redact)


def _walk(path: tuple[str | int, ...], value: Any, redact: Redact) -> Any:
    if isinstance(value, dict):
        return {k: _walk((*path, k), v, redact) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk((*path, i), v, redact) for i, v in enumerate(value)]
    if isinstance(value, _LEAF):
        new = redact(path, value)
        try:
            dumps(new)
        except (TypeError, ValueError) as e:
            raise InvalidArgument(
                f"export(): redact returned {show(new)} for {path!r}, which is not JSON data ({e})"
            ) from None
        return new
    return value
