"""The Redis store's formats: run hashes, claim replies, events, checkpoints, mailboxes.

Everything here is how `stores.redis.RedisStore` lays the protocol's records
out in Redis and reads them back; nothing outside `stores` sees these formats.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stores.protocol import (
    CheckpointKind,
    Claim,
    Mailbox,
    NewRun,
    Refusal,
    Refused,
    RunStatus,
    StoredCheckpoint,
    StoredEvent,
    StoredIntent,
    StoredRun,
)

__all__ = [
    "RUN_FORMAT",
    "checkpoints",
    "claims",
    "feed_event",
    "flat",
    "intent",
    "mailbox_name",
    "num",
    "parse_mailbox",
    "refused",
    "run_fields",
    "scope",
    "splice_prefix",
    "stored_event",
    "stored_run",
]

#: Format of a run hash (1: the first release; 2 adds lineage, tracing,
#: environment and checkpoint fields). A format-1 hash reads with their defaults.
RUN_FORMAT = 2


def num(value: float) -> str:
    """A number for a script: repr keeps every digit of a float; Lua uses tonumber."""
    return repr(float(value))


def flat(pairs: list[str]) -> dict[str, str]:
    """A field/value list (as HGETALL gives it in a script reply) as a dict."""
    return dict(zip(pairs[::2], pairs[1::2], strict=True))


def _float(value: str | None) -> float | None:
    return None if value is None or value == "" else float(value)


def _opt(value: str | None) -> str | None:
    return value or None


def mailbox_name(box: Mailbox) -> str:
    """A mailbox's name in Redis: signals and human decisions are kept apart."""
    return ("h:" if box.human else "s:") + box.name


def parse_mailbox(name: str) -> Mailbox:
    return Mailbox(name[2:], human=name.startswith("h:"))


def splice_prefix(record: str) -> str:
    """A JSON object without its closing brace, ending in ``"value":``: the script
    appends a raw JSON payload and ``}`` without decoding anything."""
    if not record.endswith("}"):
        raise ValueError(f"a journal record must be a JSON object, got {record[:60]!r}")
    return record[:-1] + ',"value":'


def stored_run(run_id: str, h: dict[str, str]) -> StoredRun:
    """A `StoredRun` from a run hash (as HGETALL returns it)."""
    return StoredRun(
        run_id=run_id,
        flow=h["flow"],
        status=RunStatus(h["status"]),
        created_at=float(h["created_at"]),
        queue=h["queue"],
        priority=int(h["priority"]),
        args=h["args"],
        fence=int(h.get("fence", 0)),
        flow_version=_opt(h.get("flow_version")),
        tenant_id=_opt(h.get("tenant_id")),
        started_at=_float(h.get("started_at")),
        finished_at=_float(h.get("finished_at")),
        current_step=_opt(h.get("current_step")),
        result=h.get("result"),
        result_type=_opt(h.get("result_type")),
        error=_opt(h.get("error")),
        reason=_opt(h.get("reason")),
        recoveries=int(h.get("recoveries", 0)),
        thread_id=_opt(h.get("thread_id")),
        trace_id=_opt(h.get("trace_id")),
        environment=_opt(h.get("environment")),
        versions=_opt(h.get("versions")),
        policy_snapshot_id=_opt(h.get("policy_snapshot_id")),
        checkpoint_head=int(h.get("cp_n") or 0),
        resume_from_checkpoint=int(h.get("resume_from_checkpoint_id") or 0),
        source_run_id=_opt(h.get("source_run_id")),
        source_checkpoint_id=_opt(h.get("source_checkpoint_id")),
        root_run_id=_opt(h.get("root_run_id")),
        retry=_opt(h.get("retry")),
        format_version=int(h.get("v", 1)),
    )


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
    }
    fields += [x for name, v in optional.items() if v is not None for x in (name, v)]
    if new.retention is not None:
        fields += ["retention", num(new.retention)]
    return fields


def scope(flows: Sequence[str] | None, queues: Sequence[str] | None) -> list[str]:
    """Claim arguments: the count of flow names (0: any flow), the names, the queues."""
    names = list(flows or ())
    return [str(len(names)), *names, *(queues or ())]


def claims(reply: list[Any]) -> list[Claim]:
    """Claims from a claim/poll reply: run hash, journal, non-empty mailboxes, lineage."""
    out = []
    for i in range(0, len(reply), 4):
        h = flat(reply[i])
        out.append(
            Claim(
                stored_run(h["id"], h),
                flat(reply[i + 1]),
                frozenset(parse_mailbox(name) for name in reply[i + 2]),
                flat(reply[i + 3]),
            )
        )
    return out


def stored_event(event_id: str, run_id: str, fields: dict[str, str]) -> StoredEvent:
    return StoredEvent(
        event_id, run_id, fields["type"], float(fields["at"]),
        fields.get("step") or None, fields.get("data") or None,
    )  # fmt: skip


def feed_event(data: str | bytes) -> StoredEvent:
    """Decode a feed message: fields "<byte length>:<bytes>" (see the Lua `emit`)."""
    raw = data.encode() if isinstance(data, str) else data
    fields: list[str] = []
    i = 0
    while i < len(raw):
        colon = raw.index(b":", i)
        end = colon + 1 + int(raw[i:colon])
        fields.append(raw[colon + 1 : end].decode())
        i = end
    run_id, eid, etype, at, step, evdata = fields
    return StoredEvent(eid, run_id, etype, float(at), step or None, evdata or None)


def _checkpoint(fields: dict[str, str]) -> StoredCheckpoint:
    return StoredCheckpoint(
        checkpoint_id=int(fields["id"]),
        kind=CheckpointKind(fields["kind"]),
        step_key=fields.get("step") or None,
        status=RunStatus(fields["status"]),
        at=float(fields["at"]),
        seq=int(fields.get("seq") or 0),
    )


def written(marks: dict[str, str]) -> dict[str, int]:
    """Each journal record's write number, from its js: entry ("seq" or "seq:id:at")."""
    return {key: int(mark.split(":", 1)[0]) for key, mark in marks.items()}


def checkpoints(entries: Any, marks: dict[str, str]) -> list[StoredCheckpoint]:
    """All checkpoints in order: the stream's run-level ones, and each completed
    step's, kept in its js: entry as "seq:id:at" (see the Lua `journaled`)."""
    found = [_checkpoint(fields) for _, fields in entries]
    for step, mark in marks.items():
        parts = mark.split(":", 2)
        if len(parts) == 3:
            seq, cid, at = parts
            found.append(
                StoredCheckpoint(int(cid), CheckpointKind.STEP_COMPLETED, step,
                                 RunStatus.RUNNING, float(at), int(seq))
            )  # fmt: skip
    found.sort(key=lambda c: c.checkpoint_id)
    return found


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
}


def refused(reply: Any) -> Refused | None:
    """A script's error reply ``{'err', code, a, b}`` as a `Refused`; None otherwise."""
    if not (isinstance(reply, list) and reply and reply[0] == "err"):
        return None
    why = _REFUSALS.get(reply[1])
    if why is None:
        raise RuntimeError(f"store script failed with {reply!r}")
    a, b = (reply[2] if len(reply) > 2 else ""), (reply[3] if len(reply) > 3 else "")
    if why is Refusal.FORBIDDEN:
        return Refused(why, actor=a)
    status = RunStatus(a) if a else None
    return Refused(why, status, RunStatus(b) if b else None)
