"""Script calls on Redis Cluster while their slot moves to another master.

When a slot is resharded (``redis-cli --cluster reshard``, or ``CLUSTER
SETSLOT ... MIGRATING``/``IMPORTING`` and ``MIGRATE`` by hand), its keys are
moved a few at a time: meanwhile some are on the old master, some on the new
one. Redis checks the keys a command *declares* before running it (a script's
``KEYS``): all on this node, it runs; some missing, ``TRYAGAIN``; all missing,
``ASK`` (the new master then runs it only if it has them all). A key a script
only builds inside Lua is checked when the script touches it, by which time
the script may have written others: it aborts half done ("Script attempted to
access a non local key"), or, on the new master, reads a key that is still on
the old one as missing and writes a second copy of it (the move then stops
with ``BUSYKEY``).

So every script call on a cluster declares, besides its own keys, a `probe`
key of its slot that nothing ever writes. While the slot is moving the probe
is missing on both masters, so Redis refuses the call before the script runs
(``TRYAGAIN`` on either side, or ``ASK`` then ``TRYAGAIN``): a script runs
whole on the slot's one owner, or not at all. Outside a move the probe costs
nothing (Redis looks keys up only for a slot being moved); a single Redis
never checks ``KEYS``.

Reads follow ``ASK`` in redis-py (``ASKING``, then the command, on the new
master). redis-py's asyncio cluster client (up to 8.1 at least) sends the two
on two different pooled connections when the node has several idle ones (it
takes the oldest idle one each time): the command arrives without ``ASKING``
and is answered ``MOVED`` back to the old master, which answers ``ASK``
again, until the client gives up ("TTL exhausted"); with redis-py's default
``reinitialize_steps`` it also closes all its connections every 5th ``MOVED``,
failing every command in flight (the store's clients set it to 0:
`stores._cluster.cluster_clients`).
`follow_asks` makes a client's nodes hand out the connection used last, so
the command goes on the connection that just sent ``ASKING`` (`run` applies
it to the client of the scripts it runs).

`run` sends a script call straight to its slot's owner and does not follow
``ASK``/``TRYAGAIN`` (see its docstring); `call` retries the refused calls
with a short backoff, for up to `MOVE_WAIT` seconds: operations on the moving
slot wait for the end of its move. A move that never ends raises `SlotMoving`,
naming the operation and its first key (a run's key holds the run id); it is
a `redis.exceptions.TimeoutError`, so workers treat it as an outage (retry
with backoff) rather than as a fault of the run.
"""

from __future__ import annotations

import asyncio
import collections
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    MovedError,
    NoScriptError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = [
    "MOVE_WAIT",
    "SlotMoving",
    "call",
    "declared",
    "follow_asks",
    "moving",
    "probe",
    "run",
]

T = TypeVar("T")

#: How long a script call waits for its slot's move to end (seconds).
MOVE_WAIT = 30.0
_FIRST, _CAP = 0.005, 0.25  # backoff: first wait, longest wait (seconds)

#: The suffix of the probe key: after the hash tag, like no key the store writes.
_PROBE = ":~slot-moving"

#: How Redis refuses a script call on a moving slot from inside the script.
_REFUSALS = ("Script attempted to access a non local key", "TRYAGAIN", "ASK ")


class SlotMoving(RedisTimeoutError):
    """A script call's Redis Cluster slot was still being moved after `MOVE_WAIT` s."""


def probe(key: str | bytes) -> str | bytes | None:
    """A key of `key`'s slot that nothing writes: `key`'s hash tag (``{...}``)
    and `_PROBE`. None for a key without a hash tag."""
    if isinstance(key, bytes):
        found = probe(key.decode("utf-8", "surrogateescape"))
        return None if found is None else str(found).encode("utf-8", "surrogateescape")
    start = key.find("{")
    end = key.find("}", start + 1)
    if start < 0 or end <= start + 1:
        return None
    return key[: end + 1] + _PROBE


def declared(keys: Sequence[Any], cluster: bool = True) -> list[Any]:
    """What a script call on `keys` declares: on a cluster, `keys` and the `probe`
    key of their slot (for a call sent other than by `run`, e.g. pipelined)."""
    found = probe(keys[0]) if cluster and keys else None
    return [*keys, found] if found is not None else list(keys)


def moving(error: BaseException) -> bool:
    """Whether `error` is Redis refusing a call because its slot is being moved."""
    if isinstance(error, (TryAgainError, AskError)):
        return not isinstance(error, MovedError)  # MOVED: the slot has a new owner
    if isinstance(error, ClusterError):  # redis-py's own TRYAGAIN/ASK retries ran out
        return "TTL exhausted" in str(error)
    return isinstance(error, ResponseError) and any(r in str(error) for r in _REFUSALS)


def operation(source: str) -> str:
    """A script's name, from its first line (``-- steadyflow:<name>``, see stores._scripts)."""
    first = source.split("\n", 1)[0]
    return first.removeprefix("-- steadyflow:") if first.startswith("-- steadyflow:") else "?"


async def call(
    attempt: Callable[[], Awaitable[T]],
    source: str,
    keys: Sequence[str | bytes],
    *,
    wait: float = MOVE_WAIT,
) -> T:
    """`attempt()` (a call of the script `source` on `keys`), again after a short
    backoff while Redis refuses it for a slot move, for up to `wait` seconds;
    then `SlotMoving`."""
    deadline = time.monotonic() + wait
    pause = _FIRST
    while True:
        try:
            return await attempt()
        except (ResponseError, ClusterError) as e:
            if not moving(e):
                raise
            if time.monotonic() + pause > deadline:
                first: Any = keys[0] if keys else "?"
                raise SlotMoving(
                    f"store operation {operation(source)!r} on {first!r}: its Redis Cluster "
                    f"slot was still being moved to another node after {wait:.0f} s ({e})"
                ) from e
        await asyncio.sleep(pause * random.uniform(0.5, 1.0))
        pause = min(2 * pause, _CAP)


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
    ``ASK`` on the connection that sent its ``ASKING`` (see the module
    docstring). Idempotent; does nothing to a client not built as expected."""
    manager = getattr(client, "nodes_manager", None)
    cache = getattr(manager, "nodes_cache", None)
    if type(cache) is not dict:  # already done, or not redis-py's cluster client
        return
    for node in cache.values():
        _last_used_first(node)
    manager.nodes_cache = _Nodes(cache)  # type: ignore[union-attr]


async def run(client: Any, script: Any, keys: Sequence[Any], args: Sequence[Any]) -> Any:
    """``EVALSHA`` of `script` (redis-py's script object) on the Redis Cluster
    `client`: its reply, or the error Redis answered; retried by `call` while
    its slot moves. `keys` and `args` go as given (encoded by the caller).

    The call goes to the slot's owner as the client knows it, and an ``ASK``
    or ``TRYAGAIN`` answer is not followed but retried here: with the probe
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
    all_keys = declared(keys)

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

    return await call(attempt, str(script.script), keys)
