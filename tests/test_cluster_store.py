"""Redis Cluster as a store: ``redis+cluster://`` URLs, partition tags spread evenly
over the masters, and a worker process and the CLI on a real local cluster
(``tests._cluster``; skipped without redis-server/redis-cli, failed for that when
CI=true). The conformance kit on a cluster: tests/test_cluster_conformance.py.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
import redis

from sdk import Client, RunStatus
from stores import open_store
from stores._cluster import cluster_clients, nodes
from stores._keys import SLOTS, Keys, partition_tags, slot
from stores.redis import RedisStore
from tests._cluster import LocalCluster, running_cluster
from tests.conftest import free_port
from tests.crashflows import ROOT, Workers, one_step, read_marks

pytestmark = pytest.mark.xdist_group("cluster")


@pytest.fixture(name="cluster", scope="module")
def cluster_fixture() -> Iterator[LocalCluster]:
    with running_cluster(masters=3) as cluster:
        yield cluster


@pytest_asyncio.fixture(name="cluster_store")
async def cluster_store_fixture(
    cluster: LocalCluster, key_prefix: str
) -> AsyncIterator[RedisStore]:
    store = open_store(cluster.url, prefix=key_prefix)
    try:
        yield store
    finally:
        await store.close()


def per_master(cluster: LocalCluster, partitions: int) -> list[int]:
    """How many of `partitions` partitions each master's slots hold."""
    owner: dict[int, int] = {}
    for start, end, master, *_ in redis.Redis(port=cluster.ports[0]).cluster("SLOTS"):
        for s in range(int(start), int(end) + 1):
            owner[s] = int(master[1])
    counts = Counter(owner[slot(tag)] for tag in partition_tags(partitions))
    return sorted(counts.get(port, 0) for port in set(owner.values()))


# -- URLs ---------------------------------------------------------------------------


def test_a_cluster_url_names_nodes_user_and_password() -> None:
    assert nodes("redis+cluster://ops:p%40ss@10.0.0.1:7000,10.0.0.2:7001") == (
        [("10.0.0.1", 7000), ("10.0.0.2", 7001)], "ops", "p@ss",
    )  # fmt: skip
    assert nodes("rediss+cluster://[::1]:7000/0") == ([("::1", 7000)], None, None)
    assert nodes("redis+cluster://cache") == ([("cache", 6379)], None, None)


@pytest.mark.parametrize(
    ("url", "fault"),
    [
        ("redis+cluster://:secret@h:7000/3", "a Redis Cluster has no databases"),
        ("redis+cluster://:secret@h:x", "bad node 'h:x'"),
        ("redis+cluster://:secret@h:7000,:7001", "bad node ':7001'"),
        ("redis+cluster://:secret@h:7000?ssl_cert_reqs=none", "unknown options"),
    ],
)
def test_a_bad_cluster_url_is_refused_naming_the_fault_not_the_password(
    url: str, fault: str
) -> None:
    with pytest.raises(ValueError, match=fault) as refused:
        open_store(url)
    assert "secret" not in str(refused.value)


async def test_a_cluster_store_has_16_partitions_unless_told_and_hides_its_password() -> None:
    # (no command is sent: the clients connect at their first)
    store = open_store("redis+cluster://:secret@127.0.0.1:7000,127.0.0.1:7001")
    told = open_store("rediss+cluster://127.0.0.1:7000", partitions=4)
    single = open_store("redis://127.0.0.1:6379/0")
    try:
        assert store.describe() == {
            "store": "redis+cluster://:***@127.0.0.1:7000,127.0.0.1:7001",
            "prefix": "sf", "partitions": 16,
        }  # fmt: skip
        assert store.cluster and told.cluster and not single.cluster
        assert (told.keys.partitions, single.keys.partitions) == (4, 1)
    finally:
        for s in (store, told, single):
            await s.close()


async def test_an_acl_user_from_the_url_is_who_the_store_connects_as(
    cluster: LocalCluster, key_prefix: str
) -> None:
    user = f"u{key_prefix[-8:]}"
    for port in cluster.ports:  # ACL users are per node
        cluster.cli(port, "ACL", "SETUSER", user, "on", ">s3cret", "~*", "&*", "+@all")
    try:
        url = cluster.url.replace("redis+cluster://", f"redis+cluster://{user}:s3cret@")
        store = open_store(url, prefix=key_prefix, partitions=4)
        try:
            client = Client(store)
            await client.start(one_step, "/dev/null", "x", run_id="acl-1")
            assert (await client.get("acl-1")).status is RunStatus.PENDING
            assert str(cluster.ports[0]) in store.describe()["store"]
            assert "s3cret" not in store.describe()["store"]
        finally:
            await store.close()
        wrong = open_store(url.replace("s3cret", "wrong"), prefix=key_prefix)
        try:
            # as a single node's store: an AuthenticationError (a ConnectionError)
            with pytest.raises(
                redis.exceptions.AuthenticationError, match="invalid username-password"
            ):
                await Client(wrong).get("acl-1")
        finally:
            await wrong.close()
    finally:
        for port in cluster.ports:
            cluster.cli(port, "ACL", "DELUSER", user)


