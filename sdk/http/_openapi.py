"""The OpenAPI 3.1 document, generated from the route table (`sdk.http._routes`).

Each route's parameters, request and answer schemas and error codes become
its operation; the records it answers with come from `sdk.http._shapes`, and
run statuses, reason codes, event types, checkpoint kinds and error codes
are enums. Errors are ``application/problem+json`` answers whose ``code`` is
narrowed, per status, to the codes that endpoint can give.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sdk import __version__
from sdk.http._problems import PROBLEM_TYPE, STATUS, ErrorCode
from sdk.http._routing import Route
from sdk.http._shapes import components, ref

__all__ = ["common_errors", "document"]

_TAGS = {
    "runs": "Start and read runs.",
    "steering": "Signal, decide, cancel, resume, replay, fork; send events.",
    "operations": "Queues, workers, schedules.",
    "health": "Liveness and readiness probes.",
    "meta": "This document.",
}

_PROBLEM = {
    "type": "object",
    "description": "An error (RFC 9457); branch on `code`.",
    "properties": {
        "type": {"type": "string", "format": "uri"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string", "description": "What is wrong, naming the thing at fault."},
        "code": ref("ErrorCode"),
        "run_id": {"type": "string", "description": "The run the request names, if any."},
    },
    "required": ["type", "title", "status", "detail", "code"],
}


def common_errors(route: Route) -> tuple[ErrorCode, ...]:
    """The error codes every route of its kind can answer with."""
    # forbidden: a host name the server does not answer to, a change from another site,
    # the authorizer's refusal
    codes = [ErrorCode.INTERNAL_ERROR, ErrorCode.FORBIDDEN]
    if not route.public:
        codes += [ErrorCode.UNAUTHENTICATED, ErrorCode.STORE_UNAVAILABLE]
    if route.params or route.body is not None:
        codes.append(ErrorCode.INVALID_ARGUMENT)
    if route.body is not None:
        codes += [
            ErrorCode.INVALID_JSON,
            ErrorCode.PAYLOAD_TOO_LARGE,
            ErrorCode.UNSUPPORTED_MEDIA_TYPE,
        ]
    return tuple(codes)


def _errors(codes: Iterable[ErrorCode]) -> dict[str, Any]:
    by_status: dict[int, list[ErrorCode]] = {}
    for code in sorted(set(codes), key=lambda c: (STATUS[c][0], c.value)):
        by_status.setdefault(STATUS[code][0], []).append(code)
    out = {}
    for status, group in sorted(by_status.items()):
        schema = {
            "allOf": [
                ref("Problem"),
                {"properties": {"code": {"type": "string", "enum": [c.value for c in group]}}},
            ]
        }
        out[str(status)] = {
            "description": "; ".join(f"{c.value}: {STATUS[c][1]}" for c in group),
            "content": {PROBLEM_TYPE: {"schema": schema}},
        }
    return out


def _operation(route: Route) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": route.operation_id,
        "summary": route.summary,
        "tags": [route.tag],
    }
    if route.description:
        op["description"] = route.description
    if route.params:
        op["parameters"] = [
            {
                "name": p.name,
                "in": p.where,
                "required": p.required or p.where == "path",
                "description": p.description,
                "schema": p.schema,
            }
            for p in route.params
        ]
    if route.body is not None:
        op["requestBody"] = {
            "required": route.body_required,
            "content": {"application/json": {"schema": route.body}},
        }
    ok: dict[str, Any] = {"description": route.summary}
    if route.response is not None:
        ok["content"] = {"application/json": {"schema": route.response}}
        if route.streams:
            ok["content"]["text/event-stream"] = {
                "schema": {"type": "string", "description": "Server-Sent Events: each an Event"}
            }
    op["responses"] = {str(route.status): ok, **_errors((*common_errors(route), *route.errors))}
    if route.public:
        op["security"] = []
    return op


def document(routes: Iterable[Route]) -> dict[str, Any]:
    """The OpenAPI document of `routes`."""
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Steadyflow runtime API",
            "version": __version__,
            "description": "Start, read and steer durable runs (docs/http.md). Every endpoint "
            "but /healthz needs 'Authorization: Bearer TOKEN'; errors are "
            "application/problem+json with a stable `code`.",
        },
        "tags": [{"name": k, "description": v} for k, v in _TAGS.items()],
        "paths": paths,
        "components": {
            "schemas": {**components(), "Problem": _PROBLEM},
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearerAuth": []}],
    }
