"""The route table's records, and the one wrapper every endpoint runs in.

A `Route` declares everything about an endpoint: method, path, parameters,
request and answer schemas, the error codes it can answer with. The OpenAPI
document is generated from the same records (`sdk.http._openapi`), and the
wrapper (`endpoint`) checks each request against them before the handler
runs: authenticate, read the body (bounded), parse and check it, parse the
query, call the handler, map any error to a problem answer.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from sdk._core._checks import check_id
from sdk.client._client import Client
from sdk.http._auth import Authenticate, is_loopback
from sdk.http._problems import ApiError, ErrorCode, problem_of, problem_response
from sdk.http._schema import check, parse_json
from sdk.http._sessions import Sessions
from sdk.http._streams import Streams

__all__ = ["INSECURE_ACTOR", "Call", "Param", "Route", "Settings", "endpoint"]

log = logging.getLogger("steadyflow.http")

#: The actor of requests a server started with ``--insecure-local`` answers.
INSECURE_ACTOR = "local"

Handler = Callable[["Call"], Awaitable[Any]]


@attrs.frozen
class Param:
    """A path or query parameter (query parameters are optional unless `required`)."""

    name: str
    where: str  # "path" or "query"
    schema: dict[str, Any]
    description: str
    required: bool = False


@attrs.frozen
class Route:
    """One endpoint of the API.

    Attributes:
        method: HTTP method.
        path: Starlette path, ``{name}`` for path parameters.
        operation_id: the OpenAPI operationId (unique).
        summary: one line; `description` more.
        handler: ``async (Call) -> JSON data | Response``.
        status: the success status.
        response: JSON Schema of the success answer (None: no body).
        params: path and query parameters.
        body: JSON Schema of the request body (None: no body).
        body_required: False lets an empty body stand for ``{}``.
        errors: the error codes particular to this endpoint (the common ones,
            such as ``unauthenticated``, are added by the document).
        public: answered without authentication.
        streams: also answers ``Accept: text/event-stream``.
        tag: the OpenAPI tag grouping it.
    """

    method: str
    path: str
    operation_id: str
    summary: str
    handler: Handler
    tag: str
    status: int = 200
    response: dict[str, Any] | None = None
    params: tuple[Param, ...] = ()
    body: dict[str, Any] | None = None
    body_required: bool = True
    errors: tuple[ErrorCode, ...] = ()
    public: bool = False
    streams: bool = False
    description: str = ""


@attrs.frozen
class Settings:
    """What `create_app` was given, shared by every endpoint (and the console's
    sessions, which the console's cookie names)."""

    client: Client
    authenticate: Authenticate | None
    insecure_local: bool
    max_body: int
    sse_keepalive: float
    sse_idle: float
    sessions: Sessions
    streams: Streams


@attrs.frozen
class Call:
    """One request, checked: what a handler reads.

    Attributes:
        client: the `Client` the app serves.
        actor: who is calling (passed to every privileged client call).
        params: path and query parameters, parsed (absent optional ones left out).
        body: the request's JSON body (``{}`` when it has none).
        request: the Starlette request, for headers.
        settings: the app's settings.
    """

    client: Client
    actor: str
    params: dict[str, Any]
    body: Any
    request: Request
    settings: Settings


async def authenticate(request: Request, settings: Settings) -> str:
    """The caller's actor name; `ApiError` 401 (or 403 off loopback) when none."""
    if settings.authenticate is not None:
        got = settings.authenticate(request)
        actor = await got if inspect.isawaitable(got) else got
        if actor is not None:
            return check_id(actor, "the actor authenticate() returned")
    if settings.insecure_local:
        host = request.client.host if request.client else None
        if is_loopback(host):
            return INSECURE_ACTOR
        raise ApiError(
            ErrorCode.FORBIDDEN,
            f"this server runs with --insecure-local: it answers loopback clients only, "
            f"not {host!r}",
        )
    # a trail of refused callers for the operator (never the credentials they sent)
    host = request.client.host if request.client else None
    log.info("unauthenticated request %s %s from %s", request.method, request.url.path, host)
    raise ApiError(
        ErrorCode.UNAUTHENTICATED,
        "no valid credentials: send 'Authorization: Bearer TOKEN' with a token the server "
        "knows ($STEADYFLOW_API_TOKENS or --tokens-file)",
        headers={"WWW-Authenticate": 'Bearer realm="steadyflow"'},
    )


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused (413) as soon as it is longer than `limit` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(size, limit, at_least=True)
            chunks.append(chunk)
    except ClientDisconnect:  # no one to answer; not a bug of the server to log as one
        raise ApiError(
            ErrorCode.INVALID_JSON,
            f"the request body was cut off after {size:,} bytes: the client went away (or "
            "took longer than the server's read timeout)",
        ) from None
    return b"".join(chunks)


def _too_large(size: int, limit: int, *, at_least: bool = False) -> ApiError:
    return ApiError(
        ErrorCode.PAYLOAD_TOO_LARGE,
        f"the request body is {'at least ' if at_least else ''}{size:,} bytes, over the "
        f"limit of {limit:,} bytes (create_app(max_body=...)); keep large data elsewhere "
        "and pass a reference to it",
    )


def _param(raw: str, param: Param) -> Any:
    schema = param.schema
    value: Any = raw
    if schema.get("type") == "integer":
        try:
            value = int(raw)
        except ValueError:
            raise ApiError(
                ErrorCode.INVALID_ARGUMENT,
                f"query parameter {param.name!r} must be an integer, got {raw[:60]!r}",
            ) from None
    elif schema.get("type") == "boolean":
        if raw.lower() not in ("true", "false", "1", "0"):
            raise ApiError(
                ErrorCode.INVALID_ARGUMENT,
                f"query parameter {param.name!r} must be true or false, got {raw[:60]!r}",
            )
        value = raw.lower() in ("true", "1")
    check(value, schema, f"{param.where} parameter {param.name!r}")
    return value


def endpoint(route: Route, settings: Settings) -> Callable[[Request], Awaitable[Response]]:
    """The Starlette endpoint of `route`."""

    async def answer(request: Request) -> Response:
        run_id = request.path_params.get("run_id")
        try:
            actor = INSECURE_ACTOR if route.public else await authenticate(request, settings)
            params: dict[str, Any] = {}
            for p in route.params:
                source = request.path_params if p.where == "path" else request.query_params
                if p.name in source:
                    params[p.name] = _param(str(source[p.name]), p)
                elif p.required:
                    raise ApiError(
                        ErrorCode.INVALID_ARGUMENT, f"query parameter {p.name!r} is required"
                    )
            body: Any = None
            if route.body is not None:
                raw = await read_body(request, settings.max_body)
                body = parse_json(raw) if raw.strip() or route.body_required else {}
                check(body, route.body, "body")
            call = Call(settings.client, actor, params, body, request, settings)
            result = await route.handler(call)
            if isinstance(result, Response):
                return result
            if route.response is None:
                return Response(status_code=route.status)
            text = json.dumps(result, ensure_ascii=False, separators=(",", ":"))
        except Exception as exc:
            unavailable = settings.client.store.is_unavailable(exc)
            return problem_response(problem_of(exc, run_id, unavailable=unavailable))
        return Response(text, status_code=route.status, media_type="application/json")

    answer.__name__ = route.operation_id
    return answer
