"""A run's timeline (steps, waits, sleeps, retries, children, lifecycle events as a
time-ordered tree), read from `Client.export` and the run's child flows. For
``steadyflow runs timeline``, the HTTP API and the console; needs no flow code.

Entries are placed by the event log, in its order and at its times: a step
begins at its ``step.started`` event when the run records them, else at the
event before the step's first own event (where the activation had got to); a
wait or sleep begins at the ``run.waiting_*`` event that parked the run for
it, and ends at its ``wait.completed`` / ``wait.timed_out`` event (a sleep that
fired before that event was written, by an older version: at its due time).
Concurrent calls (``asyncio.gather``) therefore show overlapping entries.

Labels are what the flow wrote (``approval refund``, ``signal go``, ``event
carrier.pickup``, ``child shop.line``, ``until 10:42:03Z``): journal keys in the
reserved ``~`` namespace are not shown (`sdk._core._waiting.key_label`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import attrs

from sdk._core._types import EventType, RunRecord, WaitingOn, WaitKind
from sdk._core._waiting import from_data, key_label
from sdk.client._runs import utc

if TYPE_CHECKING:
    from sdk.client._client import Client

__all__ = [
    "TimelineEntry", "entries", "run_duration", "run_entry", "start_of", "timeline",
]  # fmt: skip

# the event that ends a step or wait -> the entry's status
_ENDS: dict[str, str] = {
    EventType.STEP_COMPLETED: "completed", EventType.STEP_FAILED: "failed",
    EventType.WAIT_COMPLETED: "completed", EventType.WAIT_TIMED_OUT: "timed_out",
}  # fmt: skip
_PARKED = (EventType.RUN_WAITING_FOR_SIGNAL, EventType.RUN_WAITING_FOR_HUMAN)
# journal records shown as lifecycle events, not entries of their own (a child flow is
# shown as its own run)
_SKIPPED_KINDS = ("now", "uuid", "patch", "timer", "cancel", "child")


@attrs.frozen
class TimelineEntry:
    """One line of a timeline; `entries` are the lines under it, oldest first.

    Attributes:
        kind: ``run``, ``step``, ``wait``, ``sleep``, ``retry``, ``child`` or
            ``event`` (a lifecycle event of the run: started, resumed, lease
            expired, signal received...).
        label: the run id, step key, wait name, event type.
        status: ``completed``, ``failed``, ``timed_out``, ``waiting``,
            ``retrying``, ``unfinished`` (a wait of a run that ended first) or a
            run status; None for an event.
        started_at: when it began (an event: when it happened).
        ended_at: when it ended; None while it goes on (or for an event).
        detail: the error, the retry's due time, who signaled...
        entries: what happened within it.
    """

    kind: str
    label: str
    status: str | None
    started_at: datetime | None
    ended_at: datetime | None = None
    detail: str | None = None
    entries: list[TimelineEntry] = attrs.field(factory=list)

    @property
    def duration(self) -> float | None:
        """Seconds from start to end, None while it goes on."""
        if self.started_at is None or self.ended_at is None:
            return None
        return max((self.ended_at - self.started_at).total_seconds(), 0.0)


async def timeline(client: Client, run_id: str, *, depth: int = 1) -> TimelineEntry:
    """The run's timeline; child flows `depth` levels down get their own (0: listed
    as one line each). Raises `RunNotFound`, `CorruptRecord`."""
    export = await client.export(run_id)
    return await _timeline(client, await client.get(run_id), export, depth)


async def _timeline(
    client: Client, record: RunRecord, export: dict[str, Any], depth: int
) -> TimelineEntry:
    """`timeline` of `record`'s run, whose `export` is given (a child's record is
    the one `list_runs` gave: not read again)."""
    root = run_entry(record, "run")
    root.entries.extend(entries(export))
    children = await client.list_runs(parent_run_id=record.run_id, limit=1000)
    for child in reversed(children):  # oldest first, as the entries they join
        if depth > 0:
            sub = await _timeline(client, child, await client.export(child.run_id), depth - 1)
            root.entries.append(attrs.evolve(sub, kind="child"))
        else:
            root.entries.append(run_entry(child, "child"))
    root.entries.sort(key=start_of)
    return root


def run_duration(record: RunRecord, now: datetime | None = None) -> float | None:
    """Seconds from the run's creation to its end, or (still going) to `now`."""
    end = record.finished_at or now
    if end is None:
        return None
    return max((end - record.created_at).total_seconds(), 0.0)


def run_entry(record: RunRecord, kind: str) -> TimelineEntry:
    error = record.error
    detail = f"{error.type}: {error.message}" if error is not None else None
    if detail is None and record.status.value == "canceled":
        detail = record.reason
    return TimelineEntry(
        kind, f"{record.run_id} ({record.flow})", record.status.value,
        record.created_at, record.finished_at, detail,
    )  # fmt: skip


