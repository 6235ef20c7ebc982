"""A Redis Cluster master killed under load: its replica takes over, runs go on.

3 masters with a replica each (``cluster-node-timeout`` 1000 ms). A worker runs
multi-step flows; a master that owns partitions is SIGKILLed in the middle;
its replica is promoted, the store's client re-reads the slot map, the wake-up
subscription moves to the new master (`stores._sharded`), and every run
completes with its result.

What a failover may lose (docs/operations.md, "Failover"): replication is
asynchronous, so a write the old master acknowledged but had not yet sent to
its replica is gone. For a step that means it runs again (steps are
at-least-once anyway); the run itself was created before the kill here, and
its creation replicated long before. The test pins what must hold whatever
was lost: no run is lost or damaged, each completes exactly once with the
right result, and each of its steps completed (events) at least once.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from redis.asyncio.cluster import RedisCluster

from sdk import Client, RunStatus, Worker, current_run, flow, step
from stores.redis import RedisStore
from tests._cluster import LocalCluster, cluster_store, running_cluster

pytestmark = pytest.mark.slow

RUNS = 30
STEPS = 6
PARTITIONS = 6
FINISH = 60.0  # seconds for every run to complete after the kill


#: Set once a quarter of all steps have run: the time to kill a master.
QUARTER = asyncio.Event()
EXECUTED: list[tuple[str, int]] = []


@step
async def add(x: int, i: int) -> int:
    await asyncio.sleep(0.05)
    EXECUTED.append((current_run().run_id, i))
    if len(EXECUTED) >= RUNS * STEPS // 4:
        QUARTER.set()
    return x + i


@flow(name="tests.cluster_failover.work")
async def work(x: int) -> int:
    total = 0
    for i in range(STEPS):
        total += await add(x, i)
    return total


@pytest.fixture(name="cluster")
def cluster_fixture() -> Iterator[LocalCluster]:
    with running_cluster(masters=3, replicas=1) as cluster:
        wait_replicated(cluster)
        yield cluster


def wait_replicated(cluster: LocalCluster, timeout: float = 30) -> None:
    """Until every replica has synced with its master: a replica that never did
    (the first sync starts ~5 s after the cluster is made: diskless sync's delay)
    holds no data and refuses to take over."""
    deadline = time.monotonic() + timeout
    replicas = [p for p in cluster.live_ports() if p not in cluster.master_ports()]
    while not all(
        "master_link_status:up" in cluster.cli(p, "INFO", "replication") for p in replicas
    ):
        if time.monotonic() > deadline:
            raise RuntimeError("the replicas did not sync with their masters")
        time.sleep(0.1)


@pytest_asyncio.fixture(name="store")
async def store_fixture(cluster: LocalCluster) -> AsyncIterator[RedisStore]:
    store = await cluster_store(cluster, "fo", PARTITIONS)
    try:
        yield store
    finally:
        await store.close()


def replicas_of(cluster: LocalCluster, master: int) -> list[int]:
    """The ports of the replicas of the master on port `master`."""
    master_id = cluster.cli(master, "CLUSTER", "MYID").strip()
    return [
        int(line.split()[1].split("@")[0].rsplit(":", 1)[1])
        for line in cluster.cli(master, "CLUSTER", "NODES").splitlines()
        if line.split()[3] == master_id
    ]


@pytest.mark.timeout(180)
async def test_runs_complete_after_a_master_is_killed_and_its_replica_promoted(
    cluster: LocalCluster, store: RedisStore
) -> None:
    rc = store.client
    assert isinstance(rc, RedisCluster)
    # the master owning partition 0 (which holds the worker registry too)
    node = rc.get_node_from_key(store.keys.base(0))
    assert node is not None
    victim = node.port
    (heir,) = replicas_of(cluster, victim)
    EXECUTED.clear()
    QUARTER.clear()
    worker = Worker(store, [work], concurrency=16, lease_ttl=3.0, name="failover-worker")
    client = Client(store)
    xs = {f"fo-{i}": i * 10 for i in range(RUNS)}
    handles = {run_id: await client.start(work, x, run_id=run_id) for run_id, x in xs.items()}
    serving = asyncio.create_task(worker.run())
    try:
        # kill it in the middle: some steps done, most not
        await asyncio.wait_for(QUARTER.wait(), FINISH)
        cluster.kill(victim)
        # its replica takes over once the others see it fail (node timeout: 1 s)
        for _ in range(300):
            if heir in cluster.master_ports():
                break
            await asyncio.sleep(0.1)
        assert heir in cluster.master_ports()
        cluster.wait_ok(timeout=30)

        for run_id, x in xs.items():
            assert await handles[run_id].result(FINISH) == sum(x + i for i in range(STEPS))
        # the worker's wake-ups for partition 0 moved to the new master
        wake = store.keys.wake(0, None)
        assert cluster.cli(heir, "PUBSUB", "SHARDNUMSUB", wake).split() == [wake, "1"]
    finally:
        await worker.stop()
        await asyncio.wait_for(serving, FINISH)
    for run_id in xs:
        run = await store.get_run(run_id)
        assert run is not None and run.status is RunStatus.COMPLETED, run_id
        events = await store.events(run_id, None, 1000)
        done = Counter(e.step_key for e in events if e.type == "step.completed")
        assert len(done) == STEPS, (run_id, done)  # each step at least once
        assert [e.type for e in events].count("run.completed") == 1, run_id
