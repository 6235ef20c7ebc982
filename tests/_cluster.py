"""A local Redis Cluster owned by the tests (`bench._localcluster.LocalCluster`:
redis-server processes on free loopback ports, stopped by pid).

`running_cluster` is the fixture body: one cluster for a test module, skipped
without redis-server/redis-cli on PATH, and failed for that when CI=true.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio.cluster import RedisCluster

from bench._localcluster import LocalCluster, cluster_tools
from stores._redispy import READ_ERRORS
from stores.redis import RedisStore
from tests._tls import self_signed
from tests.conftest import IN_CI, NO_REDIS_SERVER

__all__ = ["LocalCluster", "cluster_client", "cluster_store", "cluster_tools", "running_cluster"]


@contextlib.contextmanager
def running_cluster(
    masters: int = 3, replicas: int = 0, *, tls: bool = False
) -> Iterator[LocalCluster]:
    """A started `LocalCluster` in a temporary directory, stopped (by pid) after;
    with `tls`, TLS only, its certificate at ``cluster.tls[0]``."""
    if cluster_tools() is None:
        why = NO_REDIS_SERVER + " (or redis-cli): a local Redis Cluster needs both"
        if IN_CI:
            pytest.fail(why + " (CI=true: required)")
        pytest.skip(why)
    with tempfile.TemporaryDirectory(prefix="sf-cluster-") as workdir:
        certs = self_signed(Path(workdir)) if tls else None
        cluster = LocalCluster(Path(workdir), masters=masters, replicas=replicas, tls=certs)
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()


async def cluster_client(cluster: LocalCluster) -> RedisCluster:
    """redis-py's plain cluster client on `cluster`, connected (its slot map read)."""
    client = RedisCluster(
        host="127.0.0.1", port=cluster.ports[0], decode_responses=True,
        encoding_errors=READ_ERRORS,
        reinitialize_steps=0,  # as the store's own clients (stores._cluster.cluster_clients)
    )  # fmt: skip
    await client.initialize()
    return client


async def cluster_store(cluster: LocalCluster, prefix: str, partitions: int) -> RedisStore:
    """A store on `cluster` with plain, connected cluster clients (commands and blocking reads)."""
    return RedisStore(
        await cluster_client(cluster), prefix=prefix, partitions=partitions,  # type: ignore[arg-type]
        blocking_client=await cluster_client(cluster),  # type: ignore[arg-type]
    )  # fmt: skip
