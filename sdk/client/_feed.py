"""One subscription to the store's live feed, shared by every follower in a process.

A follower of a run (`sdk.client._follow.follow_run`: the HTTP API's event
streams, the console's live pages) needs the feed only as a doorbell: it reads
the run's log, then sleeps until the feed carries an event of that run. One
store subscription per follower costs a Redis connection each (a Pub/Sub
client), and every message of every run is read and parsed once per follower.
`SharedFeed` holds one subscription (one connection; on a Redis Cluster one per
master) however many follow, reads each message once, and rings the `Bell` of
each follower of that message's run (and of every follower of all runs): a
flag and an `asyncio.Event` each, so a follower that is slow to look costs no
buffer. Their reads of the store (each follower reads its run's log when its
bell rings) go `reading` a few at once, so followers woken together (every
stream of a busy run) use a bounded share of the store's connections and leave
the rest to other callers.

The subscription is made when the first follower comes, before its `watch`
returns, so a follower that reads the log after `watch` misses nothing (an
event appended after the read rings its bell), and closed when the last one
leaves. If the feed fails (the store cannot be reached), every bell raises that
error and the subscription is closed; the next follower makes a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from sdk._core._tasks import cancel_and_wait
from sdk.store import Store

__all__ = ["Bell", "SharedFeed"]

#: Feed messages the reader takes in one read.
_BATCH = 1000
#: Seconds the reader blocks on the feed in one read (it reads again at once).
_POLL = 5.0


class Bell:
    """What one follower waits on: rung when the feed carries an event it follows."""

    __slots__ = ("_error", "_rung", "run_id")

    def __init__(self, run_id: str | None) -> None:
        self.run_id = run_id
        self._rung = asyncio.Event()
        self._error: BaseException | None = None

    def ring(self) -> None:
        self._rung.set()

    def fail(self, error: BaseException) -> None:
        self._error = error
        self._rung.set()

    async def wait(self, timeout: float) -> bool:
        """True once the bell has rung since the last call (at once if it has),
        False after `timeout` seconds without; raises the feed's error if it failed."""
        if not self._rung.is_set():
            try:
                async with asyncio.timeout(timeout):
                    await self._rung.wait()
            except TimeoutError:
                return False
        if self._error is not None:
            raise self._error
        self._rung.clear()
        return True


class SharedFeed:
    """The store's live feed, read once for every follower in this process (see
    the module docstring).

    Example::

        feed = SharedFeed(client.store)
        async with feed.watch("order-42") as bell:
            async with feed.reading():
                ...  # read the run's log
            if await bell.wait(5.0):
                ...  # the run has news: read the log again
    """

    def __init__(self, store: Store, *, reads: int = 16) -> None:
        self._store = store
        self._reads = asyncio.Semaphore(reads)
        self._bells: dict[str | None, set[Bell]] = {}  # run id (None: every run) -> bells
        self._count = 0
        self._lock = asyncio.Lock()  # one subscription made or closed at a time
        self._subscription: Any = None
        self._reader: asyncio.Task[None] | None = None

    @property
    def followers(self) -> int:
        """How many follow now."""
        return self._count

    @property
    def subscribed(self) -> bool:
        """Whether the feed's subscription is open (while anyone follows)."""
        return self._subscription is not None

    def reading(self) -> asyncio.Semaphore:
        """Held around each read a follower makes (at most `reads` at once)."""
        return self._reads

    @contextlib.asynccontextmanager
    async def watch(self, run_id: str | None) -> AsyncIterator[Bell]:
        """A bell rung by each event of `run_id` (None: of every run) the feed carries
        from now on: the subscription is live when this returns."""
        bell = Bell(run_id)
        async with self._lock:
            if self._reader is None or self._reader.done():
                await self._close()  # after a failure: what is left of the last one
                _, self._subscription = await self._store.follow(None, 0.0, 1)
                self._reader = asyncio.create_task(
                    self._read(self._subscription), name="steadyflow-feed"
                )
            self._bells.setdefault(run_id, set()).add(bell)
            self._count += 1
        try:
            yield bell
        finally:
            ring = self._bells.get(run_id)
            if ring is not None:
                ring.discard(bell)
                if not ring:
                    del self._bells[run_id]
            self._count -= 1
            if self._count == 0:
                # shielded: a second cancel of the follower must not leave it open
                await asyncio.shield(self._close_unless_followed())

    async def _close_unless_followed(self) -> None:
        async with self._lock:
            if self._count == 0:  # nobody came meanwhile
                await self._close()

    async def _close(self) -> None:
        reader, subscription = self._reader, self._subscription
        self._reader = self._subscription = None
        if reader is not None:
            await cancel_and_wait(reader)
        if subscription is not None:
            with contextlib.suppress(Exception):  # a broken connection is closed all the same
                await self._store.unfollow(subscription)

    async def _read(self, subscription: Any) -> None:
        """Ring the bells of what the feed carries, until cancelled (`_close`, which
        also closes `subscription`) or the feed fails."""
        bells = self._bells
        try:
            while True:
                raw, _ = await self._store.follow(subscription, _POLL, _BATCH)
                for run_id in {r.run_id for r in raw}:
                    for bell in bells.get(run_id, ()):
                        bell.ring()
                for bell in bells.get(None, ()) if raw else ():
                    bell.ring()
        except Exception as exc:
            for ring in bells.values():
                for bell in ring:
                    bell.fail(exc)
