"""The store conformance kit on a real local Redis Cluster, and on partitions of one node.

`TestClusterStore`: ``open_store("redis+cluster://...", partitions=8)`` on a
3-master cluster this module starts (``tests._cluster``; skipped without
redis-server/redis-cli, failed for that when CI=true). `TestPartitionedStore`:
the same store on one (fake) node with 5 partitions, where the checks that
depend on order see what several partitions guarantee
(docs/operations.md#redis-cluster-and-partitions).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from stores import open_store
from stores.redis import RedisStore
from testing.conformance import StoreConformance
from tests._cluster import LocalCluster, running_cluster

pytestmark = pytest.mark.xdist_group("cluster")


@pytest.fixture(name="cluster", scope="module")
def cluster_fixture() -> Iterator[LocalCluster]:
    with running_cluster(masters=3) as cluster:
        yield cluster


class TestClusterStore(StoreConformance):
    @pytest_asyncio.fixture(name="store")
    async def store_fixture(
        self, cluster: LocalCluster, key_prefix: str
    ) -> AsyncIterator[RedisStore]:
        store = open_store(cluster.url, prefix=key_prefix, partitions=8)
        try:
            yield store
        finally:
            await store.close()


class TestPartitionedStore(StoreConformance):
    @pytest_asyncio.fixture(name="store")
    async def store_fixture(self) -> AsyncIterator[RedisStore]:
        store = open_store("memory://", partitions=5)
        try:
            yield store
        finally:
            await store.close()
