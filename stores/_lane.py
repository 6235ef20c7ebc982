"""Script calls on connections of their own, without redis-py's per-command machinery.

Every store operation is one ``EVALSHA``. Through ``Redis.execute_command``
each call also takes a connection from the pool (an ``asyncio.Condition``, an
``async_timeout``, a connection check, observability hooks) and gives it back
the same way: ~40-70 µs a call on a 2-vCPU VM, where the round trip itself is
~100-130 µs (``bench.step_overhead`` prints both). `Lane` keeps its own idle
list of redis-py connections, made by the store's pool (same URL, TLS, ACL
user, database, parser and packer), and hands one to the next waiter when all
are busy. What matters of redis-py's path is kept:

- connection errors and timeouts are retried with the connection's `Retry`
  (the store's scripts are all safe to run twice), reconnecting on the way;
- a reply that is not read (a cancelled call) closes its connection, which
  reconnects on its next use, so no later call reads a stale reply;
- ``NOSCRIPT`` (a flushed or restarted server) loads the script and runs it again.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from typing import Any

from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.exceptions import NoScriptError

__all__ = ["Lane", "Script"]


class Script:
    """A Lua script and its SHA1 (as Redis names it)."""

    __slots__ = ("sha", "source")

    def __init__(self, source: str) -> None:
        import hashlib

        self.source = source
        self.sha = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()


class Lane:
    """Up to `size` connections of `pool`'s kind, for script calls."""

    def __init__(self, pool: ConnectionPool, size: int) -> None:
        if size < 1:
            raise ValueError(f"a lane needs at least one connection, got size={size}")
        self._pool = pool
        self._size = size
        self._made: list[AbstractConnection] = []
        self._idle: list[AbstractConnection] = []
        self._waiters: deque[asyncio.Future[AbstractConnection]] = deque()

    async def run(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """``EVALSHA`` of `script`: its reply, or the error Redis answered."""
        conn = self._idle.pop() if self._idle else await self._take()
        try:
            return await conn.retry.call_with_retry(
                lambda: self._evalsha(conn, script, keys, args),
                lambda _error: conn.disconnect(),
            )
        finally:
            self._give(conn)

    async def close(self) -> None:
        for conn in self._made:
            await conn.disconnect()
        self._made.clear()
        self._idle.clear()

    @property
    def connections(self) -> int:
        """How many connections the lane has made (at most its size)."""
        return len(self._made)

    # -- connections ---------------------------------------------------------

    async def _take(self) -> AbstractConnection:
        if len(self._made) < self._size:
            conn: AbstractConnection = self._pool.make_connection()  # type: ignore[no-untyped-call]
            self._made.append(conn)
            return conn
        waiter: asyncio.Future[AbstractConnection] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._give(waiter.result())  # handed over just as we were cancelled
            else:
                waiter.cancel()  # _give skips it
            raise

    def _give(self, conn: AbstractConnection) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        self._idle.append(conn)

    # -- the call ------------------------------------------------------------

    @staticmethod
    async def _evalsha(
        conn: AbstractConnection, script: Script, keys: Sequence[str], args: Sequence[Any]
    ) -> Any:
        # send_command connects (or reconnects) first and runs the health check
        await conn.send_command("EVALSHA", script.sha, len(keys), *keys, *args)
        try:
            return await conn.read_response()
        except NoScriptError:
            await conn.send_command("SCRIPT", "LOAD", script.source)
            script.sha = await conn.read_response()
            await conn.send_command("EVALSHA", script.sha, len(keys), *keys, *args)
            return await conn.read_response()
