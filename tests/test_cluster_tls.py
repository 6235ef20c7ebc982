"""``rediss+cluster://``: a Redis Cluster that speaks only TLS, to clients and between nodes.

A local cluster of three masters with a self-signed certificate (`tests._tls`);
the store is opened from its URL as a user would (`open_store`, the CA passed
as ``ssl_ca_certs``). Pinned: a flow runs end to end, including a signal that
wakes the worker (the sharded Pub/Sub doorbells over TLS) and the run's live
feed; the CLI reaches the cluster from the URL alone when the CA is the
process's (``SSL_CERT_FILE``); plain TCP is refused, so nothing went around TLS.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from sdk import Client, RunStatus, Worker, flow, step, wait_for
from sdk.client._follow import follow_run
from stores import open_store
from stores.redis import RedisStore
from tests._cluster import LocalCluster, running_cluster
from tests.conftest import _redis_answers
from tests.crashflows import until

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent


@step
async def double(x: int) -> int:
    return 2 * x


@flow(name="tests.cluster_tls.signalled")
async def signalled(x: int) -> int:
    y = await double(x)
    extra = await wait_for("more")
    return y + int(extra)


@pytest.fixture(name="cluster", scope="module")
def cluster_fixture() -> Iterator[LocalCluster]:
    with running_cluster(tls=True) as cluster:
        yield cluster


@pytest_asyncio.fixture(name="store")
async def store_fixture(cluster: LocalCluster, key_prefix: str) -> AsyncIterator[RedisStore]:
    assert cluster.tls is not None
    store = open_store(cluster.url, prefix=key_prefix, partitions=4,
                       ssl_ca_certs=str(cluster.tls[0]))  # fmt: skip
    try:
        yield store
    finally:
        await store.close()


async def test_a_flow_with_a_signal_runs_over_a_tls_cluster(store: RedisStore) -> None:
    assert store.cluster and store.describe()["store"].startswith("rediss+cluster://")
    client = Client(store)
    worker = Worker(store, [signalled], concurrency=4)
    running = asyncio.create_task(worker.run())
    try:
        handle = await client.start(signalled, 20)
        seen: list[str] = []

        async def follow() -> None:
            async for event in follow_run(client, handle.run_id):
                seen.append(event.type)

        follower = asyncio.create_task(follow())

        async def parked() -> bool:
            return await handle.status() is RunStatus.WAITING_FOR_SIGNAL

        await until(parked, 20, "the run to wait for its signal")
        await client.signal(handle.run_id, "more", 2)  # wakes the worker: a doorbell over TLS
        assert await handle.result(timeout=20) == 42
        await asyncio.wait_for(follower, 20)
        assert "step.completed" in seen and "run.completed" in seen
    finally:
        await worker.stop()
        await running


def test_plain_tcp_is_refused_by_every_node(cluster: LocalCluster) -> None:
    assert not any(_redis_answers("127.0.0.1", port) for port in cluster.ports)


def test_the_cli_reaches_a_tls_cluster_from_its_url(cluster: LocalCluster) -> None:
    assert cluster.tls is not None
    env = {**os.environ, "SSL_CERT_FILE": str(cluster.tls[0]), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "sdk.cli", "runs", "list", "--store", cluster.url, "--limit", "1"],
        capture_output=True, text=True, timeout=60, env=env, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_a_certificate_the_client_does_not_trust_is_named_with_exit_6(
    cluster: LocalCluster,
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sdk.cli", "runs", "list", "--store", cluster.url],
        capture_output=True, text=True, timeout=60, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 6, done.stderr
    assert "certificate verify failed" in done.stderr and "Traceback" not in done.stderr
