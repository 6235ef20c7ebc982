"""The HTTP runtime API: start, read and steer runs over HTTP (docs/http.md).

An ASGI application (Starlette) over a `sdk.Client`::

    from sdk import Client
    from sdk.http import BearerTokens, create_app
    from stores import open_store

    app = create_app(Client(open_store()), authenticate=BearerTokens.from_env())

served by ``steadyflow serve`` (uvicorn), or mounted in your own ASGI app.
Needs the ``steadyflow[http]`` extra; ``import sdk`` does not import it.
"""

from sdk.http._app import DEFAULT_MAX_BODY, create_app
from sdk.http._auth import TOKENS_VARIABLE, Authenticate, BearerTokens
from sdk.http._problems import ErrorCode
from sdk.http._sessions import DEFAULT_SESSION_IDLE, DEFAULT_SESSION_LIFETIME
from sdk.http._streams import DEFAULT_MAX_STREAMS, DEFAULT_MAX_STREAMS_PER_ACTOR

__all__ = [
    "DEFAULT_MAX_BODY",
    "DEFAULT_MAX_STREAMS",
    "DEFAULT_MAX_STREAMS_PER_ACTOR",
    "DEFAULT_SESSION_IDLE",
    "DEFAULT_SESSION_LIFETIME",
    "TOKENS_VARIABLE",
    "Authenticate",
    "BearerTokens",
    "ErrorCode",
    "create_app",
]
