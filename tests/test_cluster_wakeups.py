"""Wake-ups and the live feed on Redis Cluster: sharded Pub/Sub, one connection per master.

On one node a waiting worker holds one BLPOP. On a cluster that was one BLPOP
per partition (a command may not span slots): with the outbox dispatcher, 2N
blocking connections per worker (measured before this design: 19 connections
for 8 partitions, 131 for 64, on 3 masters). Now the scripts also SPUBLISH on
a sharded channel named like each wake-up list and the worker subscribes per
master (`stores._wakeups`, `stores._sharded`). Pinned here: the connections a
waiting worker holds do not grow with the partitions; every partition's
wake-ups arrive; a token left before the wait is taken at once and one token
wakes one waiter (as BLPOP); a slot moving to another master takes its
subscription along.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
import redis

from stores.redis import RedisStore
from testing.conformance._support import new_run
from tests._cluster import LocalCluster, cluster_store, running_cluster

pytestmark = pytest.mark.slow

#: A wait that returns False ran into this: it was not woken.
WAKE_TIMEOUT = 10.0


@pytest.fixture(name="cluster", scope="module")
def cluster_fixture() -> Iterator[LocalCluster]:
    with running_cluster() as cluster:
        yield cluster


@pytest_asyncio.fixture(name="store")
async def store_fixture(cluster: LocalCluster, key_prefix: str) -> AsyncIterator[RedisStore]:
    store = await cluster_store(cluster, key_prefix, 8)
    try:
        yield store
    finally:
        await store.close()


def node_clients(cluster: LocalCluster) -> dict[tuple[int, str], dict[str, str]]:
    """Every client connection of every master, by (port, client id), as CLIENT
    LIST shows them."""
    out: dict[tuple[int, str], dict[str, str]] = {}
    for port in cluster.master_ports():
        with redis.Redis(port=port, decode_responses=True) as node:
            out |= {(port, c["id"]): c for c in node.client_list() if c["cmd"] != "client|list"}
    return out


async def registered(store: RedisStore, waiters: int = 1) -> None:
    """Until `waiters` waits are subscribed and sleeping on their doorbells."""
    # the store has no event for it: its waiter set is looked at
    while store._waits is None or len(store._waits._waiters) < waiters:  # noqa: ASYNC110
        await asyncio.sleep(0.005)


async def woken_in_partition(store: RedisStore, partition: int, run_id: str) -> bool:
    waiter = asyncio.create_task(store.wait_ready(None, WAKE_TIMEOUT))
    await registered(store)
    await store.create_run(new_run(store.keys.in_partition(run_id, partition)))
    return await waiter


@pytest.mark.parametrize("partitions", [8, 64])
async def test_a_waiting_worker_holds_one_subscribed_connection_per_master_whatever_the_partitions(
    cluster: LocalCluster, key_prefix: str, partitions: int
) -> None:
    store = await cluster_store(cluster, key_prefix, partitions)
    before = node_clients(cluster).keys()
    try:
        # a worker waits for runs and, in its outbox dispatcher, for intents
        waits = [
            asyncio.create_task(store.wait_ready(None, WAKE_TIMEOUT)),
            asyncio.create_task(store.wait_intents(["email"], WAKE_TIMEOUT)),
        ]
        await registered(store, 2)
        held = [c for key, c in node_clients(cluster).items() if key not in before]
        subscribed = [c for c in held if c["ssub"] != "0"]
        masters = len(cluster.master_ports())
        assert len(subscribed) == masters  # one per master, every channel on it
        assert not [c for c in held if c["cmd"] in ("blpop", "brpoplpush")]
        # and, per wait, a pooled connection per master took the tokens left
        # before (a pipeline; not blocking: the pool reuses them)
        assert len(held) <= masters * (1 + len(waits)) < 2 * partitions
        for task in waits:
            task.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
    finally:
        await store.close()


async def test_a_run_started_in_any_partition_wakes_a_waiting_worker(store: RedisStore) -> None:
    for p in range(store.keys.partitions):
        assert await woken_in_partition(store, p, "r") is True  # False: it timed out


async def test_a_wake_up_left_before_the_wait_is_taken_at_once(store: RedisStore) -> None:
    await store.create_run(new_run("r1"))

    assert await store.wait_ready(None, 0.0) is True
    assert await store.wait_ready(None, 0.05) is False  # the one token was taken


async def test_a_wait_takes_one_wake_up_when_several_partitions_have_one(
    store: RedisStore,
) -> None:
    for p in (1, 2):
        await store.create_run(new_run(store.keys.in_partition("r", p)))

    # as one BLPOP: the second token is left for the next wait (another worker)
    assert await store.wait_ready(None, 0.0) is True
    assert await store.wait_ready(None, 0.0) is True
    assert await store.wait_ready(None, 0.05) is False


async def test_one_wake_up_wakes_one_of_two_waiting_workers(
    cluster: LocalCluster, store: RedisStore, key_prefix: str
) -> None:
    other = await cluster_store(cluster, key_prefix, 8)
    try:
        waits = [asyncio.create_task(s.wait_ready(["mail"], WAKE_TIMEOUT)) for s in (store, other)]
        await registered(store)
        await registered(other)

        await store.create_run(new_run("r1", queue="mail"))

        done, (loser,) = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        assert [t.result() for t in done] == [True]  # False: it timed out
        await asyncio.sleep(0.5)  # the other rang too, found no token and waits on
        assert not loser.done()
        loser.cancel()
        await asyncio.gather(loser, return_exceptions=True)
    finally:
        await other.close()


async def test_the_feed_carries_every_partitions_events_over_one_connection_per_master(
    cluster: LocalCluster, store: RedisStore
) -> None:
    _, feed = await store.follow(None, 0.0, 1)
    try:
        assert feed.connections == len(cluster.master_ports())
        ids = {store.keys.in_partition("f", p) for p in range(store.keys.partitions)}
        for run_id in sorted(ids):
            await store.create_run(new_run(run_id))
        seen: set[str] = set()
        while seen != ids:
            events, _ = await store.follow(feed, WAKE_TIMEOUT, 100)
            assert events, f"no feed event within {WAKE_TIMEOUT}s; missing {ids - seen}"
            seen |= {e.run_id for e in events if e.type == "run.created"}
    finally:
        await store.unfollow(feed)


async def move_slot(cluster: LocalCluster, slot: int, source: int, target: int) -> None:
    """Move `slot` with its keys from the master on port `source` to the one on
    `target`, as ``redis-cli --cluster reshard`` does; at the end (SETSLOT ... NODE)
    the old owner drops the slot's sharded subscribers."""
    src = redis.Redis(port=source, decode_responses=True)
    dst = redis.Redis(port=target, decode_responses=True)
    with src, dst:
        src_id, dst_id = (n.execute_command("CLUSTER", "MYID") for n in (src, dst))  # type: ignore[no-untyped-call]
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)  # type: ignore[no-untyped-call]
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)  # type: ignore[no-untyped-call]
        while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):  # type: ignore[no-untyped-call]
            src.execute_command("MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *keys)  # type: ignore[no-untyped-call]
        for port in cluster.master_ports():
            with redis.Redis(port=port, decode_responses=True) as node:
                node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
    cluster.wait_ok()


async def test_a_waiting_worker_follows_its_slot_to_another_master(
    cluster: LocalCluster, key_prefix: str
) -> None:
    store = await cluster_store(cluster, key_prefix, 8)
    try:
        channel = store.keys.wake(3, None)
        slot = store.client.keyslot(channel)  # type: ignore[attr-defined]
        waiter = asyncio.create_task(store.wait_ready(None, WAKE_TIMEOUT))
        await registered(store)
        source = store.client.get_node_from_key(channel).port  # type: ignore[attr-defined]
        target = next(p for p in cluster.master_ports() if p != source)

        await move_slot(cluster, slot, source, target)
        # the subscription moves to the new owner
        with redis.Redis(port=target, decode_responses=True) as node:
            for _ in range(int(WAKE_TIMEOUT / 0.01)):
                if node.execute_command("PUBSUB", "SHARDNUMSUB", channel)[1] == 1:
                    break
                await asyncio.sleep(0.01)
            assert node.execute_command("PUBSUB", "SHARDNUMSUB", channel)[1] == 1
        await store.create_run(new_run(store.keys.in_partition("moved", 3)))

        assert await waiter is True
        assert await woken_in_partition(store, 3, "again") is True
    finally:
        await store.close()
