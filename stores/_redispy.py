"""The one module that knows how redis-py works inside (STYLE rule 15).

Every store operation is one ``EVALSHA``. redis-py's own path for it
(``Script.__call__`` -> ``Redis.execute_command``) takes a connection from the
pool and gives it back per call (a lock, a connection check, observability
hooks, an event dispatch): on a 2-vCPU VM that is about a third of a
``store.record`` call and a quarter of a whole step (``python -m
bench.script_path``, figures in docs/benchmarks.md). `Lane` saves that, and
`pack` the per-argument encoding of redis-py's command packer. What they
rely on, and what keeps them honest:

- connections come from the client's pool (``get_connection``) and stay
  checked out of it while the lane holds them, so pool-wide operations reach
  them: ``disconnect()`` (and ``aclose()``), ``set_retry``, credential
  re-authentication (applied after each call, as ``release`` would), and
  marks for reconnection (honoured after each call, as ``release`` would);
  ``close`` gives them back;
- a call uses only the connection's public methods (``send_packed_command``,
  ``read_response``, ``retry.call_with_retry``), so connection errors are
  retried with the connection's `Retry`, reconnecting with its TLS, ACL and
  database settings, and a cancelled call closes its connection (redis-py's
  ``read_response`` does) so no later call reads a stale reply;
- ``NOSCRIPT`` is left to redis-py's script object (``Redis.register_script``),
  which loads the script and runs it again over the normal path.

**Decoding.** The store's clients decode replies with ``encoding_errors=
READ_ERRORS`` ("surrogateescape"). redis-py decodes a whole reply as it parses
it: with strict decoding, one stored value that is not UTF-8 (written by
something other than Steadyflow, or a damaged key) makes the *whole* reply
raise, so a claim of ten runs would fail for one bad byte in one of them, and
keep failing. Decoded with surrogateescape, each bad byte becomes a lone
surrogate (``"\\udcff"``), which no valid UTF-8 decodes to: the store finds them
per run (`stores._decode.unreadable`) and reports that run damaged. Commands go
the other way strictly (`pack`, and `strict_args` for redis-py's own path): a
str with a lone surrogate is refused (``UnicodeEncodeError``) rather than
stored as bytes no reader could decode; `bytes` go as they are (the store
names a run whose id was read with bad bytes by exactly those bytes).

`unavailable` tells an outage (connection refused or lost, a timeout, a
server still loading its data set) from every other error.

`script_runner` picks the lane for the clients it supports (a plain
``redis.asyncio.Redis``, fakeredis's included) and redis-py's normal path for
any other (Redis Cluster, a single-connection client): a store works with any
client redis-py has, only faster with some. Tested against the oldest and the
newest redis-py ``pyproject.toml`` allows (``.ci/run``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = [
    "READ_ERRORS",
    "Lane",
    "RedisPyScripts",
    "ScriptRunner",
    "pack",
    "script_runner",
    "strict_args",
    "unavailable",
]

#: How the store's clients decode replies (see the module docstring).
READ_ERRORS = "surrogateescape"


def unavailable(error: BaseException) -> bool:
    """Whether `error` means Redis cannot be reached or is not serving now: a
    refused or lost connection (``BusyLoadingError`` is one), a timeout, an
    ``OSError`` underneath. Anything else is a fault in the data or the call."""
    return isinstance(error, (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError))


def strict_args(args: Sequence[Any]) -> list[Any]:
    """`args` with each str encoded strictly (bytes as given): what `pack` sends,
    for redis-py's own path, whose encoder may be lenient (`READ_ERRORS`)."""
    return [a.encode() if type(a) is str else a for a in args]


