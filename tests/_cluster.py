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

from bench._localcluster import LocalCluster, cluster_tools
from tests.conftest import IN_CI, NO_REDIS_SERVER

__all__ = ["LocalCluster", "cluster_tools", "running_cluster"]


@contextlib.contextmanager
def running_cluster(masters: int = 3, replicas: int = 0) -> Iterator[LocalCluster]:
    """A started `LocalCluster` in a temporary directory, stopped (by pid) after."""
    if cluster_tools() is None:
        why = NO_REDIS_SERVER + " (or redis-cli): a local Redis Cluster needs both"
        if IN_CI:
            pytest.fail(why + " (CI=true: required)")
        pytest.skip(why)
    with tempfile.TemporaryDirectory(prefix="sf-cluster-") as workdir:
        cluster = LocalCluster(Path(workdir), masters=masters, replicas=replicas)
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()
