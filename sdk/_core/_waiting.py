"""What a waiting run waits for, as its flow wrote it (`RunRecord.waiting_on`).

The journal names a wait by its key in the reserved namespace (``~wait:go#1``,
``~event:paid#1``, ``~result:shop.line#2``, ``~sleep#1``): that is the engine's
bookkeeping, shown only in a raw journal view. Operators see `WaitingOn`
entries instead: a human approval, a signal, an event with its match, a child
run, a sleep until a time, a retry. The engine describes the calls a run parks
on (`sdk.engine._waits.describe`) and the park writes the list with the waiting status, in the
same script (`encode`); `decode` reads it back, tolerantly (an old record has
none; an entry that cannot be read is skipped). For a run parked before the
list was kept, `from_journal` derives it from the journal's pending records.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import attrs

from sdk._core._types import MAX_WAITING_ON, RunStatus, WaitingOn, WaitKind

if TYPE_CHECKING:
    from sdk._core._types import RunRecord

__all__ = [
    "WaitGroup",
    "at",
    "capped",
    "current",
    "decode",
    "encode",
    "from_data",
    "from_journal",
    "groups",
    "key_label",
    "kinds",
    "matches",
    "runs_waiting_on",
    "summary",
]  # fmt: skip


def at(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC)


def capped(entries: Sequence[WaitingOn]) -> list[WaitingOn]:
    """At most `MAX_WAITING_ON` entries, in call order, the first of each kind
    among them (so a filter by kind sees every kind the run waits on)."""
    if len(entries) <= MAX_WAITING_ON:
        return list(entries)
    firsts: dict[str, int] = {}
    for i, entry in enumerate(entries):
        firsts.setdefault(entry.kind, i)
    keep = set(firsts.values())
    for i in range(len(entries)):
        if len(keep) >= MAX_WAITING_ON:
            break
        keep.add(i)
    return [entries[i] for i in sorted(keep)]


def encode(entries: Sequence[WaitingOn]) -> str:
    """The stored form: a JSON list, deadlines as epoch seconds (opaque to stores)."""
    out = []
    for entry in capped(entries):
        item: dict[str, Any] = {"kind": str(entry.kind)}
        if entry.name is not None:
            item["name"] = entry.name
        if entry.deadline is not None:
            item["deadline"] = entry.deadline.timestamp()
        if entry.match is not None:
            item["match"] = entry.match
        out.append(item)
    return json.dumps(out, separators=(",", ":"), ensure_ascii=False)


def decode(text: str | None) -> tuple[WaitingOn, ...]:
    """The entries of a stored list; () for none. Never raises: what cannot be read
    (not a list, an entry without a kind, a deadline that is not a time) is skipped,
    since the list only describes the run (its journal is the truth)."""
    if not text:
        return ()
    try:
        items = json.loads(text)
    except ValueError:
        return ()
    return from_data(items)


def from_data(items: Any) -> tuple[WaitingOn, ...]:
    """`decode` of JSON data: the stored list, or a record's `waiting_on` as
    `Client.export` gives it (deadlines as ISO 8601 text)."""
    if not isinstance(items, list):
        return ()
    out = []
    for item in items:
        entry = _entry(item)
        if entry is not None:
            out.append(entry)
    return tuple(out)


_KINDS = frozenset(k.value for k in WaitKind)


def _entry(item: Any) -> WaitingOn | None:
    if not isinstance(item, dict) or not isinstance(item.get("kind"), str):
        return None
    kind: str = item["kind"]
    if kind in _KINDS:  # else a kind of a newer version: kept as its string
        kind = WaitKind(kind)
    name = item.get("name")
    deadline = item.get("deadline")
    match = item.get("match")
    when = None
    if isinstance(deadline, str):
        with contextlib.suppress(ValueError):
            parsed = datetime.fromisoformat(deadline)
            when = parsed if parsed.tzinfo is not None else None
    elif isinstance(deadline, int | float) and not isinstance(deadline, bool):
        try:
            when = at(float(deadline)) if math.isfinite(deadline) else None
        except (OverflowError, OSError, ValueError):
            when = None
    return WaitingOn(
        kind,
        name if isinstance(name, str) else None,
        when,
        match if isinstance(match, dict) else None,
    )


def matches(record: RunRecord, kind: str) -> bool:
    """Whether `record` waits (now) on something of `kind`."""
    return any(w.kind == kind for w in record.waiting_on)


#: The most runs a filtered listing reads per status (`Client.list_runs`'s page limit).
_MOST = 100_000


async def runs_waiting_on(
    read: Callable[[RunStatus, int], Awaitable[list[RunRecord]]],
    kind: WaitKind,
    status: RunStatus | None,
    limit: int,
) -> list[RunRecord]:
    """The newest `limit` runs waiting on something of `kind` (of `status`, when
    given), newest first. `read(status, n)` lists the newest `n` runs of a status
    (with the caller's other filters): reads grow until `limit` match or the
    statuses are read to their end. A human approval parks a run in
    ``waiting_for_human``: only that status is read for it."""
    statuses = [RunStatus.WAITING_FOR_HUMAN]
    if kind is not WaitKind.HUMAN:
        statuses.insert(0, RunStatus.WAITING_FOR_SIGNAL)
    if status is not None:
        statuses = [s for s in statuses if s is status]
    fetch = min(max(2 * limit, 100), _MOST)
    while True:
        found: list[RunRecord] = []
        done = True
        for st in statuses:
            rows = await read(st, fetch)
            done = done and len(rows) < fetch
            found.extend(r for r in rows if matches(r, kind))
        found.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
        if len(found) >= limit or done or fetch >= _MOST:
            return found[:limit]
        fetch = min(fetch * 4, _MOST)


# -- runs parked before the list was kept -------------------------------------------

_PREFIXES = (
    ("~wait:", None), ("~event:", WaitKind.EVENT), ("~result:", WaitKind.CHILD),
    ("~sleep", WaitKind.SLEEP), ("~timer", WaitKind.SLEEP),
)  # fmt: skip


def from_journal(export: dict[str, Any]) -> list[WaitingOn]:
    """What an exported run waits for, from its journal's pending records (a run
    parked by a version that did not keep `RunRecord.waiting_on`). A ``wait_for``
    counts as a human approval when the run waits for one (its status says so,
    the journal does not); a child's run id and an event's match are not in the
    journal: the child's flow and the event's name stand for them."""
    status = export.get("record", {}).get("status")
    human = status == RunStatus.WAITING_FOR_HUMAN.value
    found = []
    for rec in export.get("journal", ()):
        key, state, due = str(rec.get("key")), rec.get("state"), rec.get("due")
        deadline = due if isinstance(due, int | float) and not isinstance(due, bool) else None
        if state == "retry":
            found.append(WaitingOn(WaitKind.RETRY, key, at(deadline)))
            continue
        if state != "pending":
            continue
        if not key.startswith("~"):  # a step's approval (require_human replay)
            found.append(WaitingOn(WaitKind.HUMAN, f"replay:{key}"))
            continue
        for prefix, kind in _PREFIXES:
            if key.startswith(prefix):
                name = _name(key.removeprefix(prefix)) or None
                if kind is None:
                    kind = WaitKind.HUMAN if human else WaitKind.SIGNAL
                if kind is WaitKind.SLEEP:
                    name = None
                found.append(WaitingOn(kind, name, at(deadline)))
                break
    return found


def _name(rest: str) -> str:
    """``approve#1`` -> ``approve``."""
    return rest.rpartition("#")[0] or rest