class ScriptRunner(Protocol):
    """How a store sends its script calls."""

    async def run(self, script: AsyncScript, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """``EVALSHA`` of `script`: its reply, or the error Redis answered."""

    async def close(self) -> None:
        """Give back whatever the runner holds (not the client's own pool)."""


def script_runner(client: Any, *, size: int | None = None) -> ScriptRunner:
    """The fastest runner `client` supports: a `Lane` on its pool, else redis-py's path.

    `size` bounds the lane's connections (default: half the pool's maximum, at
    most 64, so that other commands always find room in the pool).
    """
    pool = getattr(client, "connection_pool", None)
    if (
        not isinstance(client, aioredis.Redis)
        or not isinstance(pool, ConnectionPool)
        or client.single_connection_client  # its lock would be bypassed
    ):
        return RedisPyScripts()
    if size is None:
        size = max(1, min(64, pool.max_connections // 2))
    return Lane(pool, size)


class RedisPyScripts:
    """redis-py's own path: the script object, through its client."""

    async def run(self, script: AsyncScript, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        return await script(strict_args(keys), strict_args(args))

    async def close(self) -> None:
        return None


class _Unusual(Exception):
    """An argument `pack` leaves to redis-py."""


def pack(args: tuple[Any, ...], encoding: str = "utf-8", errors: str = "strict") -> bytes:
    """One command in RESP, byte for byte what redis-py's packer sends.

    About a third of the time of redis-py's packer (every argument through
    ``Encoder.encode``, the buffer rebuilt per argument): 5.0 against 13.8 µs
    for a step's 14-argument ``EVALSHA`` (``timeit``, a busy 2-vCPU VM).
    Raises `_Unusual` for what redis-py treats specially: a command name with
    a space (``"CONFIG GET"`` is split in two), ``bool`` (refused),
    ``memoryview`` and any other type or subclass.
    """
    first = args[0]
    if (type(first) is str and " " in first) or (type(first) is bytes and b" " in first):
        raise _Unusual
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        t = type(a)
        if t is str:
            b = a.encode(encoding, errors)
        elif t is bytes:
            b = a
        elif t is int:
            b = b"%d" % a
        elif t is float:
            b = repr(a).encode()
        else:
            raise _Unusual
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def _packed(conn: AbstractConnection, args: tuple[Any, ...]) -> list[bytes]:
    enc = conn.encoder
    try:
        # strictly, whatever the connection decodes with (see the module docstring)
        return [pack(args, enc.encoding, "strict")]
    except _Unusual:
        return conn.pack_command(*args)


class Lane:
    """Up to `size` connections checked out of `pool`, for script calls.

    A call takes an idle one (or makes the pool give one more, or waits for
    one when all are busy) and puts it back after: no lock, no pool round
    trip per call.
    """

    def __init__(self, pool: ConnectionPool, size: int) -> None:
        if size < 1:
            raise ValueError(f"a lane needs at least one connection, got size={size}")
        self._pool = pool
        self._size = size
        self._made: set[AbstractConnection] = set()
        self._making = 0
        self._idle: list[AbstractConnection] = []
        self._waiters: deque[asyncio.Future[AbstractConnection]] = deque()
        cls = pool.connection_class
        # Pool-wide hooks that redis-py runs when a connection is released;
        # the versions that have them (feature-tested, not version-tested).
        self._should_reconnect: Callable[[AbstractConnection], bool] | None = getattr(
            cls, "should_reconnect", None
        )  # redis-py >= 7
        self._re_auth: Callable[[AbstractConnection], Awaitable[None]] | None = getattr(
            cls, "re_auth", None
        )  # in every supported redis-py (5.3+), not in every connection class

    async def run(self, script: AsyncScript, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """``EVALSHA`` of `script`: its reply, or the error Redis answered."""
        conn = self._idle.pop() if self._idle else await self._take()
        command = ("EVALSHA", script.sha, len(keys), *keys, *args)
        try:
            return await conn.retry.call_with_retry(
                lambda: self._call(conn, command),
                lambda _error: conn.disconnect(),
            )
        except NoScriptError:
            pass  # a flushed or restarted server: below, once the connection is back
        finally:
            await self._give(conn)
        # redis-py loads it and runs it again
        return await script(strict_args(keys), strict_args(args))

    async def close(self) -> None:
        """Give every connection back to the pool (closing the ones it no longer knows)."""
        made, self._made, self._idle = self._made, set(), []
        for conn in made:
            try:
                await self._pool.release(conn)
            except KeyError:  # the pool was reset meanwhile
                await conn.disconnect()

    @property
    def connections(self) -> int:
        """How many connections the lane holds (at most its size)."""
        return len(self._made)

    @staticmethod
    async def _call(conn: AbstractConnection, command: tuple[Any, ...]) -> Any:
        # connects (or reconnects) first and runs the health check
        await conn.send_packed_command(_packed(conn, command))
        return await conn.read_response()

    # -- connections ---------------------------------------------------------

    async def _take(self) -> AbstractConnection:
        if len(self._made) + self._making < self._size:
            self._making += 1
            try:
                conn: AbstractConnection = await self._pool.get_connection()  # type: ignore[no-untyped-call]
            except RedisConnectionError:
                if not self._made and self._making == 1:
                    raise  # none held, none coming: nothing to wait for
                # the pool is full (a non-blocking pool says so): wait for ours
            else:
                self._made.add(conn)
                return conn
            finally:
                self._making -= 1
        waiter: asyncio.Future[AbstractConnection] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._hand_on(waiter.result())  # handed over just as we were cancelled
            else:
                waiter.cancel()  # _hand_on skips it
            raise

    async def _give(self, conn: AbstractConnection) -> None:
        try:
            if self._should_reconnect and self._should_reconnect(conn):
                await conn.disconnect()  # reconnects on its next use
            if self._re_auth:
                await self._re_auth(conn)  # a no-op without a new token
        except Exception:
            # The call's reply is in hand; a reconnect authenticates afresh.
            await conn.disconnect()
        finally:
            if conn in self._made:
                self._hand_on(conn)
            else:  # the lane was closed during the call: the pool takes it back
                with contextlib.suppress(KeyError):  # unless the pool was reset meanwhile
                    await self._pool.release(conn)

    def _hand_on(self, conn: AbstractConnection) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        self._idle.append(conn)
