"""A Redis Cluster slot moving to another master while a worker serves its runs.

The move is done by hand the way ``redis-cli --cluster reshard`` does it:
``CLUSTER SETSLOT <slot> IMPORTING`` on the new master, ``MIGRATING`` on the
old one, ``MIGRATE`` of the slot's keys a few at a time (slowly here, so that
runs start, record steps, take signals and finish throughout), then
``SETSLOT <slot> NODE`` everywhere. Meanwhile keys of the slot live on both
masters.

Decisions pinned here (stores._migrating):
- a store operation on the moving slot runs whole or not at all: Redis
  refuses it before its script runs (its probe key is missing on both
  masters), so no script writes part of its keys and then aborts (a run left
  without its ``status``, a claim that took a run off its queue, a key
  written on the new master while the old one still has it, which stops the
  move with ``BUSYKEY``);
- the store retries the calls refused during the move, so afterwards every run
  is readable and has completed with its result, each step completed exactly
  once, and no run was lost.

Before the probe and the retries, the load test failed at once: a start
answered "Script attempted to access a non local key", and with retries but
no probe a run was left without its ``status`` (``CorruptRecord``).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import cast

import pytest
import pytest_asyncio
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.exceptions import AskError, ClusterError, MovedError, ResponseError, TryAgainError
from redis.exceptions import TimeoutError as RedisTimeoutError

from sdk import Client, RunStatus, Worker, current_run, flow, step, wait_for
from stores import _migrating, _redispy
from stores._keys import SUFFIX
from stores._scripts import build_scripts
from stores.redis import RedisStore
from testing.conformance._support import new_run
from tests._cluster import LocalCluster, cluster_store, running_cluster

RUNS = 48  # started before and during the move
STEPS = 4  # steps before the signal (one more after it)
KEYS_PER_MIGRATE = 3
MIGRATE_PAUSE = 0.05  # seconds between two MIGRATEs: the move lasts a few seconds
FINISH = 25.0

#: How many times each (run, step) executed, in this process.
EXECUTED: Counter[tuple[str, int]] = Counter()


@step
async def add(x: int, i: int) -> int:
    EXECUTED[current_run().run_id, i] += 1
    await asyncio.sleep(random.uniform(0, 0.01))
    return x + i


@flow(name="tests.cluster_migration.work")
async def work(x: int) -> int:
    total = 0
    for i in range(STEPS):
        total += await add(x, i)
    extra = await wait_for("go")
    return total + int(extra) + await add(x, 100)


def expected(x: int, extra: int) -> int:
    return sum(x + i for i in range(STEPS)) + extra + x + 100


@pytest.fixture(name="cluster", scope="module")
def cluster_fixture() -> Iterator[LocalCluster]:
    with running_cluster() as cluster:
        yield cluster


@pytest_asyncio.fixture(name="store")
async def store_fixture(cluster: LocalCluster, key_prefix: str) -> AsyncIterator[RedisStore]:
    store = await cluster_store(cluster, key_prefix, 1)
    try:
        yield store
    finally:
        await store.close()


class SlotMove:
    """Moves one slot from its master to another, a few keys at a time."""

    def __init__(self, cluster: LocalCluster, slot: int, source: int, target: int) -> None:
        self.slot = slot
        self.nodes = {p: aioredis.Redis(port=p, decode_responses=True) for p in cluster.ports}
        self.source, self.target = source, target
        # ASKING holds for the next command on its connection only: one connection
        self.asking = aioredis.Redis(
            port=target, decode_responses=True, single_connection_client=True
        )
        self.migrated = 0
        self.errors: list[str] = []  # MIGRATE refusals (BUSYKEY: a key written on both)

    async def node_id(self, port: int) -> str:
        return str(await self.nodes[port].execute_command("CLUSTER", "MYID"))  # type: ignore[no-untyped-call]

    async def begin(self) -> None:
        src_id, dst_id = await self.node_id(self.source), await self.node_id(self.target)
        await self.nodes[self.target].execute_command(  # type: ignore[no-untyped-call]
            "CLUSTER", "SETSLOT", self.slot, "IMPORTING", src_id
        )
        await self.nodes[self.source].execute_command(  # type: ignore[no-untyped-call]
            "CLUSTER", "SETSLOT", self.slot, "MIGRATING", dst_id
        )

    async def migrate(self, keys: list[str]) -> None:
        src = self.nodes[self.source]
        try:
            await src.execute_command(  # type: ignore[no-untyped-call]
                "MIGRATE", "127.0.0.1", self.target, "", 0, 5000, "KEYS", *keys
            )
        except aioredis.ResponseError as e:
            # what redis-cli --cluster reshard stops on; move on (REPLACE) to
            # see what else goes wrong
            self.errors.append(f"MIGRATE {keys}: {e}")
            await src.execute_command(  # type: ignore[no-untyped-call]
                "MIGRATE", "127.0.0.1", self.target, "", 0, 5000, "REPLACE", "KEYS", *keys
            )
        self.migrated += len(keys)

    async def finish(self, pause: float = 0.0) -> None:
        """Migrate the slot's other keys (`pause` s between batches); end the move."""
        src = self.nodes[self.source]
        while keys := await src.execute_command(  # type: ignore[no-untyped-call]
            "CLUSTER", "GETKEYSINSLOT", self.slot, KEYS_PER_MIGRATE
        ):
            await self.migrate(keys)
            await asyncio.sleep(pause)
        # the new owner first (redis-cli's order), then the old one, then the rest
        dst_id = await self.node_id(self.target)
        others = [p for p in self.nodes if p not in (self.source, self.target)]
        for port in [self.target, self.source, *others]:
            await self.nodes[port].execute_command("CLUSTER", "SETSLOT", self.slot, "NODE", dst_id)  # type: ignore[no-untyped-call]

    async def holders(self, key: str) -> list[int]:
        """The ports of the masters that hold `key` now."""
        out = []
        try:
            if await self.nodes[self.source].exists(key):
                out.append(self.source)
        except AskError:  # the old master has no such key (any more)
            pass
        await self.asking.execute_command("ASKING")  # type: ignore[no-untyped-call]
        if await self.asking.exists(key):
            out.append(self.target)
        return out

    async def run(self, started: asyncio.Event) -> None:
        await self.begin()
        started.set()
        await self.finish(MIGRATE_PAUSE)

    async def close(self) -> None:
        for node in [*self.nodes.values(), self.asking]:
            await node.aclose()


