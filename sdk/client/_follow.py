"""One run's events, followed live: the log first, then each new event as it comes.

The run's event log (`Client.events`) is the truth; the live feed (the store's
Pub/Sub, as `Client.follow` reads it) only says *when* to read the log again.
The feed is subscribed before the log is read, so an event appended in between
is not missed: it is in the log, or it wakes the reader. No polling sleep: the
reader blocks on the feed (with `idle` as its timeout, to notice a deleted run).
A server's followers share one subscription (`sdk.client._feed.SharedFeed`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from sdk._core._checks import check_seconds
from sdk._core._tasks import cancel_and_wait
from sdk._core._types import Event
from sdk.client._feed import SharedFeed
from sdk.errors import RunNotFound

if TYPE_CHECKING:
    from sdk.client._client import Client

__all__ = ["END", "follow_run", "read_ahead"]

_PAGE = 100
#: What `read_ahead` queues after the last item of its source.
END = object()


async def follow_run(
    client: Client,
    run_id: str,
    *,
    cursor: str | None = None,
    idle: float = 5.0,
    feed: SharedFeed | None = None,
) -> AsyncIterator[Event]:
    """Every event of `run_id` after `cursor` (from the start without one), then each
    new one as it is appended, until the run has ended (completed, failed,
    canceled) with its log read to the end, or is deleted.

    `feed` is the live feed to wait on, shared with the process's other followers
    (a server's streams); None: a subscription of this follower's own.

    Raises `RunNotFound` when the run does not exist to begin with.

    Example::

        async for event in follow_run(client, "order-42"):
            print(event.type)
    """
    check_seconds(idle, "follow_run(): idle", positive=True)
    feed = feed if feed is not None else SharedFeed(client.store)
    async with feed.reading():
        await client.get(run_id)  # RunNotFound before anything is subscribed
    ended = False
    news = True  # events since the run's status was last read (or it never was)
    async with feed.watch(run_id) as bell:  # subscribed from here on
        while True:
            try:
                async with feed.reading():
                    page = await client.events(run_id, cursor=cursor, limit=_PAGE)
            except RunNotFound:
                return  # deleted while followed
            for event in page:
                cursor = event.event_id
                yield event
            news = news or bool(page)
            if len(page) == _PAGE:
                continue
            if ended:
                return
            if news:  # (a run ends with an event: no event, no end to look for)
                news = False
                try:
                    # ended: its last events may have come after the page: one more read
                    async with feed.reading():
                        ended = (await client.get(run_id)).status.is_terminal
                except RunNotFound:
                    return
            if not ended:
                # news of the run, or `idle` seconds: read the log again either way
                await bell.wait(idle)


@contextlib.asynccontextmanager
async def read_ahead(source: AsyncIterator[Any]) -> AsyncIterator[asyncio.Queue[Any]]:
    """A small queue a task fills from `source`: its items, then `END`, or the
    exception it raised. A stream waits on the queue with a timeout to send
    keep-alives while the source is quiet, and a slow client holds the task
    back instead of growing a buffer. The task is cancelled on exit."""
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=64)

    async def read() -> None:
        try:
            async for item in source:
                await queue.put(item)
        except Exception as exc:
            await queue.put(exc)
        else:
            await queue.put(END)

    reader = asyncio.create_task(read())
    try:
        yield queue
    finally:
        await cancel_and_wait(reader)  # a cancellation 3.11 loses ends it all the same