def entries(export: dict[str, Any]) -> list[TimelineEntry]:
    """The entries of an exported run's own timeline (no child runs), in event order."""
    recs = {str(r.get("key")): r for r in export["journal"]}
    waiting = from_data(export["record"].get("waiting_on"))
    at_of: dict[str, int] = {}  # step key -> its entry's index in `out`
    out: list[TimelineEntry] = []
    prev: datetime | None = None
    parked: datetime | None = None  # the last run.waiting_* event
    done: datetime | None = None  # the last end of a step or wait
    for ev in export["events"]:
        at = _time(ev["at"]) or datetime.now(UTC)
        kind, key, data = str(ev["type"]), ev.get("step_key"), ev.get("data")
        rec = recs.get(key) if key is not None else None
        if rec is None or rec.get("kind") in _SKIPPED_KINDS:
            if kind in _PARKED:
                parked = at
            elif rec is None or kind not in _ENDS:  # a timer that fired: no line of its own
                out.append(TimelineEntry("event", kind, None, at, detail=_said(data)))
            prev = at
            continue
        assert key is not None
        if key not in at_of:
            jkind = str(rec.get("kind"))
            begun = prev
            if jkind in ("wait", "sleep") and parked is not None:
                # parked for it, unless the run went on since (a signal already there)
                begun = parked if done is None or parked >= done else done
            at_of[key] = len(out)
            out.append(TimelineEntry(jkind, _label(key, rec, waiting), "running", begun or at))
        i = at_of[key]
        if kind == EventType.STEP_STARTED:
            out[i] = attrs.evolve(out[i], started_at=at)
        elif kind == EventType.STEP_RETRY_SCHEDULED and isinstance(data, dict):
            out[i].entries.append(TimelineEntry(
                "retry", f"attempt {data.get('attempt')} failed", "retrying", at,
                _time(data.get("due")), f"{data.get('type')}: {data.get('message')}",
            ))  # fmt: skip
        elif kind in _ENDS:
            said = None if out[i].kind == "sleep" else _said(data)
            out[i] = attrs.evolve(out[i], status=_ENDS[kind], ended_at=at, detail=said)
            done = at
        prev = at
    out.extend(_journal_only(export, set(at_of), parked, waiting))
    return out


def _journal_only(
    export: dict[str, Any],
    seen: set[str],
    parked: datetime | None,
    waiting: tuple[WaitingOn, ...],
) -> list[TimelineEntry]:
    """Records with no event of their own (waits still pending; sleeps that fired
    before their end was logged)."""
    waits = [_time(e["at"]) for e in export["events"] if e["type"] in _PARKED]
    ended_run = export["record"].get("status") in ("completed", "failed", "canceled")
    out = []
    for rec in export["journal"]:
        key, kind, state = str(rec.get("key")), rec.get("kind"), rec.get("state")
        if key in seen or kind not in ("sleep", "wait", "step"):
            continue
        due = _time(rec.get("due"))
        begun = max((w for w in waits if w is not None and (due is None or w <= due)), default=None)
        if state == "ok":
            ended, status = (due if kind == "sleep" else None), "completed"
        elif state in ("pending", "retry") and ended_run:
            ended, status = None, "unfinished"  # the run ended while it waited
        elif state in ("pending", "retry"):
            ended, status = None, "waiting" if state == "pending" else "retrying"
        else:
            ended, status = None, str(state)
        detail = None
        if due is not None and ended is None and kind != "sleep":
            detail = f"until {_when(due)}"
        label = _label(key, rec, waiting)
        out.append(TimelineEntry(str(kind), label, status, begun or parked, ended, detail))
    return out


def _label(key: str, rec: dict[str, Any], waiting: tuple[WaitingOn, ...]) -> str:
    """What the flow wrote: ``approval refund``, ``signal go``, ``event paid where
    order_id='o-1'``, ``child shop.line``, ``until 2026-05-01T10:42:03Z``."""
    kind = rec.get("kind")
    if kind == "sleep":
        due = _time(rec.get("due"))
        return f"until {_when(due)}" if due is not None else "sleep"
    if kind != "wait":
        return key_label(key) or key
    if not key.startswith("~"):  # a replayed step's approval (replay="require_human")
        return f"approval replay:{key}"
    label = key_label(key) or key
    name = label.partition(" ")[2]
    if key.startswith("~wait:"):
        human = _decision(rec.get("value")) or any(
            w.kind == WaitKind.HUMAN and w.name == name for w in waiting
        )
        return f"{'approval' if human else 'signal'} {name}"
    if key.startswith("~event:") and rec.get("state") == "pending":
        match = next(
            (w.match for w in waiting if w.kind == WaitKind.EVENT and w.name == name), None
        )
        if match:
            label += " where " + ", ".join(f"{k}={v!r}" for k, v in match.items())
    return label


def _decision(value: Any) -> bool:
    """Whether a wait's recorded value is a human decision (`Decision` as JSON)."""
    return isinstance(value, dict) and isinstance(value.get("approved"), bool) and "actor" in value


def _when(at: datetime) -> str:
    return at.isoformat(timespec="seconds").replace("+00:00", "Z")


def start_of(entry: TimelineEntry) -> float:
    """Sort key: when `entry` began (unknown: last)."""
    return entry.started_at.timestamp() if entry.started_at is not None else float("inf")


def _time(value: Any) -> datetime | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return utc(float(value))


def _said(data: Any) -> str | None:
    """A short text of an event's data (who, why, what failed)."""
    if not isinstance(data, dict):
        return None
    if "type" in data and "message" in data:
        return f"{data['type']}: {data['message']}"
    parts = [f"{k}={data[k]}" for k in ("name", "decision", "actor", "reason") if data.get(k)]
    return ", ".join(parts) or None
