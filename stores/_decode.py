"""Reading runs back from Redis one at a time: run hashes, claim and tick replies.

Damaged data stays with its run. Replies are decoded with ``surrogateescape``
(see stores._redispy): a stored value that is not UTF-8 reads as a str holding
lone surrogates instead of failing the whole reply (a claim of ten runs for one
bad byte). Such a value, a missing field or a field that is not a number
damages *its* run only: the run is read field by field, what can be read is
kept, and the rest is named (`StoredRun.damage`, `Claim.damage`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Any

from sdk.store import (
    Claim,
    CorruptData,
    CorruptIndex,
    Damaged,
    FailedRun,
    Mailbox,
    Rebuilt,
    RunStatus,
    StoredRun,
    TickResult,
)

__all__ = [
    "claims",
    "corrupt",
    "damaged_run",
    "first_unreadable",
    "flat",
    "index_damage",
    "merged",
    "parse_mailbox",
    "show",
    "stored_run",
    "strict_float",
    "strict_int",
    "tick_result",
    "unreadable",
]


def flat(pairs: list[str]) -> dict[str, str]:
    """A field/value list (as HGETALL gives it in a script reply) as a dict."""
    return dict(zip(pairs[::2], pairs[1::2], strict=True))


def _float(value: str | None) -> float | None:
    return None if value is None or value == "" else float(value)


def _opt(value: str | None) -> str | None:
    return value or None


def parse_mailbox(name: str) -> Mailbox:
    return Mailbox(name[2:], human=name.startswith("h:"))


def stored_run(run_id: str, h: dict[str, str], key: str = "") -> StoredRun:
    """A `StoredRun` from a run hash (as HGETALL returns it), stored under `key`.

    Never raises for what the hash holds: a record that cannot be read whole
    comes back with what could be read and `StoredRun.damage` saying the rest
    (see `damaged_run`).
    """
    try:
        run = StoredRun(
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
            parent_run_id=_opt(h.get("parent")),
            tree_root_run_id=_opt(h.get("top")),
            abandon=h.get("pclose") == "abandon",
            concurrency_key=_opt(h.get("ckey")),
            start_at=_float(h.get("start_at")),
            cancel_reason=_opt(h.get("cancel_reason")),
            cancel_deadline=_float(h.get("cancel_at")),
            schedule_id=_opt(h.get("schedule")),
            lease_owner=_opt(h.get("lease_owner")),
            lease_expires_at=_float(h.get("lease_exp")),
            waiting_on=_opt(h.get("waiting_on")),
            retry=_opt(h.get("retry")),
            format_version=int(h.get("v", 1)),
            generation=int(h.get("gen") or 0),
            args_hash=_opt(h.get("args_hash")),
        )
    except (KeyError, ValueError):
        return damaged_run(run_id, h, key)
    # A value that is not UTF-8 (lone surrogates as read), or a time that is not
    # finite, passes the conversions above: look again, field by field.
    times = (run.created_at, run.started_at or 0.0, run.finished_at or 0.0)
    if not all(map(math.isfinite, times)) or any(map(unreadable, h.values())):
        return damaged_run(run_id, h, key)
    return run


# -- damaged data -------------------------------------------------------------------

_SURROGATE = re.compile("[\ud800-\udfff]")
_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_INTEGER = re.compile(r"0|-?[1-9]\d{0,17}")


def unreadable(text: str) -> bool:
    """Whether `text`, as read, held bytes that are not UTF-8 (lone surrogates).
    ``str.isascii`` is O(1) in CPython: ASCII text is cleared without a scan."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def show(text: str, limit: int = 40) -> str:
    """A stored value, cut short, for a message: bytes that are not UTF-8 as bytes."""
    if unreadable(text):
        return repr(text.encode("utf-8", "surrogateescape")[:limit])
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def strict_float(text: str) -> float:
    value = float(text) if _NUMBER.fullmatch(text) else math.nan
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def strict_int(text: str) -> int:
    if not _INTEGER.fullmatch(text):
        raise ValueError(text)
    return int(text)


_REQUIRED = ("flow", "status", "created_at", "queue", "priority", "args")
_FLOATS = {"created_at", "started_at", "finished_at", "start_at", "lease_exp"}
_INTS = {"priority", "fence", "recoveries", "cp_n", "resume_from_checkpoint_id", "v", "gen"}


