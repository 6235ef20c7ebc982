"""The live streams a server holds open: their limits, and the feed they share.

Every open stream (the API's ``GET /v1/runs/{run_id}/events`` as Server-Sent
Events, the console's ``/ui/runs/{run_id}/live`` and ``/ui/live``) holds a
connection, a task and its share of reads for as long as the client stays.
`Streams` bounds how many: `max_streams` in all, `max_streams_per_actor` for one
caller (one token, one console user); a stream over either bound is answered
``429 too_many_streams`` with ``Retry-After``, before it starts. Its streams
wait on one `SharedFeed`: one Redis subscription for the server, however many
streams are open (docs/http.md#limits).

A stream's slot is taken when its answer is made and given back when the answer
ends, however it ends (the run ended, the client left, the server stops):
`stream_answer` releases it when the response's ``__call__`` returns, which a
body that never started (the client left at once) would not do by itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from sdk.client._feed import SharedFeed
from sdk.errors import InvalidArgument
from sdk.http._problems import ApiError, ErrorCode

if TYPE_CHECKING:
    from sdk.store import Store

__all__ = [
    "DEFAULT_MAX_STREAMS",
    "DEFAULT_MAX_STREAMS_PER_ACTOR",
    "RETRY_AFTER",
    "Slot",
    "Streams",
    "stream_answer",
]

#: Streams a server (one app) holds open at once, by default.
DEFAULT_MAX_STREAMS = 1_000
#: Streams one actor (a token, a console user) holds open at once, by default.
DEFAULT_MAX_STREAMS_PER_ACTOR = 100
#: The ``Retry-After`` (seconds) of a stream refused for a limit.
RETRY_AFTER = 10

EVENT_STREAM = "text/event-stream"


def check_limit(value: object, what: str) -> int:
    """`value` if it is a positive int; `InvalidArgument` naming `what` if not."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgument(f"create_app(): {what} must be a positive int, got {value!r}")
    return value


class Slot:
    """One open stream's place in the limits; `release` gives it back (once)."""

    __slots__ = ("_actor", "_streams")

    def __init__(self, streams: Streams, actor: str) -> None:
        self._streams: Streams | None = streams
        self._actor = actor

    def release(self) -> None:
        streams, self._streams = self._streams, None
        if streams is not None:
            streams._give_back(self._actor)


class Streams:
    """The live streams of one app (one server process): how many are open, for
    whom, and the feed they wait on (see the module docstring)."""

    def __init__(self, store: Store, max_streams: int, max_per_actor: int) -> None:
        self.max_streams = check_limit(max_streams, "max_streams")
        self.max_per_actor = check_limit(max_per_actor, "max_streams_per_actor")
        self.feed = SharedFeed(store)
        self._open = 0
        self._by_actor: dict[str, int] = {}

    @property
    def open(self) -> int:
        """Streams open now."""
        return self._open

    def open_for(self, actor: str) -> int:
        """Streams `actor` holds open now."""
        return self._by_actor.get(actor, 0)

    def take(self, actor: str) -> Slot:
        """A slot for one more stream of `actor`; `ApiError` 429 ``too_many_streams``
        (with ``Retry-After``) when the server or the actor holds its limit."""
        mine = self._by_actor.get(actor, 0)
        if mine >= self.max_per_actor:
            raise _refused(
                f"{actor!r} holds {mine:,} live streams open, the most one caller may "
                f"(max_streams_per_actor, --max-streams-per-actor): close one first"
            )
        if self._open >= self.max_streams:
            raise _refused(
                f"the server holds {self._open:,} live streams open, the most it serves "
                "(max_streams, --max-streams): try again later"
            )
        self._open += 1
        self._by_actor[actor] = mine + 1
        return Slot(self, actor)

    def _give_back(self, actor: str) -> None:
        self._open -= 1
        left = self._by_actor[actor] - 1
        if left:
            self._by_actor[actor] = left
        else:
            del self._by_actor[actor]


def _refused(detail: str) -> ApiError:
    return ApiError(ErrorCode.TOO_MANY_STREAMS, detail, headers={"Retry-After": str(RETRY_AFTER)})


class _HeldStream(StreamingResponse):
    """A streaming answer that gives its slot back when it ends, however it ends."""

    def __init__(self, body: AsyncIterator[str], slot: Slot) -> None:
        super().__init__(
            body,
            media_type=EVENT_STREAM,
            # no caching, and no buffering by proxies such as nginx
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
        self._slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._slot.release()


def stream_answer(body: AsyncIterator[str], slot: Slot) -> StreamingResponse:
    """The ``text/event-stream`` answer of `body`, holding `slot` while it is sent."""
    return _HeldStream(body, slot)
