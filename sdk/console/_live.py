"""Live updates over Server-Sent Events: the page's script refreshes what changed.

The streams carry no data a page renders: each message says "something
changed" and the script fetches the page again and swaps its live region
in. So one rendering (the server's) serves both the first load and every
update, and a burst of events costs one refresh (`THROTTLE`). The streams wait
on the app's one shared feed and count against its stream limits, as the API's
do (`sdk.http._streams`); a refused one is answered 429 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from sdk._core._checks import check_id
from sdk.client._feed import SharedFeed
from sdk.client._follow import END, follow_run, read_ahead
from sdk.console._auth import still_signed_in
from sdk.console._state import Console, refused
from sdk.errors import InvalidArgument, RunNotFound, SteadyflowError
from sdk.http._problems import ApiError
from sdk.http._streams import Slot, stream_answer

__all__ = ["THROTTLE", "run_live", "runs_live"]

#: Seconds between two "changed" messages of a stream, at least.
THROTTLE = 0.5
#: No item within a keep-alive interval.
_QUIET = object()


def _stream(
    source: AsyncIterator[Any], keepalive: float, slot: Slot, signed_in: Callable[[], bool]
) -> StreamingResponse:
    """Frame `source`'s items as ``changed`` messages, at most one per `THROTTLE`
    seconds (then ``end`` when it ends; an error closes the stream and the
    browser's ``EventSource`` reconnects), holding `slot` while it is open. The
    stream closes too once `signed_in` says its session ended (at the next
    message or keep-alive): the reconnection is then refused."""

    async def messages() -> AsyncIterator[str]:
        # (an error, a store outage: close without "end", and the browser reconnects)
        async with read_ahead(source) as queue:

            def drained(item: Any) -> Any:
                """`item`, or the end that the items queued behind it hold."""
                while not queue.empty() and item is not END and not isinstance(item, Exception):
                    item = queue.get_nowait()
                return item

            last = -THROTTLE
            yield "retry: 2000\n\n"
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), keepalive)
                except TimeoutError:
                    item = _QUIET
                if not signed_in():  # signed out, or the session expired
                    return
                if item is _QUIET:
                    yield ": keep-alive\n\n"
                    continue
                item = drained(item)
                if isinstance(item, Exception):
                    return
                if item is not END:
                    # one message for a burst: wait out the rest of the interval first
                    await asyncio.sleep(max(THROTTLE - (time.monotonic() - last), 0.0))
                    item = drained(item)
                last = time.monotonic()
                if isinstance(item, Exception):
                    return
                yield "event: changed\ndata: {}\n\n"
                if item is END:
                    yield "event: end\ndata: {}\n\n"
                    return

    return stream_answer(messages(), slot)


async def _changes(feed: SharedFeed, idle: float) -> AsyncIterator[None]:
    """An item whenever the feed carries an event of any run (`idle`: seconds of
    one wait; the feed's failure ends it)."""
    async with feed.watch(None) as bell:
        while True:
            if await bell.wait(idle):
                yield None


async def run_live(request: Request, console: Console, actor: str) -> Response:
    """``GET /ui/runs/{run_id}/live``: a message whenever the run has a new event."""
    run_id = request.path_params["run_id"]
    try:
        check_id(run_id, "run_id")
    except InvalidArgument as exc:  # no stream to reconnect to, ever
        return Response(str(exc), status_code=422)
    settings = console.settings
    try:
        slot = settings.streams.take(actor)  # given back when the answer ends
    except ApiError as exc:  # over the stream limits: 429, Retry-After
        return refused(exc)
    # After the last event the page shows (its script passes it): no repeat.
    cursor = request.query_params.get("cursor") or None
    try:
        async with settings.streams.feed.reading():  # streams' reads share a few connections
            await console.client.events(run_id, cursor=cursor, limit=1)
    except RunNotFound:
        slot.release()
        return Response(f"no run {run_id!r}", status_code=404)
    except SteadyflowError:  # a bad cursor: follow from the start (one refresh too many)
        cursor = None
    except BaseException:
        slot.release()
        raise
    source = follow_run(
        console.client, run_id, cursor=cursor, idle=settings.sse_idle, feed=settings.streams.feed
    )
    return _stream(source, settings.sse_keepalive, slot, still_signed_in(request, settings))


async def runs_live(request: Request, console: Console, actor: str) -> Response:
    """``GET /ui/live``: a message whenever any run has a new event."""
    settings = console.settings
    try:
        slot = settings.streams.take(actor)
    except ApiError as exc:
        return refused(exc)
    changes = _changes(settings.streams.feed, settings.sse_idle)
    return _stream(changes, settings.sse_keepalive, slot, still_signed_in(request, settings))