def damaged_run(run_id: str, h: dict[str, str], key: str, what: str | None = None) -> StoredRun:
    """A run read field by field: each field that cannot be read is left at its
    default and named in `StoredRun.damage` (``"<key>: <what>; <what>"``); a status
    that cannot be read is reported as ``failed``. `what` says why nothing of the
    record could be read at all (e.g. its key holds another type)."""
    problems: list[str] = []
    fields: dict[str, Any] = {}
    for name in (*_REQUIRED, *_FIELDS):
        raw = h.get(name)
        if raw is None:
            if name in _REQUIRED and what is None:
                problems.append(f"field {name!r} is missing")
            continue
        if unreadable(raw):
            problems.append(f"field {name!r} holds bytes that are not UTF-8: {show(raw)}")
            continue
        try:
            if name in _FLOATS:
                fields[name] = strict_float(raw)
            elif name in _INTS:
                fields[name] = strict_int(raw)
            elif name == "status":
                fields[name] = RunStatus(raw)
            else:
                fields[name] = raw
        except ValueError:
            kind = "a run status" if name == "status" else (
                "a number" if name in _FLOATS else "an integer"
            )  # fmt: skip
            problems.append(f"field {name!r} is not {kind}: {show(raw)}")
    if what is not None:
        problems.insert(0, what)
    return StoredRun(
        run_id=run_id,
        flow=fields.get("flow", ""),
        status=fields.get("status", RunStatus.FAILED),
        created_at=fields.get("created_at", 0.0),
        queue=fields.get("queue", ""),
        priority=fields.get("priority", 0),
        args=fields.get("args", ""),
        fence=fields.get("fence", 0),
        flow_version=_opt(fields.get("flow_version")),
        tenant_id=_opt(fields.get("tenant_id")),
        started_at=fields.get("started_at"),
        finished_at=fields.get("finished_at"),
        current_step=_opt(fields.get("current_step")),
        result=fields.get("result"),
        result_type=_opt(fields.get("result_type")),
        error=_opt(fields.get("error")),
        reason=_opt(fields.get("reason")),
        recoveries=fields.get("recoveries", 0),
        thread_id=_opt(fields.get("thread_id")),
        trace_id=_opt(fields.get("trace_id")),
        environment=_opt(fields.get("environment")),
        versions=_opt(fields.get("versions")),
        policy_snapshot_id=_opt(fields.get("policy_snapshot_id")),
        checkpoint_head=fields.get("cp_n", 0),
        resume_from_checkpoint=fields.get("resume_from_checkpoint_id", 0),
        source_run_id=_opt(fields.get("source_run_id")),
        source_checkpoint_id=_opt(fields.get("source_checkpoint_id")),
        root_run_id=_opt(fields.get("root_run_id")),
        parent_run_id=_opt(fields.get("parent")),
        tree_root_run_id=_opt(fields.get("top")),
        abandon=fields.get("pclose") == "abandon",
        concurrency_key=_opt(fields.get("ckey")),
        start_at=fields.get("start_at"),
        cancel_reason=_opt(fields.get("cancel_reason")),
        schedule_id=_opt(fields.get("schedule")),
        lease_owner=_opt(fields.get("lease_owner")),
        lease_expires_at=fields.get("lease_exp"),
        waiting_on=_opt(fields.get("waiting_on")),
        retry=_opt(fields.get("retry")),
        format_version=fields.get("v", 1),
        generation=fields.get("gen", 0),
        args_hash=_opt(fields.get("args_hash")),
        damage=f"{key}: {'; '.join(problems)}" if problems else None,
    )


#: The optional fields of a run hash that `stored_run` reads.
_FIELDS = (
    "fence", "flow_version", "tenant_id", "started_at", "finished_at", "current_step",
    "result", "result_type", "error", "reason", "recoveries", "thread_id", "trace_id",
    "environment", "versions", "policy_snapshot_id", "cp_n", "resume_from_checkpoint_id",
    "source_run_id", "source_checkpoint_id", "root_run_id", "retry", "v", "gen",
    "parent", "top", "pclose", "ckey", "start_at",
    "schedule", "lease_owner", "lease_exp", "args_hash", "waiting_on",
)  # fmt: skip


def claims(
    reply: list[Any], run_key: Callable[[str], str], key: Callable[[str, str], str]
) -> list[Claim]:
    """Claims from a claim/poll reply, each decoded on its own: {id, run hash,
    journal, non-empty mailboxes, lineage}, or {id, key, what is wrong} for a run
    the script found damaged (not leased). `run_key(id)` and `key(suffix, id)`
    name the keys that damage is reported against."""
    out = []
    for item in reply:
        run_id = item[0]
        if len(item) == 3:
            where, what = item[1], item[2]
            run = damaged_run(run_id, {}, where, what)
            out.append(Claim(run, {}, damage=Damaged(run_id, where, what)))
        else:
            out.append(_claim(run_id, item, run_key(run_id), key))
    return out


