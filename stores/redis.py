"""The Redis store: the canonical implementation of the store protocol.

One `RedisStore` wraps one redis-py asyncio client. Clients belong to the
event loop that created them, so make a store inside the loop that uses it
(never at module level). How runs are laid out in Redis (keys in
`stores._keys`, scripts in ``stores/lua``, encodings in `stores._codec`)
stays inside `stores`.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from typing import Any, cast
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff

from sdk.store import (
    Consumed,
    CorruptData,
    EventType,
    EventWatch,
    Mailbox,
    NewIntent,
    NewRun,
    Parked,
    Refusal,
    Refused,
    Renewal,
    RunStatus,
    StartOutcome,
    StepEvent,
    TickResult,
)
from stores import _codec, _decode
from stores._children import Children
from stores._claiming import Claiming
from stores._cluster import CLUSTER_SCHEMES, DEFAULT_PARTITIONS, cluster_clients
from stores._codec import mailbox_name, num
from stores._control import Control
from stores._events import Events
from stores._keys import SUFFIX, Keys
from stores._outbox import Outbox
from stores._queuestore import Queues
from stores._reads import Reads
from stores._redispy import READ_ERRORS, is_cluster, script_runner, unavailable
from stores._schedules import Schedules
from stores._scripts import build_scripts
from stores._workers import Workers

__all__ = ["RedisStore"]


class RedisStore(Claiming, Reads, Control, Outbox, Workers, Events, Schedules, Children, Queues):
    """Steadyflow's storage on Redis (or on fakeredis, for ``memory://``).

    Args:
        client: a redis-py asyncio client created with ``decode_responses=True``
            and ``encoding_errors="surrogateescape"`` (`from_url` and
            ``open_store`` make theirs so): then a stored value that is not
            UTF-8 damages only its run (see ``stores._redispy``).
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
        self._bell_id = secrets.token_hex(6)  # names its waits' bells (RedisBase._blpop_until)
        if max_events_per_run < 100:
            raise ValueError(f"max_events_per_run must be at least 100, got {max_events_per_run}")
        self.max_events_per_run = max_events_per_run
        #: Whether `client` is a Redis Cluster client (scripts then guard against slot migration).
        self.cluster = is_cluster(client)
        scripts = build_scripts(events_max=max_events_per_run, cluster=self.cluster)
        # redis-py's script objects: their SHA, and their NOSCRIPT reload.
        self._scripts = {name: client.register_script(src) for name, src in scripts.items()}
        # Every operation is a script call (see stores._redispy).
        self._runner = script_runner(client)
        self._label = "redis"
        # `record`'s key names per run (base, (run, journal)): built once, not per step
        self._record_keys: dict[str, tuple[str, tuple[str, str]]] = {}

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str = "sf", partitions: int | None = None, **kwargs: Any
    ) -> RedisStore:
        """A store on a ``redis://``, ``rediss://`` (TLS), ``unix://`` or Redis
        Cluster (``redis+cluster://``, ``rediss+cluster://``) URL.

        User, password and database come from the URL. ``max_connections``
        (default 64) bounds the connections for script calls (every store
        operation), and as many again for other commands: the pool holds up
        to twice that, and a command waits for a free connection rather than
        failing. ``max_events_per_run`` is the store's own (see the class).
        Other keyword arguments go to redis-py's connection pool
        (``ssl_ca_certs=...``, ``socket_timeout=...``).

        A cluster URL names one or more nodes,
        ``redis+cluster://[user:password@]host:port[,host:port...]``; the
        client finds the others. `partitions` defaults to 1, and to 16 on a
        cluster (`stores._cluster`, docs/operations.md#redis-cluster-and-partitions).
        """
        scheme = urlsplit(url).scheme
        if scheme in CLUSTER_SCHEMES:
            return cls._from_cluster_url(url, prefix, partitions, kwargs)
        if partitions is None:
            partitions = 1
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
        # Replies are decoded leniently: see stores._redispy (READ_ERRORS).
        kwargs.setdefault("encoding_errors", READ_ERRORS)
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

    @classmethod
    def _from_cluster_url(
        cls, url: str, prefix: str, partitions: int | None, kwargs: dict[str, Any]
    ) -> RedisStore:
        caps = {k: kwargs.pop(k) for k in ("max_events_per_run",) if k in kwargs}
        Keys(prefix, DEFAULT_PARTITIONS if partitions is None else partitions)  # checked first
        client, blocking = cluster_clients(url, **kwargs)
        # Typed as a Redis: the cluster client answers the same commands.
        store = cls(
            cast("aioredis.Redis", client),
            prefix=prefix,
            partitions=DEFAULT_PARTITIONS if partitions is None else partitions,
            blocking_client=cast("aioredis.Redis", blocking),
            **caps,
        )
        store._label = _redact(url)
        return store

    def describe(self) -> dict[str, Any]:
        return {
            "store": self._label,
            "prefix": self.keys.prefix,
            "partitions": self.keys.partitions,
        }

    async def close(self) -> None:
        await self._close_waits()
        await self._runner.close()
        if self.blocking_client is not self.client:
            await self.blocking_client.aclose()
        await self.client.aclose()

    # -- runs -------------------------------------------------------------

    async def create_run(
        self, new: NewRun, event_data: str = "", *, max_pending: int | None = None
    ) -> StartOutcome:
        k = self.keys
        reply = await self._call(
            "start",
            [k.run(new.run_id)],
            [k.base_of(new.run_id), new.run_id, new.args_hash, event_data,
             "" if max_pending is None else str(max_pending), *_codec.run_fields(new)],
        )  # fmt: skip
        code, status = _decode.corrupt(new.run_id, reply)  # an existing record may be damaged
        if code == -2:  # the queue is full: nothing written
            return StartOutcome(created=False, status=RunStatus.PENDING, full=int(status))
        return StartOutcome(created=code == 1, status=RunStatus(status), conflict=code == -1)

    async def derive_run(
        self,
        new: NewRun,
        journal: Sequence[tuple[str, str]],
        lineage: Sequence[tuple[str, str]],
        event_type: EventType,
        event_data: str,
        mail: Sequence[tuple[Mailbox, str, str]] = (),
    ) -> Refused | None:
        k = self.keys
        fields = _codec.run_fields(new)
        reply = await self._call(
            "derive",
            [k.run(new.run_id), k.journal(new.run_id)],
            [
                k.base_of(new.run_id), new.run_id, new.args_hash, str(event_type), event_data,
                str(len(fields) // 2), *fields,
                str(len(journal)), *(x for pair in journal for x in pair),
                str(len(mail)),
                *(x for box, payload, dedup in mail for x in (mailbox_name(box), payload, dedup)),
                *(x for pair in lineage for x in pair),
            ],
        )  # fmt: skip
        return _codec.refused(reply)

    # -- activations ----------------------------------------------------------

    async def record(
        self,
        run_id: str,
        fence: int,
        key: str,
        record: str,
        *,
        now: float = 0.0,
        event: StepEvent | None = None,
        intents: Sequence[NewIntent] = (),
    ) -> bool:
        names = self._record_keys.get(run_id)
        if names is None:
            if len(self._record_keys) >= 4096:
                self._record_keys.clear()
            k = self.keys
            names = self._record_keys[run_id] = (
                k.base_of(run_id),
                (k.run(run_id), k.journal(run_id)),
            )
        etype, edata, ecp = ("", "", "") if event is None else (
            event.type._value_, event.data, event.checkpoint._value_ if event.checkpoint else ""
        )  # fmt: skip
        args = [names[0], run_id, str(fence), key, record, num(now), etype, edata, ecp]
        if not intents:
            # the runner directly (what `_call` does): one coroutine less per step
            reply = await self._runner.run(self._scripts["record"], names[1], args)
            if reply.__class__ is list:  # an error reply: damaged data, or a bad argument
                _decode.corrupt(run_id, reply)
            return bool(reply == 1)
        for intent in intents:
            # the end of the intent's event data; the script puts its id first
            tail = json.dumps(
                {"channel": intent.channel, "idempotency_key": intent.idempotency_key},
                separators=(",", ":"), ensure_ascii=False,
            )  # fmt: skip
            args += [intent.channel, intent.body, tail[1:]]
        args.append(str(len(intents)))  # `record`'s arguments, then the intents and their count
        reply = await self._call("record_out", names[1], args)
        return bool(_decode.corrupt(run_id, reply) == 1)

    async def mark(self, run_id: str, fence: int, key: str, now: float) -> bool:
        k = self.keys
        ok = await self._call(
            "mark", [k.run(run_id)], [k.base_of(run_id), run_id, str(fence), key, num(now)]
        )
        return bool(_decode.corrupt(run_id, ok) == 1)

    async def consume(
        self,
        run_id: str,
        fence: int,
        key: str,
        mailbox: Mailbox,
        now: float,
        deadline: float | None,
        record: str,
        timeout_record: str,
        *,
        watch: EventWatch | None = None,
    ) -> tuple[Consumed, str | None]:
        k = self.keys
        args = [
            k.base_of(run_id), run_id, str(fence), key, _codec.mailbox_name(mailbox),
            num(now), "" if deadline is None else num(deadline),
            _codec.splice_prefix(record), timeout_record,
        ]  # fmt: skip
        if watch is not None:
            args += [watch.token, watch.event, watch.shape]
        reply = await self._call("consume", [k.run(run_id), k.journal(run_id)], args)
        code = int(_decode.corrupt(run_id, reply)[0])
        if code == -1:
            return Consumed.FENCED, None
        if code == 1:
            if _decode.unreadable(reply[1]):
                raise CorruptData(
                    run_id, self._key("mailbox", run_id) + ":" + _codec.mailbox_name(mailbox),
                    f"a signal's payload holds bytes that are not UTF-8: {_decode.show(reply[1])}",
                )  # fmt: skip
            return Consumed.SIGNAL, reply[1]
        return (Consumed.TIMEOUT if code == 2 else Consumed.EMPTY), None

    async def suspend(
        self,
        run_id: str,
        fence: int,
        now: float,
        deadline: float | None,
        status: RunStatus,
        records: Sequence[tuple[str, str]],
        mailboxes: Sequence[Mailbox],
        *,
        approvers: Mapping[Mailbox, Sequence[str]] | None = None,
        sticky: float | None = None,
        waiting_on: str | None = None,
    ) -> Parked:
        k = self.keys
        flat = [x for pair in records for x in pair]
        boxes = [_codec.mailbox_name(box) for box in mailboxes]
        allowed = [
            x for box, who in (approvers or {}).items()
            for x in (_codec.mailbox_name(box), "\n".join(who))
        ]  # fmt: skip
        reply = await self._call(
            "suspend",
            [k.run(run_id), k.journal(run_id)],
            [
                k.base_of(run_id), run_id, str(fence), num(now),
                "" if deadline is None else num(deadline), status.value,
                str(len(records)), *flat, str(len(boxes)), *boxes,
                "" if sticky is None else num(sticky), waiting_on or "", *allowed,
            ],
        )  # fmt: skip
        _decode.corrupt(run_id, reply)
        if reply == -1:
            return Parked.FENCED
        return Parked.PARKED if reply == 1 else Parked.READY

    async def finish(
        self,
        run_id: str,
        fence: int,
        status: RunStatus,
        now: float,
        *,
        result: str | None = None,
        result_type: str | None = None,
        error: str | None = None,
        reason: str | None = None,
        retention: float | None = None,
        delete_until: float | None = None,
    ) -> Refused | None:
        k = self.keys
        given = {"result": result, "result_type": result_type, "error": error, "reason": reason}
        flat = [x for name, value in given.items() if value is not None for x in (name, value)]
        reply = await self._call(
            "finish",
            [k.run(run_id)],
            [
                k.base_of(run_id), run_id, str(fence), status.value, num(now), error or "",
                "" if delete_until is None else num(delete_until),
                "" if retention is None else num(retention), *flat,
            ],
        )  # fmt: skip
        if reply == -1:
            return Refused(Refusal.FENCED)
        if isinstance(reply, list) and reply[1] == "corrupt":
            _decode.corrupt(run_id, reply)  # an activation's write: raised, not refused
        return _codec.refused(reply)

    async def continue_as_new(
        self, run_id: str, fence: int, now: float, args: str, event_data: str, archive_data: str
    ) -> Refused | None:
        k = self.keys
        reply = await self._call(
            "continue",
            [k.run(run_id), k.journal(run_id)],
            [k.base_of(run_id), run_id, str(fence), num(now), args, event_data, archive_data],
        )
        if reply == -1:
            return Refused(Refusal.FENCED)
        if isinstance(reply, list) and reply[1] == "corrupt":
            _decode.corrupt(run_id, reply)  # an activation's write: raised, not refused
        return _codec.refused(reply)

    async def release(self, run_id: str, fence: int) -> None:
        k = self.keys
        reply = await self._call(
            "release", [k.run(run_id)], [k.base_of(run_id), run_id, str(fence)]
        )
        _decode.corrupt(run_id, reply)

    async def renew(self, leases: Sequence[tuple[str, int]], expiry: float) -> Renewal:
        by_part: dict[int, list[str]] = {}
        for run_id, fence in leases:
            by_part.setdefault(self.keys.partition(run_id), []).extend((run_id, str(fence)))
        lost: list[str] = []
        asked: list[str] = []
        replies = await self._each("renew", [  # the partitions at once
            ([self._anchor(p)], [self.keys.base(p), num(expiry), *flat])
            for p, flat in by_part.items()
        ])  # fmt: skip
        for reply in replies:
            if reply and reply[0] == "err":
                _decode.corrupt("", reply)
            lost += reply[0]
            asked += reply[1]
        return Renewal(lost, dict(zip(asked[::2], asked[1::2], strict=True)))

    async def tick(
        self, now: float, max_recoveries: int, recovery_error: str, limit: int = 100
    ) -> TickResult:
        replies = await self._each("tick", [  # the partitions at once
            ([self._anchor(p)],
             [self.keys.base(p), num(now), str(limit), str(max_recoveries), recovery_error])
            for p in self._partitions()
        ])  # fmt: skip
        return _decode.merged(_decode.tick_result(_decode.corrupt("", r)) for r in replies)

    async def quarantine(self, run_id: str, fence: int | None, now: float, error: str) -> bool:
        k = self.keys
        # The id goes back as the bytes it was read as: a run id that is not UTF-8
        # (found in an index) is named by exactly those bytes.
        raw = run_id.encode("utf-8", "surrogateescape")
        base = k.base_of(run_id).encode()
        reply = await self._call(
            "quarantine",
            [base + SUFFIX["run"].encode() + raw],
            [base, raw, "" if fence is None else str(fence), num(now), error],
        )
        return bool(_decode.corrupt(run_id, reply) == 1)

    def is_unavailable(self, error: BaseException) -> bool:
        return unavailable(error)

    def key_of(self, run_id: str, part: str) -> str:
        return self._key(part, run_id)


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return parts._replace(netloc=netloc).geturl()