def slot_move(cluster: LocalCluster, store: RedisStore) -> SlotMove:
    """A move of partition 0's slot from its master to another one."""
    rc = store.client
    assert isinstance(rc, RedisCluster)
    node = rc.get_node_from_key(store.keys.base(0))
    assert node is not None
    target = next(p for p in cluster.ports if p != node.port)
    return SlotMove(cluster, rc.keyslot(store.keys.base(0)), node.port, target)


@pytest.mark.slow
async def test_a_call_on_a_moving_slot_writes_nothing_until_the_move_ends(
    cluster: LocalCluster, store: RedisStore
) -> None:
    # A queued run whose record has moved while its queue has not: a claim
    # needs both (it takes the run off its queue, then reads its record). New
    # runs (pipelined starts: child flows) need their record and the indexes.
    client = Client(store)
    await client.start(work, 1, run_id="queued")
    run = await store.get_run("queued")
    assert run is not None and run.status is RunStatus.PENDING
    queue = store.keys.base(0) + SUFFIX["queue"] + run.queue
    move = slot_move(cluster, store)
    try:
        await move.begin()
        await move.migrate([store.keys.run("queued")])
        claim = asyncio.create_task(store.claim("w", [run.queue], 10, time.time(), 30.0))
        news = [new_run("new-1", queue="later"), new_run("new-2", queue="later")]
        starts = asyncio.create_task(store.create_runs(news, ["", ""]))
        await asyncio.sleep(0.5)
        assert not claim.done() and not starts.done()  # refused while it moves, retried
        assert await move.holders(queue) == [move.source]
        assert await move.nodes[move.source].zscore(queue, "queued") is not None, (
            "the claim took the run off its queue, then failed"
        )
        for n in news:
            assert await move.holders(store.keys.run(n.run_id)) == [], "a start wrote half"
        # reads go on: the record that moved is read on the new master (ASK)
        reads = await asyncio.gather(*(store.get_run("queued") for _ in range(16)))
        assert {r.status if r else None for r in reads} == {RunStatus.PENDING}
        await move.finish()
        claimed = await asyncio.wait_for(claim, FINISH)
        started = await asyncio.wait_for(starts, FINISH)
    finally:
        await move.close()
    assert [c.run.run_id for c in claimed] == ["queued"]
    run = await store.get_run("queued")
    assert run is not None and run.status is RunStatus.RUNNING
    assert [s.created for s in started] == [True, True]
    for n in news:
        run = await store.get_run(n.run_id)
        assert run is not None and run.status is RunStatus.PENDING