def current(record: RunRecord, export: dict[str, Any] | None) -> list[WaitingOn]:
    """What `record`'s run waits for now: its `waiting_on`, else (a run parked by
    an older version) what its exported journal says; nothing once it left waiting."""
    if record.status not in (RunStatus.WAITING_FOR_SIGNAL, RunStatus.WAITING_FOR_HUMAN):
        return []
    if record.waiting_on or export is None:
        return list(record.waiting_on)
    return from_journal(export)


def kinds(entries: Iterable[WaitingOn]) -> list[str]:
    """The kinds among `entries`, each once, in order."""
    return list(dict.fromkeys(str(e.kind) for e in entries))


# -- journal keys as people read them -------------------------------------------------

_KEY_WORDS = (
    ("~wait:", "wait"), ("~event:", "event"), ("~result:", "child"), ("~child:", "start child"),
    ("~patch:", "patch"), ("~emit:", "emit"), ("~deliver:", "delivery"),
)  # fmt: skip
_KEY_CALLS = {
    "~sleep": "sleep", "~timer": "timer", "~now": "now()", "~uuid4": "uuid4()",
    "~cancel": "cancel given to the flow", "~continue_as_new": "continue as new",
}  # fmt: skip


def key_label(key: str | None) -> str | None:
    """A journal key as an operator reads it: a step's key as it is (``charge#1``),
    a built-in call by what it is (``~wait:approve#1`` -> ``wait approve``,
    ``~result:shop.line#2`` -> ``child shop.line``, ``~sleep#1`` -> ``sleep``)."""
    if key is None or not key.startswith("~"):
        return key
    for prefix, word in _KEY_WORDS:
        if key.startswith(prefix):
            rest = key.removeprefix(prefix)
            if word in ("emit", "delivery"):
                return word  # an idempotency key: nothing a person looks for
            return f"{word} {_name(rest) if '#' in rest else rest}"
    base = key.partition("#")[0]
    return _KEY_CALLS.get(base, base.lstrip("~"))


_WORDS: dict[str, str] = {WaitKind.HUMAN: "approval"}


@attrs.frozen
class WaitGroup:
    """The entries of one kind, for a short display: the kind, the word for it
    (``approval`` for a human wait), their names and the earliest deadline."""

    kind: str
    word: str
    names: tuple[str, ...]
    count: int
    deadline: datetime | None


def groups(entries: Sequence[WaitingOn]) -> list[WaitGroup]:
    """`entries` by kind, in the order each kind first appears."""
    by_kind: dict[str, list[WaitingOn]] = {}
    for entry in entries:
        by_kind.setdefault(str(entry.kind), []).append(entry)
    out = []
    for kind, group in by_kind.items():
        names = tuple(dict.fromkeys(e.name for e in group if e.name is not None))
        deadlines = [e.deadline for e in group if e.deadline is not None]
        out.append(
            WaitGroup(kind, _WORDS.get(kind, kind), names, len(group), min(deadlines, default=None))
        )
    return out


def summary(entries: Sequence[WaitingOn]) -> str:
    """A short line for a list of runs: ``approval refund``, ``event carrier.pickup``,
    ``child (12)``, ``sleep until 2026-05-01T10:42:03Z``; '' when it waits on nothing."""
    parts = []
    for g in groups(entries):
        if g.count > 1:
            parts.append(f"{g.word} ({g.count})")
        elif g.kind == WaitKind.SLEEP and g.deadline is not None:
            parts.append(f"sleep until {_iso(g.deadline)}")
        else:
            parts.append(f"{g.word} {g.names[0]}" if g.names else g.word)
    return ", ".join(parts)


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
