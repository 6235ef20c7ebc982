"""A run's events as Server-Sent Events: the log from a cursor, then live.

`sdk.client._follow.follow_run` does the reading (subscribe to the live feed, read
the log, block on the feed for news: no polling loop); this module frames
its events for the wire. A reader task feeds a small queue, so the stream
can send a keep-alive comment while the run is quiet (proxies close idle
connections) and a slow client holds the reader back instead of growing a
buffer. The stream ends (``event: end``) when the run has ended and its log
is delivered, or when it is deleted. ``Last-Event-ID`` (sent by a
reconnecting ``EventSource``) takes the place of the ``cursor`` parameter.
Streams wait on the app's one shared feed and count against its stream limits
(`sdk.http._streams`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import StreamingResponse

from sdk._core._serde import dumps
from sdk._core._types import Event
from sdk.client._follow import END, follow_run, read_ahead
from sdk.client._jsonshapes import shape
from sdk.http._problems import problem_body, problem_of
from sdk.http._streams import EVENT_STREAM, stream_answer

if TYPE_CHECKING:
    from sdk.http._routing import Call

__all__ = ["event_stream", "wants_stream"]


def wants_stream(request: Request) -> bool:
    """Whether the request asks for a live stream (its ``Accept`` names SSE)."""
    return EVENT_STREAM in request.headers.get("accept", "")


def frame(event: Event) -> str:
    """One event as an SSE message: ``id`` (the cursor), ``event`` (its type), ``data``."""
    return f"id: {event.event_id}\nevent: {event.type}\ndata: {dumps(shape(event))}\n\n"


async def event_stream(call: Call, run_id: str, cursor: str | None) -> StreamingResponse:
    """The streaming answer; before the stream starts, `RunNotFound` (404), a bad
    cursor (422), or a stream over the limits (429)."""
    client, streams = call.client, call.settings.streams
    cursor = call.request.headers.get("last-event-id") or cursor
    slot = streams.take(call.actor)  # given back when the answer ends (stream_answer)
    try:
        async with streams.feed.reading():  # streams' reads share a few connections
            await client.get(run_id)
            if cursor is not None:  # a bad cursor: 422, not a stream
                await client.events(run_id, cursor=cursor, limit=1)
    except BaseException:
        slot.release()
        raise
    keepalive, idle = call.settings.sse_keepalive, call.settings.sse_idle
    unavailable = client.store.is_unavailable

    async def messages() -> AsyncIterator[str]:
        source = follow_run(client, run_id, cursor=cursor, idle=idle, feed=streams.feed)
        async with read_ahead(source) as queue:
            yield ": following run events\nretry: 2000\n\n"
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), keepalive)
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                if item is END:
                    yield "event: end\ndata: {}\n\n"
                    return
                if isinstance(item, Exception):
                    problem = problem_of(item, run_id, unavailable=unavailable(item))
                    yield f"event: error\ndata: {dumps(problem_body(problem))}\n\n"
                    return
                yield frame(item)

    return stream_answer(messages(), slot)
