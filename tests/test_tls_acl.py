"""``rediss://`` with an ACL user: a private redis-server with TLS and no default user."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.exceptions

from sdk import flow, step
from stores import open_store
from testing import FlowTestEnv
from tests._tls import self_signed
from tests.conftest import IN_CI, PrivateRedis, _redis_answers, free_port


@step
async def double(x: int) -> int:
    return 2 * x


@flow(name="tests.tls.doubled")
async def doubled(x: int) -> int:
    return await double(x)


class TlsRedis(PrivateRedis):
    """A redis-server that speaks only TLS and knows only the user alice."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.cert = workdir / "cert.pem"  # made by start()
        self.key = workdir / "key.pem"

    def start(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            if IN_CI:
                pytest.fail("redis-server is required (CI=true)")
            pytest.skip("redis-server is not on PATH")
        self.cert, self.key = self_signed(self.workdir)
        self.port = free_port()
        self.proc = subprocess.Popen(
            [exe, "--port", "0", "--tls-port", str(self.port), "--bind", "127.0.0.1",
             "--tls-cert-file", str(self.cert), "--tls-key-file", str(self.key),
             "--tls-ca-cert-file", str(self.cert), "--tls-auth-clients", "no",
             "--save", "", "--appendonly", "no", "--dir", str(self.workdir),
             "--user", "default", "off",
             "--user", "alice", "on", ">s3cret", "~*", "&*", "+@all"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while True:  # the port accepts TCP once the server is up (PING itself needs TLS)
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("TLS redis-server did not start") from None
                time.sleep(0.02)

    def url(self, password: str = "s3cret") -> str:  # type: ignore[override]
        return f"rediss://alice:{password}@127.0.0.1:{self.port}/0"


@pytest.fixture(name="tls_redis")
def tls_redis_fixture(tmp_path: Path) -> Iterator[TlsRedis]:
    server = TlsRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop(kill=True)


async def test_a_flow_runs_over_tls_as_an_acl_user(tls_redis: TlsRedis) -> None:
    store = open_store(tls_redis.url(), ssl_ca_certs=str(tls_redis.cert))
    try:
        async with FlowTestEnv(store=store) as env:
            handle = await env.start(doubled, 21)
            await env.run_until_idle()
            assert await handle.result(timeout=5) == 42
        assert await store.client.acl_whoami() == "alice"
    finally:
        await store.close()


async def test_a_wrong_password_is_a_clear_authentication_error(tls_redis: TlsRedis) -> None:
    store = open_store(tls_redis.url("wrong"), ssl_ca_certs=str(tls_redis.cert))
    try:
        with pytest.raises(redis.exceptions.AuthenticationError):
            await store.client.ping()
    finally:
        await store.close()


def test_the_password_never_appears_in_the_store_description(tls_redis: TlsRedis) -> None:
    store = open_store(tls_redis.url(), ssl_ca_certs=str(tls_redis.cert))
    assert "s3cret" not in repr(store.describe())
    assert "alice" in store.describe()["store"]


def test_plain_tcp_is_refused_by_a_tls_only_server(tls_redis: TlsRedis) -> None:
    assert not _redis_answers("127.0.0.1", tls_redis.port)
