"""The Redis store's formats: run fields, mailboxes, events, checkpoints, intents, refusals.

Everything here is how `stores.redis.RedisStore` lays the protocol's records
out in Redis and reads them back; nothing outside `stores` sees these formats.
Runs themselves (run hashes, claim and tick replies) are read back by
`stores._decode`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sdk.store import (
    CheckpointKind,
    CorruptData,
    FlowScope,
    Mailbox,
    NewRun,
    Refusal,
    Refused,
    RunStatus,
    StoredCheckpoint,
    StoredEvent,
    StoredIntent,
)
from stores._decode import first_unreadable, show, strict_float, strict_int, unreadable

__all__ = [
    "RUN_FORMAT",
    "checkpoints",
    "feed_event",
    "intent",
    "mailbox_name",
    "num",
    "refused",
    "run_fields",
    "scope",
    "splice_prefix",
    "stored_event",
    "written",
]

#: Format of a run hash (1: the first release; 2 adds lineage, tracing,
#: environment and checkpoint fields). A format-1 hash reads with their defaults.
RUN_FORMAT = 2


def num(value: float) -> str:
    """A number for a script: repr keeps every digit of a float; Lua uses tonumber."""
    return repr(float(value))


def mailbox_name(box: Mailbox) -> str:
    """A mailbox's name in Redis: signals and human decisions are kept apart."""
    return ("h:" if box.human else "s:") + box.name


def splice_prefix(record: str) -> str:
    """A JSON object without its closing brace, ending in ``"value":``: the script
    appends a raw JSON payload and ``}`` without decoding anything."""
    if not record.endswith("}"):
        raise ValueError(f"a journal record must be a JSON object, got {record[:60]!r}")
    return record[:-1] + ',"value":'


def run_fields(new: NewRun) -> list[str]:
    """The hash fields (a flat name, value list) of a new run, started or derived."""
    fields: list[str] = [
        "v", str(RUN_FORMAT), "id", new.run_id, "flow", new.flow, "args", new.args,
        "queue", new.queue, "priority", str(new.priority),
        "created_at", num(new.created_at), "fence", "0", "recoveries", "0",
        "trace_id", new.trace_id or new.run_id,
    ]  # fmt: skip
    optional = {
        "flow_version": new.flow_version,
        "tenant_id": new.tenant_id,
        "thread_id": new.thread_id,
        "environment": new.environment,
        "policy_snapshot_id": new.policy_snapshot_id,
        "source_run_id": new.source_run_id,
        "source_checkpoint_id": new.source_checkpoint_id,
        "root_run_id": new.root_run_id,
        "retry": new.retry,
        "versions": new.versions,
        "parent": new.parent_run_id,
        "top": new.tree_root_run_id,
        "pclose": "abandon" if new.abandon else None,
        "ckey": new.concurrency_key,
    }
    fields += [x for name, v in optional.items() if v is not None for x in (name, v)]
    if new.retention is not None:
        fields += ["retention", num(new.retention)]
    if new.timeout is not None:
        fields += ["timeout", num(new.timeout)]
    # a delayed start: start.lua keeps the run on the timer index until then
    if new.start_at is not None:
        fields += ["start_at", num(new.start_at)]
    elif new.start_in is not None:
        fields += ["start_at", num(new.created_at + new.start_in)]
    return fields


def scope(flows: Sequence[FlowScope] | None, queues: Sequence[str] | None) -> list[str]:
    """Claim arguments: the count of flow scopes (0: any flow), the scopes, the
    queues. A scope is a name (any version), or name, newline, version ('' for
    an unversioned run): names and versions hold no control characters."""
    names = [f if isinstance(f, str) else f"{f[0]}\n{f[1] or ''}" for f in flows or ()]
    return [str(len(names)), *names, *(queues or ())]


def _entry(run_id: str, key: str, entry: str, fields: dict[str, str]) -> CorruptData:
    """The error for a log entry (event, checkpoint, js: mark) that cannot be read."""
    bad = first_unreadable([x for pair in fields.items() for x in pair], True)
    return CorruptData(run_id, key, f"entry {entry}: {bad or f'cannot be read: {fields!r:.120}'}")


def stored_event(event_id: str, run_id: str, fields: dict[str, str], key: str = "") -> StoredEvent:
    """An event log entry; `CorruptData` (naming the entry) when it cannot be read."""
    try:
        event = StoredEvent(
            event_id, run_id, fields["type"], strict_float(fields["at"]),
            fields.get("step") or None, fields.get("data") or None,
        )  # fmt: skip
    except (KeyError, ValueError):
        raise _entry(run_id, key, event_id, fields) from None
    if any(map(unreadable, fields.values())):
        raise _entry(run_id, key, event_id, fields)
    return event


