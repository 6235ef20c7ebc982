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
  re-authentication (applied after each call, as ``release`` would; redis-py's
  own ``re_auth`` is skipped while the connection has no new token,
  ``_re_auth_token``, the one private attribute read here), and marks for
  reconnection (honoured after each call, as ``release`` would); ``close``
  gives them back;
- a call uses only the connection's public methods (``send_packed_command``,
  ``read_response``, ``retry.call_with_retry``), so connection errors are
  retried with the connection's `Retry`, reconnecting with its TLS, ACL and
  database settings, and a cancelled call closes its connection (redis-py's
  ``read_response`` does) so no later call reads a stale reply (a call in a
  pipelined batch is answered by the batch's own task, which reads every
  reply, so its caller's cancellation leaves nothing unread). A call enters
  the `Retry` only once it failed, that failure counting as the `Retry`'s
  first (`_after`); the health check redis-py makes before a command is asked
  for only when it is due (`_health_due`, redis-py's own test). Both save a
  coroutine per call and change nothing else (tests/test_lane.py);
- calls made while others are on the wire are pipelined: one write, the
  replies read back in order (`Lane._joined`); a connection lost under a
  batch sends the unanswered calls again one by one, with the retries a call
  alone gets (a script that had run is run again, as after any retried call);
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

**Redis Cluster.** What the other store modules need of redis-py's cluster
client beyond its public calls is here too: a script call sent straight to
its slot's owner while the slot may be moving (`run_on_cluster`, with the
probe key and the retries of `stores._migrating`, which knows how Redis
behaves during a move), an ``ASK``-redirected command kept on the connection
that sent ``ASKING`` (`follow_asks`: a node's idle connections, ``_free``, and
the client's node cache), a fresh read of the slot map (`reload_slot_map`) and
a connection of one's own to a node, with its settings (`node_connection`,
for `stores._sharded`). ``tests/test_adapters.py`` checks that no other module
of ``stores`` reaches redis-py's private parts.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.commands.core import AsyncScript
from redis.exceptions import ClusterDownError, MovedError, NoScriptError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from stores import _migrating

__all__ = [
    "READ_ERRORS",
    "Lane",
    "RedisPyScripts",
    "ScriptRunner",
    "follow_asks",
    "is_cluster",
    "node_connection",
    "pack",
    "reload_slot_map",
    "run_on_cluster",
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


def is_cluster(client: Any) -> bool:
    """Whether `client` is redis-py's asyncio Redis Cluster client."""
    return isinstance(client, RedisCluster)


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
        if is_cluster(client):  # its reads too follow ASK rightly (see `follow_asks`)
            follow_asks(client)
        return RedisPyScripts()
    if size is None:
        size = max(1, min(64, pool.max_connections // 2))
    return Lane(pool, size)


class RedisPyScripts:
    """redis-py's own path: the script object, through its client."""

    async def run(self, script: AsyncScript, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        client = script.registered_client
        if is_cluster(client):  # runs whole or not at all while its slot moves
            return await run_on_cluster(client, script, strict_args(keys), strict_args(args))
        return await script(strict_args(keys), strict_args(args))

    async def close(self) -> None:
        return None


# -- Redis Cluster --------------------------------------------------------------
#
# Reads follow ASK in redis-py (``ASKING``, then the command, on the new
# master). redis-py's asyncio cluster client (up to 8.1 at least) sends the two
# on two different pooled connections when the node has several idle ones (it
# takes the oldest idle one each time): the command arrives without ``ASKING``
# and is answered ``MOVED`` back to the old master, which answers ``ASK``
# again, until the client gives up ("TTL exhausted"); with redis-py's default
# ``reinitialize_steps`` it also closes all its connections every 5th ``MOVED``,
# failing every command in flight (the store's clients set it to 0:
# `stores._cluster.cluster_clients`). `follow_asks` makes a client's nodes hand
# out the connection used last, so the command goes on the connection that
# just sent ``ASKING`` (`run_on_cluster` applies it to the client of the
# scripts it runs).


async def run_on_cluster(client: Any, script: Any, keys: Sequence[Any], args: Sequence[Any]) -> Any:
    """``EVALSHA`` of `script` (redis-py's script object) on the Redis Cluster
    `client`: its reply, or the error Redis answered; retried by
    `stores._migrating.call` while its slot moves. `keys` and `args` go as given
    (encoded by the caller); the call declares the slot's probe key too
    (`stores._migrating.declared`).

    The call goes to the slot's owner as the client knows it, and an ``ASK``
    or ``TRYAGAIN`` answer is not followed but retried there: with the probe
    key, the new master would answer ``TRYAGAIN`` anyway, and redis-py sends
    its retry after a ``TRYAGAIN`` to the new master without ``ASKING``
    (``MOVED`` back, the slot map flipped, and with redis-py's default
    ``reinitialize_steps`` every 5th time all connections closed). ``MOVED``,
    ``NOSCRIPT`` and connection errors go through redis-py's own path (it
    refreshes the slot map, loads the script, reconnects).
    """
    # the slot map first: the call below goes to a node directly, not through the
    # client's command path, which would read it (a no-op once known)
    await client.initialize()
    follow_asks(client)
    all_keys = _migrating.declared(keys)

    async def attempt() -> Any:
        node = client.get_node_from_key(all_keys[0]) if all_keys else None
        if node is not None:
            try:
                return await node.execute_command(
                    "EVALSHA", script.sha, len(all_keys), *all_keys, *args
                )
            except (
                MovedError, NoScriptError, RedisConnectionError, RedisTimeoutError,
                ClusterDownError,
            ):  # fmt: skip
                pass  # below
        return await script(all_keys, args)

    return await _migrating.call(attempt, str(script.script), keys)


class _LastUsedFirst(collections.deque):  # type: ignore[type-arg]
    """A cluster node's idle connections, handed out most recently used first."""

    def popleft(self) -> Any:
        return self.pop()


class _Nodes(dict):  # type: ignore[type-arg]
    """A cluster client's node cache: a node added later gets the fix too."""

    def __setitem__(self, name: Any, node: Any) -> None:
        _last_used_first(node)
        super().__setitem__(name, node)


def _last_used_first(node: Any) -> None:
    free = getattr(node, "_free", None)
    if type(free) is collections.deque:
        node._free = _LastUsedFirst(free, maxlen=free.maxlen)


def follow_asks(client: Any) -> None:
    """Make redis-py's asyncio cluster `client` send a command redirected by
    ``ASK`` on the connection that sent its ``ASKING`` (see above). Idempotent;
    does nothing to a client not built as expected."""
    manager = getattr(client, "nodes_manager", None)
    cache = getattr(manager, "nodes_cache", None)
    if type(cache) is not dict:  # already done, or not redis-py's cluster client
        return
    for node in cache.values():
        _last_used_first(node)
    manager.nodes_cache = _Nodes(cache)  # type: ignore[union-attr]


async def reload_slot_map(client: RedisCluster) -> None:
    """Read the cluster `client`'s slot map afresh from its nodes (``initialize``
    reads it only once)."""
    await client.nodes_manager.initialize()


def node_connection(node: ClusterNode, **overrides: Any) -> AbstractConnection:
    """A new connection (not connected yet) to the cluster `node`, with the
    node's connection class and settings (TLS, ACL user...) but `overrides`;
    not one of the node's pool: the caller owns it."""
    kwargs = dict(node.connection_kwargs)
    kwargs.update(overrides)
    conn: AbstractConnection = node.connection_class(**kwargs)
    return conn


class _Unusual(Exception):
    """An argument `pack` leaves to redis-py."""


def pack(args: tuple[Any, ...], encoding: str = "utf-8", errors: str = "strict") -> bytes:
    """One command in RESP, byte for byte what redis-py's packer sends.

    About a third of the time of redis-py's packer (every argument through
    ``Encoder.encode``, the buffer rebuilt per argument): 5.0 against 13.8 µs
    for a step's 14-argument ``EVALSHA`` (``timeit``, a busy 2-vCPU VM); with
    ASCII text and ints framed as text and encoded once, 2.3 against 3.2 µs
    for the per-argument loop alone (``timeit``, a quieter VM).
    Raises `_Unusual` for what redis-py treats specially: a command name with
    a space (``"CONFIG GET"`` is split in two), ``bool`` (refused),
    ``memoryview`` and any other type or subclass.
    """
    first = args[0]
    if (type(first) is str and " " in first) or (type(first) is bytes and b" " in first):
        raise _Unusual
    if encoding == "utf-8":
        # ASCII text and ints (a script call's arguments, nearly always) framed
        # as text and encoded once: half the time of the loop below per argument.
        text = [f"*{len(args)}\r\n"]
        for a in args:
            t = type(a)
            if t is str and a.isascii():
                text.append(f"${len(a)}\r\n{a}\r\n")
            elif t is int:
                n = str(a)
                text.append(f"${len(n)}\r\n{n}\r\n")
            else:
                break
        else:
            return "".join(text).encode()
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


def _health_due(conn: AbstractConnection) -> bool:
    """Whether redis-py's ``check_health`` would PING `conn` now (its interval has
    passed since its last reply), the test it makes, without its coroutine; True
    for a connection without those attributes (redis-py decides)."""
    interval = getattr(conn, "health_check_interval", None)
    if interval is None:
        return True
    return bool(interval) and asyncio.get_running_loop().time() > getattr(
        conn, "next_health_check", -1
    )


def _after(error: Exception, call: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
    """A `Retry`'s ``do`` whose first attempt is the one that already failed with `error`."""
    failed = [error]

    async def do() -> Any:
        if failed:
            raise failed.pop()
        return await call()

    return do


class Lane:
    """Up to `size` connections checked out of `pool`, for script calls.

    A call takes an idle one (or makes the pool give one more, or waits for
    one when all are busy) and puts it back after: no lock, no pool round
    trip per call. With `pipelining` (the default), calls made while others
    are on the wire go out together, one round trip for all of them (see
    `_joined`).
    """

    def __init__(self, pool: ConnectionPool, size: int, *, pipelining: bool = True) -> None:
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
        # redis-py's own, which does nothing while `_re_auth_token` is None
        self._re_auth_known = self._re_auth is getattr(AbstractConnection, "re_auth", None)
        # A connection class may take a command as its fields instead of RESP
        # (`pack_fields`: an in-process server's, testing._fakeconn); its own hook.
        self._fields: Callable[[AbstractConnection, tuple[Any, ...]], Any] | None = getattr(
            cls, "pack_fields", None
        )
        self._pipelining = pipelining
        self._inflight = 0  # calls and batches on the wire
        self._queue: list[tuple[tuple[Any, ...], asyncio.Future[Any]]] = []
        self._flushing = False  # a flush of the queue is scheduled
        self._batches: set[asyncio.Task[None]] = set()
        #: Round trips that carried more than one call, and the calls they carried.
        self.batched = (0, 0)

    async def run(self, script: AsyncScript, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """``EVALSHA`` of `script`: its reply, or the error Redis answered."""
        command = ("EVALSHA", script.sha, len(keys), *keys, *args)
        try:
            if self._pipelining and self._inflight:
                return await self._joined(command)
            return await self._alone(command)
        except NoScriptError:
            pass  # a flushed or restarted server
        # redis-py loads it and runs it again
        return await script(strict_args(keys), strict_args(args))

    async def _alone(self, command: tuple[Any, ...]) -> Any:
        """`command` on a connection of its own (nothing else was on the wire)."""
        self._inflight += 1
        try:
            conn = self._idle.pop() if self._idle else await self._take()
            try:
                try:
                    return await self._call(conn, command)
                except Exception as error:
                    first = error
                # The connection's `Retry` takes over with this failure as its
                # first, exactly as if it had made the call: an error it does not
                # retry is raised as it is; one it does disconnects and backs off.
                # (Entering it only now saves a coroutine per call.)
                return await conn.retry.call_with_retry(
                    _after(first, lambda: self._call(conn, command)),
                    lambda _error: conn.disconnect(),
                )
            finally:
                if self._idle_now(conn):
                    self._hand_on(conn)
                else:
                    await self._give(conn)
        finally:
            self._inflight -= 1

    # -- pipelining ------------------------------------------------------------
    # A call made while others are on the wire joins a queue; the queue goes
    # out at the next turn of the event loop as one write on one connection,
    # and the replies are read back in order: N calls made together (a
    # gather of steps, many runs of one worker) cost one round trip, not N,
    # and Redis reads them with one system call. Each call is still its own
    # script, atomic and fenced. A call alone goes out at once, so a
    # sequential caller waits for no batch.

    async def _joined(self, command: tuple[Any, ...]) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((command, future))
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush)
        return await future  # a cancelled caller's reply is read and dropped

    def _flush(self) -> None:
        self._flushing = False
        batch, self._queue = self._queue, []
        task = asyncio.ensure_future(self._send(batch))
        self._batches.add(task)
        task.add_done_callback(self._batches.discard)

    async def _send(self, batch: list[tuple[tuple[Any, ...], asyncio.Future[Any]]]) -> None:
        self._inflight += 1
        conn: AbstractConnection | None = None
        left = batch
        try:
            conn = self._idle.pop() if self._idle else await self._take()
            if len(batch) > 1:
                self.batched = (self.batched[0] + 1, self.batched[1] + len(batch))
            await conn.send_packed_command([b for c, _ in batch for b in _packed(conn, c)])
            for i, (_, future) in enumerate(batch):
                left = batch[i:]
                try:
                    reply = await conn.read_response()
                except (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError):
                    raise
                except Exception as error:  # an error reply: that call's alone
                    if not future.done():
                        future.set_exception(error)
                else:
                    if not future.done():
                        future.set_result(reply)
            left = []
        except (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError):
            # The connection failed: what has no reply yet goes again, one by one,
            # with the connection's retries (as a call alone would be retried).
            if conn is not None:
                await conn.disconnect()
            for command, future in left:
                if not future.done():
                    self._retry_alone(command, future)
            left = []
        finally:
            for _, future in left:  # cancelled (the lane closing): nothing will answer
                if not future.done():
                    future.cancel()
            if conn is not None:
                await self._give(conn)
            self._inflight -= 1

    def _retry_alone(self, command: tuple[Any, ...], future: asyncio.Future[Any]) -> None:
        async def again() -> None:
            try:
                reply = await self._alone(command)
            except asyncio.CancelledError:
                future.cancel()
            except Exception as error:  # handed to the caller
                if not future.done():
                    future.set_exception(error)
            else:
                if not future.done():
                    future.set_result(reply)

        task = asyncio.ensure_future(again())
        self._batches.add(task)
        task.add_done_callback(self._batches.discard)

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

    async def _call(self, conn: AbstractConnection, command: tuple[Any, ...]) -> Any:
        # connects (or reconnects) first and runs the health check if it is due
        fields = self._fields
        packed = _packed(conn, command) if fields is None else fields(conn, command)
        await conn.send_packed_command(packed, _health_due(conn))
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

    def _idle_now(self, conn: AbstractConnection) -> bool:
        """Whether `_give` would only hand `conn` on (the common case, decided
        without a coroutine): it is still the lane's, not marked for reconnection,
        and has no new credentials to apply (redis-py's own ``re_auth`` is a no-op
        without a token; any other is called)."""
        return (
            conn in self._made
            and not (self._should_reconnect and self._should_reconnect(conn))
            and (
                self._re_auth is None
                or (self._re_auth_known and getattr(conn, "_re_auth_token", True) is None)
            )
        )

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
