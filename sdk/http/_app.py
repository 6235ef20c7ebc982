"""`create_app`: the ASGI application of the HTTP runtime API."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.routing import Route as StarletteRoute

from sdk._core._checks import check_seconds
from sdk.client._client import Client
from sdk.errors import InvalidArgument
from sdk.http._auth import TOKENS_VARIABLE, Authenticate, BearerTokens
from sdk.http._guard import Guard, HostNames
from sdk.http._problems import ApiError, ErrorCode, problem_of, problem_response
from sdk.http._routes import routes
from sdk.http._routing import Settings, endpoint
from sdk.http._sessions import DEFAULT_SESSION_IDLE, DEFAULT_SESSION_LIFETIME, Sessions
from sdk.http._streams import DEFAULT_MAX_STREAMS, DEFAULT_MAX_STREAMS_PER_ACTOR, Streams

__all__ = ["DEFAULT_MAX_BODY", "create_app"]

#: Default bound of a request body, in bytes.
DEFAULT_MAX_BODY = 1_048_576


def _not_routed(settings: Settings) -> Callable[[Request, Exception], Awaitable[Response]]:
    """The handler of paths and methods no route serves: 401 (or 403) to a caller who is
    not signed in, so only they learn what exists; else 404 or 405, as problems."""

    async def handler(request: Request, exc: Exception) -> Response:
        from sdk.console._auth import signed_in  # an API credential, or the console's cookie

        try:
            await signed_in(request, settings)
        except Exception as refused:
            return problem_response(problem_of(refused))
        return _unknown(request, exc)

    return handler


def _unknown(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status == 405:
        code, what = ErrorCode.METHOD_NOT_ALLOWED, f"{request.method} is not allowed on"
    else:
        code, what = ErrorCode.NOT_FOUND, "no endpoint serves"
    return problem_response(
        ApiError(code, f"{what} {request.url.path} (the endpoints: GET /openapi.json)")
    )


def create_app(
    client: Client,
    *,
    authenticate: Authenticate | None = None,
    insecure_local: bool = False,
    allowed_hosts: Iterable[str] | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    sse_keepalive: float = 15.0,
    sse_idle: float = 5.0,
    session_idle: float = DEFAULT_SESSION_IDLE,
    session_lifetime: float = DEFAULT_SESSION_LIFETIME,
    max_streams: int = DEFAULT_MAX_STREAMS,
    max_streams_per_actor: int = DEFAULT_MAX_STREAMS_PER_ACTOR,
) -> Starlette:
    """The HTTP runtime API over `client`, as an ASGI app (Starlette).

    Every endpoint but ``GET /healthz`` needs authentication; the actor it
    gives is passed to the client's calls, so the client's `Authorizer`
    decides each action (and audits refusals).

    Args:
        client: the `Client` every endpoint calls; its registry is where
            ``POST /v1/runs`` finds flows by name (import your flow modules).
        authenticate: ``authenticate(request) -> actor | None`` (plain or async);
            None: bearer tokens from ``$STEADYFLOW_API_TOKENS`` (`BearerTokens`).
        insecure_local: answer requests without credentials as actor
            ``"local"``, from loopback addresses only (`steadyflow serve
            --insecure-local`). For a developer's machine, never a server.
        allowed_hosts: host names the app answers to, besides addresses and
            ``localhost`` (`HostNames`; ``.example.com`` allows the names under
            it); a request for another ``Host`` is answered 403. None: any host,
            or with `insecure_local` only those (DNS rebinding would otherwise
            give any web page the server's access).
        max_body: largest request body, in bytes (a longer one is answered 413).
        sse_keepalive: seconds between keep-alive comments of a quiet event stream.
        sse_idle: seconds an event stream blocks on the live feed before it checks
            that its run still exists.
        session_idle: seconds a console session (a sign-in through the console's
            form) lasts without use (30 minutes).
        session_lifetime: seconds a console session lasts at most, however
            busy (12 hours). Sessions live in this app's memory: a restart signs
            everyone out (docs/security.md#console-sessions).
        max_streams: live streams (the API's event streams and the console's live
            pages) the app holds open at once; one more is answered 429
            ``too_many_streams`` with ``Retry-After``. Every stream shares one
            subscription to the store's live feed.
        max_streams_per_actor: live streams one actor (a token, a console user)
            holds open at once; one more is answered 429 likewise.

    Raises:
        InvalidArgument: no way to authenticate was given (no `authenticate`,
            no ``$STEADYFLOW_API_TOKENS``, not `insecure_local`), or a bad bound;
            or the tokens carry roles (`BearerTokens.roles`) and the client has no
            authorizer (pass ``Client(store, tokens.authorizer())``).

    Example::

        from starlette.applications import Starlette
        from starlette.routing import Mount

        api = create_app(client, authenticate=BearerTokens.from_file("/etc/sf/tokens"))
        app = Starlette(routes=[Mount("/steadyflow", app=api)])
    """
    if authenticate is None:
        authenticate = BearerTokens.from_env()
    if authenticate is None and not insecure_local:
        raise InvalidArgument(
            "create_app(): nothing to authenticate requests with: pass authenticate=... "
            f"(e.g. BearerTokens.from_file(path)), set ${TOKENS_VARIABLE}='token=actor,...', "
            "or (on a developer's machine) insecure_local=True"
        )
    if isinstance(authenticate, BearerTokens) and authenticate.roles and client.authorizer is None:
        # the roles would be ignored: every token could do everything
        raise InvalidArgument(
            "create_app(): the bearer tokens carry roles, but the client has no authorizer "
            "to grant them: create the client with Client(store, tokens.authorizer())"
        )
    if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 1:
        raise InvalidArgument(f"create_app(): max_body must be a positive int, got {max_body!r}")
    check_seconds(sse_keepalive, "create_app(): sse_keepalive", positive=True)
    check_seconds(sse_idle, "create_app(): sse_idle", positive=True)
    if isinstance(allowed_hosts, str):
        raise InvalidArgument(
            f"create_app(): allowed_hosts must be a list of names, got the string {allowed_hosts!r}"
        )
    hosts = HostNames(allowed_hosts or ()) if allowed_hosts is not None or insecure_local else None
    sessions = Sessions(session_idle, session_lifetime, client.clock)
    streams = Streams(client.store, max_streams, max_streams_per_actor)
    settings = Settings(
        client,
        authenticate,
        insecure_local,
        max_body,
        sse_keepalive,
        sse_idle,
        sessions,
        streams,
    )
    # A run id may hold "/" (sent as is or as %2F: the server decodes it), so
    # it matches as a Starlette "path"; the routes that end at the run id come
    # last, so "/v1/runs/a/b/events" is the events of "a/b", not the run "a/b/events".
    ordered = sorted(routes(), key=lambda r: r.path.endswith("{run_id}"))
    table: list[BaseRoute] = [
        StarletteRoute(
            r.path.replace("{run_id}", "{run_id:path}"),
            endpoint(r, settings),
            methods=[r.method],
            name=r.operation_id,
        )
        for r in ordered
    ]
    from sdk.console import console_routes  # the web console under /ui/ (docs/console.md)

    table.extend(console_routes(settings))
    app = Starlette(
        routes=table,
        middleware=[Middleware(Guard, hosts=hosts)],  # sdk.http._guard says what it checks
        exception_handlers={HTTPException: _not_routed(settings)},
    )
    app.state.steadyflow = settings  # for routes mounted later (the console)
    return app
