"""The Redis store: the canonical implementation of the store protocol.

One `RedisStore` wraps one redis-py asyncio client. Clients belong to the
event loop that created them, so make a store inside the loop that uses it
(never at module level).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff

from sdk._serde import converter, dumps, loads
from sdk._types import RUN_FORMAT_VERSION, ErrorInfo, RunRecord, RunStatus, Versions
from sdk.errors import (
    Forbidden,
    IdempotencyConflict,
    InvalidTransition,
    LeaseLost,
    NotWaiting,
    RunNotFound,
)
from stores._keys import SUFFIX, Keys
from stores._protocol import (
    Claim,
    IntentClaim,
    Lineage,
    NewIntent,
    NewRun,
    RawEvent,
    StartOutcome,
    StepEvent,
    StoredRun,
    TickResult,
)
from stores._redispy import script_runner
from stores._scripts import build_scripts

__all__ = ["RedisStore"]

_NO_EVENT = StepEvent("")


def _ts(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(float(value), UTC)


def _num(value: float) -> str:
    # repr keeps every digit of a float; Lua compares with tonumber.
    return repr(float(value))


def parse_run(run_id: str, h: dict[str, str]) -> StoredRun:
    """Build a `StoredRun` from a run hash (as HGETALL returns it).

    Upgrades on read: a format-1 hash (no tracing, lineage or checkpoint
    fields) reads with their defaults, its trace id being its run id.
    """
    err = h.get("error")
    versions = h.get("versions")
    error = ErrorInfo(**loads(err)) if err else None
    raw_result = h.get("result")
    record = RunRecord(
        run_id=run_id,
        flow=h["flow"],
        status=RunStatus(h["status"]),
        created_at=datetime.fromtimestamp(float(h["created_at"]), UTC),
        queue=h["queue"],
        priority=int(h["priority"]),
        flow_version=h.get("flow_version") or None,
        tenant_id=h.get("tenant_id") or None,
        started_at=_ts(h.get("started_at")),
        finished_at=_ts(h.get("finished_at")),
        current_step_id=h.get("current_step") or None,
        result=loads(raw_result) if raw_result is not None else None,
        error=error,
        reason=h.get("reason") or None,
        recoveries=int(h.get("recoveries", 0)),
        thread_id=h.get("thread_id") or None,
        trace_id=h.get("trace_id") or run_id,
        environment=h.get("environment") or None,
        versions=converter.structure(loads(versions), Versions) if versions else Versions(),
        policy_snapshot_id=h.get("policy_snapshot_id") or None,
        checkpoint_head=_nonzero(h.get("cp_n")),
        resume_from_checkpoint_id=_nonzero(h.get("resume_from_checkpoint_id")),
        source_run_id=h.get("source_run_id") or None,
        source_checkpoint_id=h.get("source_checkpoint_id") or None,
        root_run_id=h.get("root_run_id") or run_id,
        format_version=int(h.get("v", 1)),
    )
    return StoredRun(
        record=record,
        retry=h.get("retry") or None,
        args=h["args"],
        fence=int(h.get("fence", 0)),
        result_type=h.get("result_type") or None,
        raw_result=raw_result,
    )


def _feed_event(data: str | bytes) -> RawEvent:
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
    named = {"type": etype, "at": at}
    if step:
        named["step"] = step
    if evdata:
        named["data"] = evdata
    return RawEvent(eid, run_id, named)


def _checkpoints(entries: Any, marks: dict[str, str]) -> list[dict[str, str]]:
    """All checkpoints in order: the stream's run-level ones, and each completed
    step's, kept in its js: entry as "seq:id:at" (see the Lua `journaled`)."""
    found = [fields for _, fields in entries]
    for step, mark in marks.items():
        parts = mark.split(":", 2)
        if len(parts) == 3:
            seq, cid, at = parts
            found.append({"id": cid, "kind": "step_completed", "step": step,
                          "status": "running", "at": at, "seq": seq})  # fmt: skip
    found.sort(key=lambda c: int(c["id"]))
    return found


