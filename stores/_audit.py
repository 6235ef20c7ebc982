"""The deployment's audit logs on Redis: `Store.append_audit` and `audit_log`
(see `sdk.store.AuditStore`).

Each partition keeps two capped streams, ``audit`` (changes) and ``denied``
(refusals), written by scripts: a run's deletion goes to its partition's
``audit`` in the script that deletes it, a schedule operation to partition 0's
(where schedules live) in the script that changes it. A read merges the
partitions' streams in the order of their entry ids (Redis's clock), ties
broken by partition: an entry's id is ``"<stream id>@<partition>"``, and the
cursor of a page is the id of its last entry.
"""

from __future__ import annotations

import re
from typing import Any

from redis.exceptions import ResponseError

from sdk.store import AuditLog, CorruptData, EventType, StoredAuditEntry
from stores import _decode
from stores._codec import num
from stores._decode import strict_float
from stores._keys import SUFFIX
from stores._storecore import StoreCore

__all__ = ["AuditLogs", "parse_cursor"]

#: An entry id: the stream entry's id, then its partition.
_ENTRY_ID = re.compile(r"([0-9]{1,20})-([0-9]{1,20})@([0-9]{1,4})")

_SUFFIX = {AuditLog.CHANGES: SUFFIX["audit"], AuditLog.REFUSALS: SUFFIX["denied"]}


def parse_cursor(cursor: str) -> tuple[int, int, int]:
    """(milliseconds, sequence, partition) of an entry id; `ValueError` if it is not one."""
    match = _ENTRY_ID.fullmatch(cursor)
    if match is None:
        raise ValueError(f"not an audit entry id: {cursor[:80]!r}")
    ms, seq, partition = match.groups()
    return int(ms), int(seq), int(partition)


class AuditLogs:
    """`append_audit` and `audit_log` of `stores.redis.RedisStore`."""

    def __init__(self, core: StoreCore) -> None:
        self._core = core
        self._keys = core.keys

    def _key(self, log: AuditLog, partition: int) -> str:
        return self._keys.base(partition) + _SUFFIX[log]

    async def append_audit(
        self,
        log: AuditLog,
        event_type: EventType,
        now: float,
        data: str,
        *,
        run_id: str | None = None,
        schedule_id: str | None = None,
    ) -> None:
        partition = 0 if run_id is None else self._keys.partition(run_id)
        reply = await self._core.call(
            "audit_append",
            [self._core.anchor(partition)],
            [self._keys.base(partition), log.value, str(event_type), num(now), run_id or "",
             schedule_id or "", data],
        )  # fmt: skip
        _decode.corrupt("", reply)

    async def audit_log(
        self, log: AuditLog, cursor: str | None, limit: int
    ) -> list[StoredAuditEntry]:
        if not self._core.layout_ok:
            await self._core.read_layout()
        after = None if cursor is None else parse_cursor(cursor)
        partitions = list(self._core.partitions())
        keys = [self._key(log, p) for p in partitions]
        async with self._core.client.pipeline(transaction=False) as pipe:
            for p, key in zip(partitions, keys, strict=True):
                pipe.xrange(key, _start(after, p), "+", count=limit)
            replies: list[Any] = await pipe.execute(raise_on_error=False)
        found: list[tuple[tuple[int, int, int], StoredAuditEntry]] = []
        for p, key, reply in zip(partitions, keys, replies, strict=True):
            if isinstance(reply, ResponseError):
                raise await self._core.unreadable("", key, reply, "stream")
            for sid, fields in reply:
                ms, _, seq = str(sid).partition("-")
                found.append(((int(ms), int(seq), p), _entry(f"{sid}@{p}", fields, key)))
        found.sort(key=lambda pair: pair[0])
        return [entry for _, entry in found[:limit]]


def _start(after: tuple[int, int, int] | None, partition: int) -> str:
    """Where to read `partition`'s stream from, for the page after `after`: the
    partitions up to the cursor's have given its stream id already; the ones
    after it have not (their entries with the same id sort after the cursor)."""
    if after is None:
        return "-"
    ms, seq, at = after
    return f"({ms}-{seq}" if partition <= at else f"{ms}-{seq}"


def _entry(entry_id: str, fields: dict[str, str], key: str) -> StoredAuditEntry:
    try:
        return StoredAuditEntry(
            entry_id, fields["type"], strict_float(fields["at"]), fields.get("run") or None,
            fields.get("schedule") or None, fields.get("data") or None,
        )  # fmt: skip
    except (KeyError, ValueError):
        raise CorruptData("", key, f"entry {entry_id} cannot be read") from None