def _claim(run_id: str, item: list[Any], where: str, key: Callable[[str, str], str]) -> Claim:
    _, hash_, journal, mail, lineage, *hit = item  # hit: a sticky claim (journal left out)
    run = stored_run(run_id, flat(hash_), where)
    damage = None
    if run.damage is not None:
        damage = Damaged(run_id, where, run.damage[len(where) + 2 :], run.fence)
    else:
        for suffix, pairs in (("journal", journal), ("lineage", lineage), ("mailboxes", mail)):
            bad = first_unreadable(pairs, suffix != "mailboxes")
            if bad is not None:
                damage = Damaged(run_id, key(suffix, run_id), bad, run.fence)
                break
    return Claim(
        run, flat(journal), frozenset(parse_mailbox(name) for name in mail), flat(lineage), damage,
        cached=bool(hit and int(hit[0])),
    )  # fmt: skip


def first_unreadable(values: list[str], pairs: bool) -> str | None:
    """What is wrong with the first value that is not UTF-8 in a reply's list
    (field/value pairs, or names), or None."""
    if all(map(str.isascii, values)):
        return None
    for i, text in enumerate(values):
        if unreadable(text):
            if not pairs:
                return f"member {show(text)} holds bytes that are not UTF-8"
            if i % 2 == 0:
                return f"entry {show(text)}: its name holds bytes that are not UTF-8"
            return f"entry {show(values[i - 1])} holds bytes that are not UTF-8: {show(text)}"
    return None


def tick_result(reply: list[Any]) -> TickResult:
    """One partition's maintenance: fired, recovered, next timer, next lease expiry,
    repaired, the damaged runs found (id, key, what is wrong, ...), the runs it
    failed (id, flow, reason, ...), whether a ready run waits for the caller's
    worker cap, when a schedule needs a worker, and the shared keys it rebuilt
    (key, what was wrong, ...)."""
    fired, recovered, nt, nl, repaired, found, ended, capped, sched, fixed = reply
    dues = [float(x) for x in (nt, nl) if x != ""]
    damaged = tuple(Damaged(found[i], found[i + 1], found[i + 2]) for i in range(0, len(found), 3))
    failed = tuple(
        FailedRun(ended[i], ended[i + 1], ended[i + 2]) for i in range(0, len(ended or ()), 3)
    )
    fixed = fixed or ()
    rebuilt = tuple(Rebuilt(fixed[i], fixed[i + 1]) for i in range(0, len(fixed), 2))
    return TickResult(
        int(fired), int(recovered), min(dues, default=None), int(repaired), damaged,
        failed=failed, capped=bool(int(capped)),
        schedules_due=None if sched == "" else float(sched), rebuilt=rebuilt,
    )  # fmt: skip


def merged(results: Iterable[TickResult]) -> TickResult:
    """Several partitions' maintenance as one."""
    fired = recovered = repaired = 0
    capped = False
    dues: list[float] = []
    sched: list[float] = []
    damaged: list[Damaged] = []
    failed: list[FailedRun] = []
    rebuilt: list[Rebuilt] = []
    for r in results:
        fired += r.fired
        recovered += r.recovered
        repaired += r.repaired
        dues += [] if r.next_due is None else [r.next_due]
        damaged += r.damaged
        failed += r.failed
        rebuilt += r.rebuilt
        capped = capped or r.capped
        sched += [] if r.schedules_due is None else [r.schedules_due]
    return TickResult(
        fired,
        recovered,
        min(dues, default=None),
        repaired,
        tuple(damaged),
        failed=tuple(failed),
        capped=capped,
        schedules_due=min(sched, default=None),
        rebuilt=tuple(rebuilt),
    )


def index_damage(reply: Any) -> Any:
    """A script's reply, or `CorruptIndex` for ``{'err', 'index', key, what}``: a key
    that runs share which the script cannot work with (it wrote nothing). Every
    script call's reply passes here (`StoreCore.call`)."""
    if reply.__class__ is list and len(reply) == 4 and reply[0] == "err" and reply[1] == "index":
        raise CorruptIndex(reply[2], reply[3])
    return reply


def corrupt(run_id: str, reply: Any) -> Any:
    """An activation script's reply, or the error it stands for: `CorruptData`
    for ``{'err', 'corrupt', key, what}``, `ValueError` for a refused argument."""
    if isinstance(reply, list) and reply and reply[0] == "err":
        if reply[1] == "corrupt":
            raise CorruptData(run_id, reply[2], reply[3])
        index_damage(reply)
        if reply[1] == "invalid":
            raise ValueError(f"the store refused an argument: {reply[2]}")
    return reply