def feed_event(data: str | bytes) -> StoredEvent | None:
    """Decode a feed message: fields "<byte length>:<bytes>" (see the Lua `emit`);
    None for a message that cannot be read (the run's own log is the truth)."""
    raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    fields: list[str] = []
    i = 0
    try:
        while i < len(raw):
            colon = raw.index(b":", i)
            end = colon + 1 + int(raw[i:colon])
            fields.append(raw[colon + 1 : end].decode())
            i = end
        run_id, eid, etype, at, step, evdata = fields
        return StoredEvent(eid, run_id, etype, strict_float(at), step or None, evdata or None)
    except ValueError:  # UnicodeDecodeError too
        return None


def _checkpoint(run_id: str, key: str, entry: str, fields: dict[str, str]) -> StoredCheckpoint:
    try:
        cp = StoredCheckpoint(
            checkpoint_id=strict_int(fields["id"]),
            kind=CheckpointKind(fields["kind"]),
            step_key=fields.get("step") or None,
            status=RunStatus(fields["status"]),
            at=strict_float(fields["at"]),
            seq=strict_int(fields.get("seq") or "0"),
        )
    except (KeyError, ValueError):
        raise _entry(run_id, key, entry, fields) from None
    if cp.step_key is not None and unreadable(cp.step_key):
        raise _entry(run_id, key, entry, fields)
    return cp


def written(marks: dict[str, str], run_id: str = "", key: str = "") -> dict[str, int]:
    """Each journal record's write number, from its js: entry ("seq" or "seq:id:at")."""
    out: dict[str, int] = {}
    for step, mark in marks.items():
        try:
            out[step] = strict_int(mark.split(":", 1)[0])
        except ValueError:
            raise CorruptData(
                run_id, key, f"entry {show(step)} is not a write number: {show(mark)}"
            ) from None
    return out


def checkpoints(
    entries: Any, marks: dict[str, str], run_id: str = "", keys: tuple[str, str] = ("", "")
) -> list[StoredCheckpoint]:
    """All checkpoints in order: the stream's run-level ones, and each completed
    step's, kept in its js: entry as "seq:id:at" (see the Lua `journaled`).
    `CorruptData` (naming the key and entry; `keys`: the stream's and the js:
    hash's) when one cannot be read."""
    stream, js = keys
    found = [_checkpoint(run_id, stream, str(eid), fields) for eid, fields in entries]
    for step, mark in marks.items():
        parts = mark.split(":", 2)
        if len(parts) == 3:
            seq, cid, at = parts
            try:
                found.append(
                    StoredCheckpoint(strict_int(cid), CheckpointKind.STEP_COMPLETED, step,
                                     RunStatus.RUNNING, strict_float(at), strict_int(seq))
                )  # fmt: skip
            except ValueError:
                raise CorruptData(
                    run_id, js, f"entry {show(step)} is not a checkpoint mark: {show(mark)}"
                ) from None
    found.sort(key=lambda c: c.checkpoint_id)
    return found


def _float(value: str | None) -> float | None:
    return None if value is None or value == "" else float(value)


def intent(intent_id: str, h: dict[str, str]) -> StoredIntent:
    """A `StoredIntent` from an intent hash."""
    return StoredIntent(
        intent_id=intent_id,
        step_key=h.get("step", ""),
        channel=h["channel"],
        body=h["body"],
        status=h["status"],
        deliveries=int(h.get("n", 0)),
        failures=int(h.get("f", 0)),
        error=h.get("error") or None,
        updated_at=_float(h.get("at")),
        due=_float(h.get("due")),
    )


_REFUSALS = {
    "not_found": Refusal.NOT_FOUND,
    "transition": Refusal.TRANSITION,
    "not_terminal": Refusal.NOT_FINISHED,
    "not_waiting": Refusal.NOT_WAITING,
    "forbidden": Refusal.FORBIDDEN,
    "exists": Refusal.EXISTS,
    "corrupt": Refusal.CORRUPT,
    "changed": Refusal.CHANGED,
    "too_large": Refusal.TOO_LARGE,
    "full": Refusal.FULL,
}


def refused(reply: Any) -> Refused | None:
    """A script's error reply ``{'err', code, a, b[, c]}`` as a `Refused`; None otherwise.
    A refused argument (``invalid``: the caller's bug) raises `ValueError`."""
    if not (isinstance(reply, list) and reply and reply[0] == "err"):
        return None
    if reply[1] == "invalid":
        raise ValueError(f"the store refused an argument: {reply[2]}")
    why = _REFUSALS.get(reply[1])
    if why is None:
        raise RuntimeError(f"store script failed with {reply!r}")
    a, b = (reply[2] if len(reply) > 2 else ""), (reply[3] if len(reply) > 3 else "")
    if why is Refusal.FORBIDDEN:
        return Refused(why, actor=a)
    if why is Refusal.CORRUPT:
        return Refused(why, key=a, detail=b)
    if why is Refusal.TOO_LARGE:  # {'err', 'too_large', size, limit}
        return Refused(why, size=int(a), limit=int(b))
    if why is Refusal.FULL:  # {'err', 'full', 'messages' | 'bytes', pending, limit}
        return Refused(why, detail=a, size=int(b), limit=int(reply[4]))
    status = RunStatus(a) if a else None
    return Refused(why, status, RunStatus(b) if b else None)
