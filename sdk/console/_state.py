"""The console's shared state and the guard every page runs behind."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from sdk.client._client import Client
from sdk.console._auth import BACKGROUND, CsrfKey, actor_of, signin_url
from sdk.http._problems import STATUS, ApiError
from sdk.http._routing import Settings

__all__ = ["Console", "Page", "guarded", "refused"]

#: ``page(request, console, actor) -> Response``: a handler behind the guard.
Page = Callable[[Request, "Console", str], Awaitable[Response]]


@attrs.define
class Console:
    """What the console's handlers share: the API's settings, the CSRF key, a small cache.

    Attributes:
        settings: the API's (`create_app`) settings: client, authentication, sessions.
        csrf_key: the key of the forms' CSRF tokens.
        counts_ttl: seconds the status counts of the runs list are reused.
    """

    settings: Settings
    csrf_key: CsrfKey = attrs.field(factory=CsrfKey)
    counts_ttl: float = 5.0
    _cache: dict[Any, tuple[float, Any]] = attrs.field(factory=dict)

    @property
    def client(self) -> Client:
        """The client every read and action goes through."""
        return self.settings.client

    def cached(self, key: Any) -> Any:
        """A value `remember` kept under `key` less than `counts_ttl` ago, else None."""
        hit = self._cache.get(key)
        return hit[1] if hit is not None and time.monotonic() - hit[0] < self.counts_ttl else None

    def remember(self, key: Any, value: Any) -> None:
        """Keep `value` for `counts_ttl` seconds (a bounded cache)."""
        if len(self._cache) > 256:
            self._cache.clear()
        self._cache[key] = (time.monotonic(), value)


def guarded(console: Console, handler: Page) -> Callable[[Request], Awaitable[Response]]:
    """`handler` for signed-in callers; anyone else is sent to the sign-in page (an
    event stream or a post is answered 401)."""

    async def answer(request: Request) -> Response:
        stream = "text/event-stream" in request.headers.get("accept", "")
        # what the page's script asks by itself (refreshes, streams) is not the person's use
        touch = not stream and BACKGROUND not in request.headers
        actor = await actor_of(request, console.settings, touch=touch)
        if actor is None:
            if request.method == "GET" and not stream:
                return RedirectResponse(signin_url(request), status_code=303)
            return Response("sign in first (/ui/signin)", status_code=401)
        try:
            return await handler(request, console, actor)
        except ApiError as exc:  # a form over max_body
            return refused(exc)

    answer.__name__ = handler.__name__
    return answer


def refused(error: ApiError) -> Response:
    """The answer to a request the HTTP layer refused (a body over ``max_body``: 413,
    a live stream over the limits: 429), as text with the error's status and
    headers (``Retry-After``): a console page, not the API's problem JSON."""
    return Response(
        error.detail,
        status_code=STATUS[error.code][0],
        media_type="text/plain",
        headers=error.headers,
    )