@pytest.mark.slow
async def test_runs_survive_a_slot_moving_under_load(
    cluster: LocalCluster, store: RedisStore
) -> None:
    move = slot_move(cluster, store)
    worker = Worker(store, [work], concurrency=16, name="migration-worker")
    client = Client(store)
    serving = asyncio.create_task(worker.run())
    EXECUTED.clear()
    extras = {f"mig-{i}": i * 7 for i in range(RUNS)}
    ids = iter(extras)
    started: list[str] = []
    signalled: set[str] = set()

    async def start_some(n: int) -> None:
        for run_id in itertools.islice(ids, n):
            await client.start(work, extras[run_id], run_id=run_id)
            started.append(run_id)
            await asyncio.sleep(random.uniform(0, 0.03))

    async def signal_some() -> None:
        # signals go to runs that started (before or after they wait)
        while len(signalled) < RUNS:
            todo = [r for r in started if r not in signalled]
            for run_id in todo[: random.randint(1, 4)]:
                await client.signal(run_id, "go", str(extras[run_id]))
                signalled.add(run_id)
            await asyncio.sleep(0.05)

    load: list[asyncio.Task[None]] = []
    try:
        await start_some(RUNS // 3)  # some in progress when the move begins
        moving = asyncio.Event()
        load.append(asyncio.create_task(move.run(moving)))
        await moving.wait()
        # the rest start (several at once) while keys are on both masters
        load += [asyncio.create_task(start_some(RUNS // 6)) for _ in range(4)]
        load.append(asyncio.create_task(signal_some()))
        await asyncio.wait_for(asyncio.gather(*load), FINISH)
        assert move.migrated > 0 and len(started) == RUNS
        for run_id, x in extras.items():
            await store.wait_finished(run_id, FINISH)
            run = await store.get_run(run_id)  # readable: every field it needs is there
            assert run is not None, f"run {run_id} was lost"
            assert run.status is RunStatus.COMPLETED, (run_id, run.status, run.error)
            assert run.result == str(expected(x, x)), run_id
    finally:
        for task in load:
            task.cancel()
        await asyncio.gather(*load, return_exceptions=True)
        await worker.stop()
        await asyncio.wait_for(serving, FINISH)
        await move.close()
    assert move.errors == [], "a script wrote a key on the importing master that the old one had"
    for run_id in extras:
        events = await store.events(run_id, None, 1000)
        done = Counter(e.step_key for e in events if e.type == "step.completed")
        assert len(done) == STEPS + 1 and set(done.values()) == {1}, (run_id, done)
        assert [e.type for e in events].count("run.completed") == 1, run_id
        assert all(EXECUTED[run_id, i] == 1 for i in [*range(STEPS), 100]), (
            run_id,
            {i: EXECUTED[run_id, i] for i in [*range(STEPS), 100]},
        )


# -- the parts, without a cluster ---------------------------------------------


def test_the_probe_key_is_in_the_slot_of_the_key_it_is_made_from() -> None:
    keys: list[str | bytes] = ["sf:{p3}:run:order-1", "x:{tag}:j:a{b}c", b"sf:{p0}:run:\xff"]
    for key in keys:
        found = _migrating.probe(key)
        assert found is not None and found != key
        assert key_slot(found if isinstance(found, bytes) else found.encode()) == key_slot(
            key if isinstance(key, bytes) else key.encode()
        )
    assert _migrating.probe("sf:{p3}:run:a") == "sf:{p3}:~slot-moving"
    assert _migrating.probe("no-tag") is None and _migrating.probe("empty:{}:tag") is None


def test_only_a_slot_move_counts_as_moving() -> None:
    assert _migrating.moving(TryAgainError("Multiple keys request during rehashing of slot"))
    assert _migrating.moving(AskError("15882 127.0.0.1:7001"))
    assert _migrating.moving(ClusterError("TTL exhausted."))
    assert _migrating.moving(
        ResponseError("Script attempted to access a non local key in a cluster node script: x")
    )
    assert not _migrating.moving(MovedError("15882 127.0.0.1:7001"))  # a new owner: followed
    assert not _migrating.moving(ResponseError("WRONGTYPE Operation against a key"))
    assert not _migrating.moving(ClusterError("Cluster is down"))


async def test_a_refused_call_is_retried_until_the_move_ends() -> None:
    answers = cast("list[Exception | str]", [TryAgainError("slot moving")] * 3 + ["OK"])

    async def attempt() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert await _migrating.call(attempt, "-- steadyflow:record\n", ["k"]) == "OK"
    assert answers == []


async def test_a_move_that_never_ends_names_the_operation_and_its_run() -> None:
    calls = 0

    async def attempt() -> str:
        nonlocal calls
        calls += 1
        raise TryAgainError("Multiple keys request during rehashing of slot")

    source = build_scripts(cluster=True)["record"]
    with pytest.raises(_migrating.SlotMoving) as caught:
        await _migrating.call(attempt, source, ["sf:{p0}:run:order-7"], wait=0.2)
    message = str(caught.value)
    assert "'record'" in message and "order-7" in message and "still being moved" in message
    assert isinstance(caught.value, RedisTimeoutError)  # workers back off and try again
    assert calls > 2


async def test_other_errors_are_not_retried() -> None:
    calls = 0

    async def attempt() -> str:
        nonlocal calls
        calls += 1
        raise ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")

    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await _migrating.call(attempt, "", ["k"])
    assert calls == 1


def test_a_redirected_command_goes_on_the_connection_that_sent_asking() -> None:
    client = RedisCluster(host="127.0.0.1", port=7000)
    node = ClusterNode("127.0.0.1", 7000)
    client.nodes_manager.nodes_cache[node.name] = node
    _redispy.follow_asks(client)
    _redispy.follow_asks(client)  # idempotent
    later = ClusterNode("127.0.0.1", 7001)  # a node found after (a failover, a new master)
    client.nodes_manager.nodes_cache[later.name] = later
    for n in (node, later):
        first, asking = n.acquire_connection(), n.acquire_connection()
        n.release(first)
        n.release(asking)  # ASKING was sent on it: the redirected command follows on it
        assert n.acquire_connection() is asking
