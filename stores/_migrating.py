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

A call refused so is not followed to the new master but retried: `call`
retries it with a short backoff, for up to `MOVE_WAIT` seconds, so
operations on the moving slot wait for the end of its move. A move that never
ends raises `SlotMoving`, naming the operation and its first key (a run's key
holds the run id); it is a `redis.exceptions.TimeoutError`, so workers treat
it as an outage (retry with backoff) rather than as a fault of the run.

This module knows how Redis behaves while a slot moves; how redis-py's
cluster client is made to send such a call (straight to the slot's owner,
without following ``ASK``/``TRYAGAIN``) and to keep a redirected read on the
connection that sent ``ASKING`` is in `stores._redispy` (`run_on_cluster`,
`follow_asks`), the one module that knows redis-py's insides.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from redis.exceptions import AskError, ClusterError, MovedError, ResponseError, TryAgainError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = [
    "MOVE_WAIT",
    "SlotMoving",
    "call",
    "declared",
    "moving",
    "probe",
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