def _nonzero(value: str | None) -> str | None:
    return value if value not in (None, "", "0") else None


def _flat(pairs: list[str]) -> dict[str, str]:
    return dict(zip(pairs[::2], pairs[1::2], strict=True))


def _scope(flows: Sequence[str] | None, queues: Sequence[str] | None) -> list[str]:
    """Claim arguments: the count of flow names (0: any flow), the names, the queues."""
    names = list(flows or ())
    return [str(len(names)), *names, *(queues or ())]


def _claims(reply: list[Any]) -> list[Claim]:
    """Claims from a claim/poll reply: run hash, journal, non-empty mailboxes, lineage."""
    out = []
    for i in range(0, len(reply), 4):
        h = _flat(reply[i])
        out.append(
            Claim(
                parse_run(h["id"], h),
                _flat(reply[i + 1]),
                frozenset(reply[i + 2]),
                _flat(reply[i + 3]),
            )
        )
    return out


class RedisStore:
    """Steadyflow's storage on Redis (or on fakeredis, for ``memory://``).

    Args:
        client: a redis-py asyncio client created with ``decode_responses=True``.
            Store operations (Lua scripts) go over connections the store keeps
            checked out of its pool, up to half the pool (see ``stores._redispy``);
            a client that does not allow that (Redis Cluster, a single-connection
            client) gets redis-py's own script path.
        prefix: first part of every key; deployments sharing a Redis use different ones.
        partitions: how many hash-tag partitions runs spread over (1 unless on a
            Redis Cluster); every process of a deployment must use the same number.
        max_events_per_run: a run's event log keeps about this many newest events
            (trimmed in blocks of ~100; at least 100).
        blocking_client: a client for blocking reads (BLPOP wake-ups, BRPOPLPUSH
            result waits, the feed's Pub/Sub), which hold a connection for
            seconds; default `client`. `from_url` gives
            them a pool of their own.

    Example::

        store = RedisStore.from_url("redis://localhost:6379/0")
    """

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        prefix: str = "sf",
        partitions: int = 1,
        blocking_client: aioredis.Redis | None = None,
        max_events_per_run: int = 10_000,
    ) -> None:
        self.client = client
        self.blocking_client = blocking_client or client
        self.keys = Keys(prefix, partitions)
        if max_events_per_run < 100:
            raise ValueError(f"max_events_per_run must be at least 100, got {max_events_per_run}")
        self.max_events_per_run = max_events_per_run
        scripts = build_scripts(events_max=max_events_per_run)
        # redis-py's script objects: their SHA, and their NOSCRIPT reload.
        self._scripts = {name: client.register_script(src) for name, src in scripts.items()}
        # Every operation is a script call (see stores._redispy).
        self._runner = script_runner(client)
        self._label = "redis"

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str = "sf", partitions: int = 1, **kwargs: Any
    ) -> RedisStore:
        """A store on a ``redis://``, ``rediss://`` (TLS) or ``unix://`` URL.

        User, password and database come from the URL. ``max_connections``
        (default 64) bounds the connections for script calls (every store
        operation), and as many again for other commands: the pool holds up
        to twice that, and a command waits for a free connection rather than
        failing. ``max_events_per_run`` is the store's own (see the class).
        Other keyword arguments go to redis-py's connection pool
        (``ssl_ca_certs=...``, ``socket_timeout=...``).
        """
        scheme = urlsplit(url).scheme
        if scheme not in ("redis", "rediss", "unix"):
            raise ValueError(f"unsupported store URL scheme {scheme!r} in {_redact(url)!r}")
        kwargs.setdefault("health_check_interval", 30)
        kwargs.setdefault("socket_connect_timeout", 5.0)
        if scheme != "unix":  # unix-socket connections refuse the option (TypeError)
            kwargs.setdefault("socket_keepalive", True)
        # No read timeout on commands by default: any socket timeout makes
        # redis-py wrap every read in asyncio.wait_for (~14 µs a step write).
        # Blocking reads (BLPOP, BRPOPLPUSH, the feed's Pub/Sub) wait up to 5 s:
        # their pool gets 30 s.
        command_timeout = kwargs.pop("socket_timeout", None)
        # Options of the store itself, not of the connection pool.
        caps = {k: kwargs.pop(k) for k in ("max_events_per_run",) if k in kwargs}
        if any(v < 100 for v in caps.values()):  # before any pool exists
            raise ValueError("max_events_per_run must be at least 100")
        # Unlike redis.Redis(), Redis.from_url() retries nothing: after a Redis
        # restart every pooled connection would fail its next command once
        # ("Connection closed by server"). Retry connection errors a few times.
        # A retry can re-run a script whose reply was lost, so every script is
        # safe to run twice: consume answers from the journal, signals carry a
        # dedup id (the client makes one), fenced writes refuse a second run.
        kwargs.setdefault("retry", Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), 3))
        # Commands wait for a free connection instead of failing when more
        # activations than `max_connections` write at once. Half the pool is
        # for script calls (the store keeps those checked out), half for the rest.
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=2 * kwargs.pop("max_connections", 64),
            timeout=None,
            decode_responses=True,
            socket_timeout=command_timeout,
            **kwargs,
        )
        client = aioredis.Redis.from_pool(pool)  # owns the pool: aclose() closes it
        # Blocking reads (worker wake-ups, result waiters) each hold a connection
        # for seconds: they get a pool of their own so they never starve writes.
        blocking = aioredis.Redis.from_url(
            url,
            decode_responses=True,
            max_connections=100_000,
            socket_timeout=max(command_timeout or 0.0, 30.0),
            **kwargs,
        )
        store = cls(client, prefix=prefix, partitions=partitions, blocking_client=blocking, **caps)
        store._label = _redact(url)
        return store

    def describe(self) -> dict[str, Any]:
        return {
            "store": self._label,
            "prefix": self.keys.prefix,
            "partitions": self.keys.partitions,
        }

    async def close(self) -> None:
        await self._runner.close()
        if self.blocking_client is not self.client:
            await self.blocking_client.aclose()
        await self.client.aclose()

    # -- helpers ---------------------------------------------------------

    async def _call(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return await self._runner.run(self._scripts[name], keys, args)

    @staticmethod
    def _raise(run_id: str, reply: Any) -> None:
        if isinstance(reply, list) and reply and reply[0] == "err":
            code = reply[1]
            if code == "not_found":
                raise RunNotFound(run_id)
            if code == "transition":
                raise InvalidTransition(run_id, RunStatus(reply[2]), RunStatus(reply[3]))
            if code == "not_terminal":
                raise InvalidTransition(run_id, RunStatus(reply[2]), None, action="delete")
            if code == "not_waiting":
                raise NotWaiting(run_id, RunStatus(reply[2]))
            if code == "forbidden":
                raise Forbidden(f"{reply[2]!r} may not decide this wait of run {run_id!r}")
            raise RuntimeError(f"run {run_id!r}: store script failed with {reply!r}")

    def _partitions(self) -> range:
        return range(self.keys.partitions)

    def _anchor(self, partition: int) -> str:
        # Scripts that work on a whole partition name one of its keys, so a
        # Redis Cluster client routes them to the node owning that hash tag.
        return self.keys.all_runs(partition)

    # -- runs -------------------------------------------------------------

    async def create_run(self, new: NewRun) -> StartOutcome:
        k = self.keys
        fields = self._run_fields(new)
        event = dumps({"flow": new.flow, "queue": new.queue, "priority": new.priority})
        code, status = await self._call(
            "start",
            [k.run(new.run_id)],
            [k.base_of(new.run_id), new.run_id, new.args_hash, event, *fields],
        )
        if code == -1:
            raise IdempotencyConflict(
                f"run {new.run_id!r} already exists with different arguments or flow"
            )
        return StartOutcome(created=code == 1, status=RunStatus(status))

    def _run_fields(self, new: NewRun) -> list[str]:
        """The hash fields (flat name, value list) of a new run, started or derived."""
        fields: list[str] = [
            "v", str(RUN_FORMAT_VERSION), "id", new.run_id, "flow", new.flow, "args", new.args,
            "queue", new.queue, "priority", str(new.priority),
            "created_at", _num(new.created_at), "fence", "0", "recoveries", "0",
            "trace_id", new.options.trace_id or new.run_id,
        ]  # fmt: skip
        optional = {
            "flow_version": new.flow_version,
            "tenant_id": new.tenant_id,
            "thread_id": new.options.thread_id,
            "environment": new.options.environment,
            "policy_snapshot_id": new.options.policy_snapshot_id,
            "source_run_id": new.source_run_id,
            "source_checkpoint_id": new.source_checkpoint_id,
        }
        fields += [x for name, v in optional.items() if v is not None for x in (name, v)]
        fields += self._lineage_fields(new)
        if new.retention is not None:
            fields += ["retention", _num(new.retention)]
        if new.options.versions != Versions():
            fields += ["versions", dumps(converter.unstructure(new.options.versions))]
        return fields

    @staticmethod
    def _lineage_fields(new: NewRun) -> list[str]:
        fields: list[str] = []
        for name in ("root_run_id", "retry"):
            value = getattr(new, name)
            if value is not None:
                fields += [name, value]
        return fields

    async def read_lineage(self, run_id: str) -> Lineage | None:
        k = self.keys
        base = k.base_of(run_id)
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(k.run(run_id))
            pipe.hgetall(k.journal(run_id))
            pipe.hgetall(base + SUFFIX["jseq"] + run_id)
            pipe.hgetall(base + SUFFIX["lineage"] + run_id)
            pipe.xrange(k.checkpoints(run_id), "-", "+")
            h, journal, jseq, lineage, cps = await pipe.execute()
        if not h:
            return None
        return Lineage(parse_run(run_id, h), journal, jseq, lineage, _checkpoints(cps, jseq))

    async def derive_run(
        self,
        new: NewRun,
        journal: Sequence[tuple[str, str]],
        lineage: Sequence[tuple[str, str]],
        event_type: str,
        event_data: str,
    ) -> None:
        k = self.keys
        fields = self._run_fields(new)
        reply = await self._call(
            "derive",
            [k.run(new.run_id), k.journal(new.run_id)],
            [
                k.base_of(new.run_id), new.run_id, new.args_hash, event_type, event_data,
                str(len(fields) // 2), *fields,
                str(len(journal)), *(x for pair in journal for x in pair),
                *(x for pair in lineage for x in pair),
            ],
        )  # fmt: skip
        if isinstance(reply, list) and reply and reply[0] == "err" and reply[1] == "exists":
            raise IdempotencyConflict(f"run {new.run_id!r} already exists")
        self._raise(new.run_id, reply)

    async def get_run(self, run_id: str) -> StoredRun | None:
        h: Any = await self.client.hgetall(self.keys.run(run_id))
        return parse_run(run_id, h) if h else None

    async def list_runs(
        self, status: RunStatus | None, flow: str | None, limit: int
    ) -> list[StoredRun]:
        found: list[StoredRun] = []
        for p in self._partitions():
            index = self.keys.status_index(p, status.value) if status else self.keys.all_runs(p)
            start = 0
            while len(found) < limit * (p + 1):
                ids: Any = await self.client.zrevrange(index, start, start + 99)
                if not ids:
                    break
                start += len(ids)
                async with self.client.pipeline(transaction=False) as pipe:
                    for run_id in ids:
                        pipe.hgetall(self.keys.run(run_id))
                    hashes = await pipe.execute()
                for run_id, h in zip(ids, hashes, strict=True):
                    if h and (flow is None or h["flow"] == flow):
                        found.append(parse_run(run_id, h))
        found.sort(key=lambda r: r.record.created_at, reverse=True)
        return found[:limit]

    # -- activations ----------------------------------------------------------

    async def claim(
        self,
        owner: str,
        queues: Sequence[str] | None,
        limit: int,
        now: float,
        lease_ttl: float,
        *,
        flows: Sequence[str] | None = None,
    ) -> list[Claim]:
        claims: list[Claim] = []
        for p in self._partitions():
            if len(claims) >= limit:
                break
            reply = await self._call(
                "claim",
                [self._anchor(p)],
                [
                    self.keys.base(p),
                    owner,
                    _num(now),
                    _num(now + lease_ttl),
                    str(limit - len(claims)),
                    *_scope(flows, queues),
                ],
            )
            claims += _claims(reply)
        return claims

    async def poll(
        self,
        owner: str,
        queues: Sequence[str] | None,
        limit: int,
        now: float,
        lease_ttl: float,
        max_recoveries: int,
        recovery_error: str,
        *,
        flows: Sequence[str] | None = None,
    ) -> tuple[list[Claim], TickResult]:
        claims: list[Claim] = []
        fired = recovered = 0
        due: list[float] = []
        for p in self._partitions():
            (f, r, nt, nl), taken = await self._call(
                "poll",
                [self._anchor(p)],
                [
                    self.keys.base(p), owner, _num(now), _num(now + lease_ttl),
                    str(max(limit - len(claims), 0)), str(max_recoveries), recovery_error,
                    *_scope(flows, queues),
                ],
            )  # fmt: skip
            fired += int(f)
            recovered += int(r)
            due += [float(x) for x in (nt, nl) if x != ""]
            claims += _claims(taken)
        return claims, TickResult(fired, recovered, min(due) if due else None)

    async def record(
        self,
        run_id: str,
        fence: int,
        key: str,
        record: str,
        *,
        now: float = 0.0,
        event: StepEvent | None = None,
    ) -> None:
        k = self.keys
        ev = event or _NO_EVENT
        ok = await self._call(
            "record",
            [k.run(run_id), k.journal(run_id)],
            [k.base_of(run_id), run_id, str(fence), key, record, _num(now),
             ev.type, ev.data, ev.checkpoint],
        )  # fmt: skip
        if ok != 1:
            raise LeaseLost(f"run {run_id!r}: lease lost; step {key!r} was not recorded")

    async def mark(self, run_id: str, fence: int, key: str, now: float) -> None:
        k = self.keys
        ok = await self._call(
            "mark", [k.run(run_id)], [k.base_of(run_id), run_id, str(fence), key, _num(now)]
        )
        if ok != 1:
            raise LeaseLost(f"run {run_id!r}: lease lost before step {key!r} started")

    async def consume(
        self,
        run_id: str,
        fence: int,
        key: str,
        mailbox: str,
        now: float,
        deadline: float | None,
        record_prefix: str,
        timeout_record: str,
    ) -> tuple[int, str | None]:
        k = self.keys
        reply = await self._call(
            "consume",
            [k.run(run_id), k.journal(run_id)],
            [
                k.base_of(run_id), run_id, str(fence), key, mailbox, _num(now),
                "" if deadline is None else _num(deadline), record_prefix, timeout_record,
            ],
        )  # fmt: skip
        if reply[0] == -1:
            raise LeaseLost(f"run {run_id!r}: lease lost while waiting at {key!r}")
        return int(reply[0]), (reply[1] if len(reply) > 1 else None)

    async def suspend(
        self,
        run_id: str,
        fence: int,
        now: float,
        deadline: float | None,
        status: RunStatus,
        records: Sequence[tuple[str, str]],
        mailboxes: Sequence[str],
        *,
        approvers: Mapping[str, Sequence[str]] | None = None,
    ) -> bool:
        k = self.keys
        flat = [x for pair in records for x in pair]
        allowed = [x for box, who in (approvers or {}).items() for x in (box, "\n".join(who))]
        reply = await self._call(
            "suspend",
            [k.run(run_id), k.journal(run_id)],
            [
                k.base_of(run_id), run_id, str(fence), _num(now),
                "" if deadline is None else _num(deadline), status.value,
                str(len(records)), *flat, str(len(mailboxes)), *mailboxes, *allowed,
            ],
        )  # fmt: skip
        if reply == -1:
            raise LeaseLost(f"run {run_id!r}: lease lost before it could suspend")
        return bool(reply == 1)

    async def finish(
        self,
        run_id: str,
        fence: int,
        status: RunStatus,
        now: float,
        fields: dict[str, str],
        *,
        event_data: str = "",
        retention: float | None = None,
        delete_until: float | None = None,
    ) -> None:
        k = self.keys
        flat = [x for pair in fields.items() for x in pair]
        reply = await self._call(
            "finish",
            [k.run(run_id)],
            [
                k.base_of(run_id), run_id, str(fence), status.value, _num(now), event_data,
                "" if delete_until is None else _num(delete_until),
                "" if retention is None else _num(retention), *flat,
            ],
        )  # fmt: skip
        if reply == -1:
            raise LeaseLost(f"run {run_id!r}: lease lost; its {status.value} outcome was dropped")
        self._raise(run_id, reply)

    async def release(self, run_id: str, fence: int) -> None:
        k = self.keys
        await self._call("release", [k.run(run_id)], [k.base_of(run_id), run_id, str(fence)])

    async def renew(self, leases: Sequence[tuple[str, int]], expiry: float) -> list[str]:
        by_part: dict[int, list[str]] = {}
        for run_id, fence in leases:
            by_part.setdefault(self.keys.partition(run_id), []).extend((run_id, str(fence)))
        lost: list[str] = []
        for p, flat in by_part.items():
            lost += await self._call(
                "renew", [self._anchor(p)], [self.keys.base(p), _num(expiry), *flat]
            )
        return lost

    async def tick(
        self, now: float, max_recoveries: int, recovery_error: str, limit: int = 100
    ) -> TickResult:
        fired = recovered = 0
        due: list[float] = []
        for p in self._partitions():
            f, r, nt, nl = await self._call(
                "tick",
                [self._anchor(p)],
                [self.keys.base(p), _num(now), str(limit), str(max_recoveries), recovery_error],
            )
            fired += int(f)
            recovered += int(r)
            due += [float(x) for x in (nt, nl) if x != ""]
        return TickResult(fired, recovered, min(due) if due else None)

    # -- client operations ---------------------------------------------------

    async def signal(
        self,
        run_id: str,
        mailbox: str,
        payload: str,
        dedup_id: str | None,
        *,
        now: float = 0.0,
        event_data: str = "",
        decision_by: str | None = None,
    ) -> bool:
        k = self.keys
        reply = await self._call(
            "signal",
            [k.run(run_id)],
            [k.base_of(run_id), run_id, mailbox, payload, dedup_id or "", _num(now), event_data,
             "1" if decision_by is not None else "", decision_by or ""],
        )  # fmt: skip
        self._raise(run_id, reply)
        return bool(reply[0] == 1)

    async def cancel(self, run_id: str, reason: str, now: float, *, event_data: str = "") -> None:
        k = self.keys
        reply = await self._call(
            "cancel",
            [k.run(run_id)],
            [k.base_of(run_id), run_id, reason, _num(now), event_data],
        )
        self._raise(run_id, reply)

    async def resume(
        self, run_id: str, discard_key: str | None, *, now: float = 0.0, event_data: str = ""
    ) -> None:
        k = self.keys
        reply = await self._call(
            "resume",
            [k.run(run_id), k.journal(run_id)],
            [k.base_of(run_id), run_id, discard_key or "", _num(now), event_data],
        )
        self._raise(run_id, reply)

    async def audit(self, run_id: str, event_type: str, now: float, event_data: str) -> None:
        k = self.keys
        reply = await self._call(
            "audit", [k.run(run_id)], [k.base_of(run_id), run_id, event_type, _num(now), event_data]
        )
        self._raise(run_id, reply)

    # -- retention ---------------------------------------------------------------

    async def delete(self, run_id: str, now: float, *, event_data: str = "") -> None:
        k = self.keys
        reply = await self._call(
            "delete", [k.run(run_id)], [k.base_of(run_id), run_id, _num(now), event_data]
        )
        self._raise(run_id, reply)

    async def get_tombstone(self, run_id: str) -> StoredRun | None:
        h: Any = await self.client.hgetall(self.keys.gone(run_id))
        return parse_run(run_id, h) if h else None

    # -- event log and checkpoints ------------------------------------------------

    async def events(self, run_id: str, cursor: str | None, limit: int) -> list[RawEvent]:
        start = "-" if cursor is None else f"({cursor}"
        entries: Any = await self.client.xrange(self.keys.events(run_id), start, "+", count=limit)
        return [RawEvent(str(eid), run_id, fields) for eid, fields in entries]

    async def checkpoints(self, run_id: str) -> list[dict[str, str]]:
        # Run-level checkpoints are stream entries; a step_completed checkpoint
        # lives in its step's js: entry ("seq:id:at", see the Lua `journaled`).
        k = self.keys
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.xrange(k.checkpoints(run_id), "-", "+")
            pipe.hgetall(k.base_of(run_id) + SUFFIX["jseq"] + run_id)
            entries, marks = await pipe.execute()
        return _checkpoints(entries, marks)

    async def correlation(self, run_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        """Trace and tenant ids of runs (for feed followers); unknown runs are left out."""
        async with self.client.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hmget(self.keys.run(run_id), ["trace_id", "tenant_id"])
            rows = await pipe.execute()
        return {
            run_id: (trace or run_id, tenant or None)
            for run_id, (trace, tenant) in zip(run_ids, rows, strict=True)
            if trace is not None or tenant is not None
        }

    async def follow(
        self, subscription: Any, timeout: float, count: int
    ) -> tuple[list[RawEvent], Any]:
        if subscription is None:
            subscription = self.blocking_client.pubsub()
            await subscription.subscribe(*(self.keys.feed(p) for p in self._partitions()))
        out: list[RawEvent] = []
        msg = await subscription.get_message(ignore_subscribe_messages=True, timeout=timeout)
        while msg is not None:
            out.append(_feed_event(msg["data"]))
            if len(out) >= count:
                break
            msg = await subscription.get_message(ignore_subscribe_messages=True, timeout=0.0)
        return out, subscription

    async def unfollow(self, subscription: Any) -> None:
        if isinstance(subscription, PubSub):
            await subscription.aclose()  # type: ignore[no-untyped-call]

    # -- blocking waits --------------------------------------------------------

    async def wait_ready(self, queues: Sequence[str] | None, timeout: float) -> bool:
        names = list(queues) if queues else [None]
        return await self._blpop_any(
            [[self.keys.wake(p, q) for q in names] for p in self._partitions()], timeout
        )

    async def _blpop_any(self, per_partition: list[list[str]], timeout: float) -> bool:
        """BLPOP until any of the lists has an element (or `timeout` seconds)."""
        secs = max(timeout, 0.001)  # BLPOP's timeout is in seconds (0 blocks forever)
        if len(per_partition) == 1:
            return await self.blocking_client.blpop(per_partition[0], timeout=secs) is not None
        # One BLPOP per partition: a cluster refuses keys of several slots in one.
        waits = [
            asyncio.ensure_future(self.blocking_client.blpop(keys, timeout=secs))
            for keys in per_partition
        ]
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            return any(t.result() is not None for t in done)
        finally:
            for t in waits:
                t.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    async def wait_finished(self, run_id: str, timeout: float) -> bool:
        # Rotating the one-element list onto itself reads it without taking it,
        # so every waiter wakes. Returns at once if the run already finished.
        key = self.keys.done(run_id)
        reply = await self.blocking_client.brpoplpush(key, key, max(timeout, 0.001))
        return reply is not None

    # -- outbox ------------------------------------------------------------------------

    async def record_out(
        self,
        run_id: str,
        fence: int,
        key: str,
        record: str,
        intents: Sequence[NewIntent],
        *,
        now: float = 0.0,
        event: StepEvent | None = None,
    ) -> None:
        k = self.keys
        ev = event or _NO_EVENT
        out: list[str] = []
        for intent in intents:
            # the end of the intent's event data; the script puts its id first
            tail = dumps({"channel": intent.channel, "idempotency_key": intent.idempotency_key})
            out += [intent.channel, intent.body, tail[1:]]
        # `record`'s arguments, then the intents and their count (see _RECORD_OUT)
        ok = await self._call(
            "record_out",
            [k.run(run_id), k.journal(run_id)],
            [k.base_of(run_id), run_id, str(fence), key, record, _num(now),
             ev.type, ev.data, ev.checkpoint, *out, str(len(intents))],
        )  # fmt: skip
        if ok != 1:
            raise LeaseLost(f"run {run_id!r}: lease lost; step {key!r} was not recorded")

    async def claim_intents(
        self, channels: Sequence[str], limit: int, now: float, lease_ttl: float
    ) -> tuple[list[IntentClaim], float | None]:
        claims: list[IntentClaim] = []
        due: list[float] = []
        if not channels:
            return claims, None
        for p in self._partitions():
            taken, soonest = await self._call(
                "claim_intents",
                [self._anchor(p)],
                [self.keys.base(p), _num(now), _num(now + lease_ttl),
                 str(max(limit - len(claims), 0)), *channels],
            )  # fmt: skip
            claims += [
                IntentClaim(str(iid), run_id, body, int(n), int(f))
                for iid, run_id, body, n, f in taken
            ]
            if soonest != "":
                due.append(float(soonest))
        return claims, min(due) if due else None

    async def settle_intent(
        self,
        claim: IntentClaim,
        outcome: str,
        now: float,
        *,
        due: float | None = None,
        error: str = "",
        event_data: str = "",
    ) -> bool:
        if outcome not in ("sent", "retry", "dead", "release"):
            raise ValueError(f"unknown intent outcome {outcome!r}")
        p = self.keys.partition(claim.run_id)
        reply = await self._call(
            "settle_intent",
            [self.keys.intent(p, claim.intent_id)],
            [self.keys.base(p), claim.intent_id, str(claim.delivery), _num(now), outcome,
             "" if due is None else _num(due), error, event_data],
        )  # fmt: skip
        return bool(reply == 1)

    async def renew_intents(self, claims: Sequence[IntentClaim], expiry: float) -> list[str]:
        by_part: dict[int, list[str]] = {}
        for c in claims:
            by_part.setdefault(self.keys.partition(c.run_id), []).extend(
                (c.intent_id, str(c.delivery))
            )
        lost: list[str] = []
        for p, flat in by_part.items():
            lost += await self._call(
                "renew_intents", [self._anchor(p)], [self.keys.base(p), _num(expiry), *flat]
            )
        return lost

    async def intents(self, run_id: str) -> list[tuple[str, dict[str, str]]] | None:
        k = self.keys
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.exists(k.run(run_id))
            pipe.smembers(k.intents(run_id))
            exists, ids = await pipe.execute()
        if not exists:
            return None
        p = k.partition(run_id)
        ordered = sorted(ids, key=int)
        async with self.client.pipeline(transaction=False) as pipe:
            for iid in ordered:
                pipe.hgetall(k.intent(p, iid))
            rows = await pipe.execute()
        return [(iid, h) for iid, h in zip(ordered, rows, strict=True) if h]

    async def wait_intents(self, channels: Sequence[str], timeout: float) -> bool:
        if not channels:
            await asyncio.sleep(max(timeout, 0.001))
            return False
        return await self._blpop_any(
            [[self.keys.outbox_wake(p, c) for c in channels] for p in self._partitions()], timeout
        )


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return parts._replace(netloc=netloc).geturl()
