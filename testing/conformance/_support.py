"""What the checks share: fixed times, record builders, and reads through the protocol.

Everything here talks to a store only through `sdk.store.Store`; a check
that needs to see what a store holds reads it back with the protocol's own
reads (`get_run`, `read_lineage`, `events`, `checkpoints`, `intents`, ...).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import attrs
import pytest

from sdk._core._journal import Kind, Record, State
from sdk.store import (
    CheckpointKind,
    Claim,
    Consumed,
    EventType,
    FlowScope,
    Lineage,
    Mailbox,
    NewRun,
    RunStatus,
    StepEvent,
    Store,
    StoredCheckpoint,
    StoredEvent,
    StoredIntent,
    StoredRun,
)

C = TypeVar("C", bound=type)


def async_checks(cls: C) -> C:
    """Mark every async ``test_`` method of a group of checks for pytest-asyncio.

    Each method, not the class: a project under ``asyncio_mode = "strict"``
    needs the mark to run them, and a sync test of its own in a subclass must
    not get it (pytest-asyncio warns about a mark on a sync test).
    """
    for name, member in list(vars(cls).items()):
        if name.startswith("test_") and inspect.iscoroutinefunction(member):
            setattr(cls, name, pytest.mark.asyncio(member))
    return cls


T0 = 1_000_000.0  # a fixed "now": stores take time only as an argument
TTL = 10.0  # lease seconds
OWNER = "worker-a"
NO_ARGS = '{"args":[],"kwargs":{},"types":{}}'
RECOVERY_ERROR = json.dumps(
    {"type": "sdk.errors:SteadyflowError", "message": "too many recoveries",
     "reason": "max_recoveries_exceeded"}
)  # fmt: skip
GO = Mailbox("go")
OK_BOX = Mailbox("ok", human=True)
COMPLETED = StepEvent(EventType.STEP_COMPLETED, "", CheckpointKind.STEP_COMPLETED)

# JSON that a store decoding it would change (real Redis's cjson does: it
# rounds numbers to 14 digits, turns [] into {}, and so would many encoders
# re-escape unicode): it must come back exactly as it went in.
TRICKY = json.dumps(
    {"note": "héllo ✓ 🚀 \"quoted\" \\ back", "big": 2**64 + 1, "float": 0.1 + 0.2,
     "empty": [], "nothing": None, "nested": {"list": [1, "two", 3.5]}},
    ensure_ascii=False, separators=(",", ":"),
)  # fmt: skip

#: Signal payloads a store must move through unchanged (id, JSON text).
PAYLOADS = [
    ("empty-list", "[]"),
    ("empty-object", "{}"),
    ("null", "null"),
    ("false", "false"),
    ("zero", "0"),
    ("empty-string", '""'),
    ("nested", '{"a":[],"b":{},"c":null,"d":[[{"e":[null,{}]}]]}'),
    ("unicode", json.dumps("héllo ☃ 日本 \U0001f680", ensure_ascii=False)),
    ("escapes", json.dumps('\\u00e9 "quoted" \n')),
    ("big-int", "12345678901234567890"),
    ("float-17-digits", json.dumps(0.1 + 0.2)),
    ("float-extreme", "-1.7976931348623157e+308"),
    ("mixed-list", '[1,2.5,"x",true,null,[],{}]'),
]


def new_run(
    run_id: str,
    *,
    flow: str = "conformance.flow",
    args: str = NO_ARGS,
    queue: str = "default",
    priority: int = 0,
    created_at: float = T0,
    tenant_id: str | None = None,
    **more: Any,
) -> NewRun:
    """A `NewRun` as `Client.start` makes it (`more`: its optional fields)."""
    digest = hashlib.sha256(f"{flow}\n{args}".encode()).hexdigest()
    run = NewRun(run_id, flow, None, args, digest, queue, priority, tenant_id, created_at)
    return attrs.evolve(run, **more)


def together(store: Store, *names: str) -> list[str]:
    """Run ids for `names` that `store` keeps in one partition: the names themselves
    on a store with one, else the ids it gives a schedule's runs, which all live
    with the schedules (`Store.schedule_run_id`).

    What a store guarantees within a partition (FIFO by enqueue order, queue
    limits, per-partition tick limits) is checked on runs placed together; what
    holds across partitions, on runs anywhere (docs/operations.md#redis-cluster-and-partitions).
    """
    return [store.schedule_run_id(name) for name in names]


def step_record(key: str, pos: int, value: Any = None) -> str:
    return Record(key, pos, Kind.STEP, State.OK, value=value).to_json()


def wait_record(key: str, pos: int) -> str:
    """The record `consume` completes with a signal's payload (as member "value")."""
    return Record(key, pos, Kind.WAIT, State.OK).to_json()


def wait_timeout(key: str, pos: int, due: float) -> str:
    return Record(key, pos, Kind.WAIT, State.TIMEOUT, due=due).to_json()


def pending_wait(key: str, pos: int, due: float | None = None) -> str:
    return Record(key, pos, Kind.WAIT, State.PENDING, due=due).to_json()


def strict(value: Any) -> Any:
    """A JSON value with its types spelled out, so that ``0 != false`` and ``1 != 1.0``."""
    if isinstance(value, dict):
        return ("object", {k: strict(v) for k, v in value.items()})
    if isinstance(value, list):
        return ("array", [strict(v) for v in value])
    return (type(value).__name__, value)


async def start_and_claim(store: Store, run_id: str, *, now: float = T0) -> Claim:
    """Create one run and claim it (the store must hold no other ready run)."""
    await store.create_run(new_run(run_id, created_at=now))
    claims = await store.claim(OWNER, None, 1, now, TTL)
    assert [c.run.run_id for c in claims] == [run_id], "claim did not take the one ready run"
    return claims[0]


async def stored(store: Store, run_id: str) -> StoredRun:
    run = await store.get_run(run_id)
    assert run is not None, f"run {run_id!r} vanished"
    return run


async def status_of(store: Store, run_id: str) -> RunStatus:
    return (await stored(store, run_id)).status


async def lineage_of(store: Store, run_id: str) -> Lineage:
    lineage = await store.read_lineage(run_id)
    assert lineage is not None, f"read_lineage({run_id!r}) found no run"
    return lineage


async def journal_of(store: Store, run_id: str) -> dict[str, str]:
    return (await lineage_of(store, run_id)).journal


async def claim_ids(
    store: Store,
    *,
    owner: str = OWNER,
    queues: list[str] | None = None,
    limit: int = 100,
    now: float = T0,
    lease_ttl: float = TTL,
    flows: list[FlowScope] | None = None,
) -> list[str]:
    claims = await store.claim(owner, queues, limit, now, lease_ttl, flows=flows)
    return [c.run.run_id for c in claims]


async def consume(
    store: Store, run_id: str, fence: int, *, key: str = "~wait:go#1",
    mailbox: Mailbox = GO, now: float = T0, deadline: float | None = None,
) -> tuple[Consumed, str | None]:  # fmt: skip
    """`consume` as an activation calls it: a wait record at position 0."""
    return await store.consume(
        run_id, fence, key, mailbox, now, deadline,
        wait_record(key, 0), wait_timeout(key, 0, deadline or 0.0),
    )  # fmt: skip


async def drain(store: Store, run_id: str, fence: int, mailbox: Mailbox = GO) -> list[str]:
    """Take every signal of a mailbox of a claimed run, oldest first."""
    taken: list[str] = []
    for n in range(1, 100):
        key = f"~drain:{mailbox.name}:{int(mailbox.human)}#{n}"
        outcome, payload = await consume(store, run_id, fence, key=key, mailbox=mailbox)
        if outcome is Consumed.EMPTY:
            return taken
        assert outcome is Consumed.SIGNAL and payload is not None, (outcome, payload)
        taken.append(payload)
    raise AssertionError("a mailbox that never runs empty")


async def events_of(store: Store, run_id: str) -> list[StoredEvent]:
    return await store.events(run_id, None, 10_000)


async def types_of(store: Store, run_id: str) -> list[str]:
    return [e.type for e in await events_of(store, run_id)]


async def tick(store: Store, now: float, *, max_recoveries: int = 10) -> tuple[int, int]:
    result = await store.tick(now, max_recoveries, RECOVERY_ERROR)
    return result.fired, result.recovered


@attrs.frozen
class Seen:
    """Everything the protocol's reads show of one run."""

    run: StoredRun | None
    tombstone: StoredRun | None
    lineage: Lineage | None
    events: list[StoredEvent]
    checkpoints: list[StoredCheckpoint]
    intents: list[StoredIntent] | None
    listed: dict[RunStatus | None, bool]


async def seen(store: Store, run_id: str) -> Seen:
    """What a reader sees of `run_id` (to show that a refused call wrote nothing)."""
    listed: dict[RunStatus | None, bool] = {}
    for status in [None, *RunStatus]:
        runs = await store.list_runs(status, None, 10_000)
        listed[status] = run_id in [r.run_id for r in runs]
    return Seen(
        await store.get_run(run_id),
        await store.get_tombstone(run_id),
        await store.read_lineage(run_id),
        await events_of(store, run_id),
        await store.checkpoints(run_id),
        await store.intents(run_id),
        listed,
    )


async def listed_under(store: Store, run_id: str) -> set[RunStatus]:
    """The statuses whose listing (`list_runs(status=...)`) holds `run_id`."""
    found = set()
    for status in RunStatus:
        if run_id in [r.run_id for r in await store.list_runs(status, None, 10_000)]:
            found.add(status)
    return found


class FeedRecorder:
    """Follows a store's live feed (only what is published after `start` is seen)
    and collects (type, data) per run."""

    def __init__(self, store: Store, subscription: Any) -> None:
        self.store = store
        self.subscription = subscription
        self.seen: list[StoredEvent] = []

    @classmethod
    async def start(cls, store: Store) -> FeedRecorder:
        _, sub = await store.follow(None, 0.01, 1)
        return cls(store, sub)

    async def of(self, run_id: str) -> list[tuple[str, Any]]:
        while True:
            batch, self.subscription = await self.store.follow(self.subscription, 0.05, 1000)
            if not batch:
                break
            self.seen += batch
        return [
            (e.type, json.loads(e.data) if e.data else None)
            for e in self.seen
            if e.run_id == run_id
        ]

    async def close(self) -> None:
        await self.store.unfollow(self.subscription)


@contextlib.asynccontextmanager
async def recording(store: Store) -> AsyncIterator[FeedRecorder]:
    """A `FeedRecorder` for the block, closed at its end."""
    feed = await FeedRecorder.start(store)
    try:
        yield feed
    finally:
        await feed.close()
