"""``unix://`` URLs: a private redis-server listening on a unix socket only."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk import flow, step
from stores import open_store
from stores._redispy import Lane
from testing import FlowTestEnv
from tests.conftest import IN_CI, PrivateRedis


@step
async def triple(x: int) -> int:
    return 3 * x


@flow(name="tests.unix.tripled")
async def tripled(x: int) -> int:
    return await triple(x)


class UnixRedis(PrivateRedis):
    """A redis-server with no TCP port, listening on `socket` in its work dir."""

    @property
    def socket(self) -> Path:
        return self.workdir / "redis.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.socket}?db=0"

    def start(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            if IN_CI:
                pytest.fail("redis-server is not on PATH (CI=true: required)")
            pytest.skip("redis-server is not on PATH")
        self.proc = subprocess.Popen(
            [exe, "--port", "0", "--unixsocket", str(self.socket), "--unixsocketperm", "700",
             "--dir", str(self.workdir), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while not self.socket.exists():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("redis-server on a unix socket did not start")
            time.sleep(0.02)


@pytest.fixture(name="unix_redis")
def unix_redis_fixture() -> Iterator[UnixRedis]:
    # Not tmp_path: a unix socket path must stay under ~100 bytes.
    with tempfile.TemporaryDirectory(prefix="sf-unix-") as workdir:
        server = UnixRedis(Path(workdir))
        server.start()
        try:
            yield server
        finally:
            server.stop(kill=True)


async def test_a_flow_runs_end_to_end_over_a_unix_socket(unix_redis: UnixRedis) -> None:
    store = open_store(unix_redis.url, prefix="unix")
    try:
        assert isinstance(store._runner, Lane)
        async with FlowTestEnv(store=store) as env:
            handle = await env.start(tripled, 14)
            await env.run_until_idle()
            assert await handle.result(timeout=5) == 42
        assert await store.client.ping()
        info = await store.client.info("server")
        assert info["tcp_port"] == 0  # nothing but the socket carried it
    finally:
        await store.close()


def test_unix_urls_get_no_tcp_only_options() -> None:
    store = open_store("unix:///tmp/nowhere.sock")
    for client in (store.client, store.blocking_client):
        assert "socket_keepalive" not in client.connection_pool.connection_kwargs
    tcp = open_store("redis://127.0.0.1:1/0")
    assert tcp.client.connection_pool.connection_kwargs["socket_keepalive"] is True