def test_the_store_s_cluster_clients_never_close_all_connections_on_a_moved() -> None:
    # redis-py's default (every 5th MOVED) closed the connections of commands in flight
    commands, blocking = cluster_clients("redis+cluster://127.0.0.1:7000")
    assert commands.reinitialize_steps == blocking.reinitialize_steps == 0
    told, _ = cluster_clients("redis+cluster://127.0.0.1:7000", reinitialize_steps=7)
    assert told.reinitialize_steps == 7


async def test_a_cluster_no_node_of_which_answers_is_a_connection_error() -> None:
    # not redis-py's RedisClusterException: every caller (the worker's retries, the
    # CLI's exit code 6) takes a ConnectionError for the store being unavailable
    store = open_store(f"redis+cluster://127.0.0.1:{free_port()}", partitions=2)
    try:
        with pytest.raises(redis.exceptions.ConnectionError, match="cannot be connected"):
            await Client(store).list_runs()
    finally:
        await store.close()


def test_the_cli_exits_6_naming_the_cluster_when_no_node_answers() -> None:
    url = f"redis+cluster://127.0.0.1:{free_port()}"
    done = subprocess.run(
        [sys.executable, "-m", "sdk.cli", "runs", "list", "--store", url],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 6, done.stderr
    assert url in done.stderr and "Traceback" not in done.stderr


# -- partition tags -----------------------------------------------------------------


def test_one_partition_keeps_the_p0_tag() -> None:
    assert partition_tags(1) == ("p0",)
    assert Keys("sf", 1).base(0) == "sf:{p0}:"


@pytest.mark.parametrize("partitions", [2, 3, 8, 16, 64, 1000])
def test_each_partition_lands_in_its_own_share_of_the_slots(partitions: int) -> None:
    width = SLOTS / partitions
    tags = partition_tags(partitions)
    assert [int(slot(tag) // width) for tag in tags] == list(range(partitions))
    assert partition_tags(partitions) == tags  # the same in every process
    assert all(tag == f"p{i}" or tag.startswith(f"p{i}.") for i, tag in enumerate(tags))


def test_too_many_partitions_are_refused() -> None:
    with pytest.raises(ValueError, match="partitions must be 1 to 1024, got 1025"):
        Keys("sf", 1025)


def test_the_tag_slot_is_the_one_redis_computes(cluster: LocalCluster) -> None:
    for tag in partition_tags(8):
        asked = cluster.cli(cluster.ports[0], "CLUSTER", "KEYSLOT", f"sf:{{{tag}}}:runs")
        assert int(asked) == slot(tag)


def test_8_partitions_spread_3_3_2_over_3_masters(cluster: LocalCluster) -> None:
    assert per_master(cluster, 8) == [2, 3, 3]
    assert per_master(cluster, 16) == [5, 5, 6]


def test_8_partitions_leave_no_master_of_6_without_one() -> None:
    with running_cluster(masters=6) as six:
        assert per_master(six, 8) == [1, 1, 1, 1, 2, 2]
        assert per_master(six, 16) == [2, 2, 3, 3, 3, 3]


# -- a real cluster -----------------------------------------------------------------


async def test_runs_spread_over_every_master(
    cluster: LocalCluster, cluster_store: RedisStore, key_prefix: str
) -> None:
    client = Client(cluster_store)
    for i in range(48):
        await client.start(one_step, "/dev/null", f"r{i}", run_id=f"spread-{i}")

    held = [
        len(redis.Redis(port=port).keys(f"{key_prefix}:*"))
        for port in cluster.master_ports()
    ]  # fmt: skip
    assert len(held) == 3 and min(held) > 0


async def test_a_worker_process_and_the_cli_work_on_a_cluster(
    cluster: LocalCluster, cluster_store: RedisStore, key_prefix: str, tmp_path: Path
) -> None:
    workers = Workers(cluster.url, key_prefix, tmp_path)
    client = Client(cluster_store)
    markers = tmp_path / "markers"
    try:
        worker = workers.spawn()
        handles = [
            await client.start(one_step, str(markers), f"run-{i}", run_id=f"cli-{i}")
            for i in range(12)
        ]
        for handle in handles:
            assert await handle.result(timeout=30) == f"run-{handles.index(handle)}"
        assert {m.pid for m in read_marks(markers)} == {worker.pid}
    finally:
        workers.close()
    listed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "sdk.cli", "runs", "list", "--json",
         "--store", cluster.url, "--prefix", key_prefix],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert {r["run_id"] for r in json.loads(listed.stdout)["runs"]} == {
        f"cli-{i}" for i in range(12)
    }
