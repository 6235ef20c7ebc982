"""Errors as ``application/problem+json`` (RFC 9457), and the one map from
`sdk.errors` to HTTP statuses and stable error codes.

Every error response has ``type``, ``title``, ``status``, ``detail``, a
stable ``code`` (an `ErrorCode`) and, when the request names a run, its
``run_id``. Clients branch on ``code``; ``detail`` is for people.
"""

from __future__ import annotations

import enum
import json
import logging
from typing import Any

from starlette.responses import Response

from sdk.errors import (
    CorruptIndex,
    CorruptRecord,
    FlowNotFound,
    Forbidden,
    IdempotencyConflict,
    InvalidArgument,
    InvalidTransition,
    LeaseLost,
    MailboxFull,
    NotWaiting,
    PayloadTooLarge,
    QueueFull,
    RunNotFound,
    ScheduleNotFound,
    SerializationError,
    SteadyflowError,
)

__all__ = ["PROBLEM_TYPE", "ApiError", "ErrorCode", "problem_of", "problem_response"]

log = logging.getLogger("steadyflow.http")

PROBLEM_TYPE = "application/problem+json"
#: The ``type`` URI of a code is this and the code: a stable identifier, not a
#: page to fetch (RFC 9457 allows that); docs/http.md#errors describes each.
TYPE_BASE = "urn:steadyflow:problem:"


class ErrorCode(enum.StrEnum):
    """The stable ``code`` of an error response; equal to its string value."""

    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    RUN_NOT_FOUND = "run_not_found"
    FLOW_NOT_FOUND = "flow_not_found"
    SCHEDULE_NOT_FOUND = "schedule_not_found"
    INVALID_JSON = "invalid_json"
    INVALID_ARGUMENT = "invalid_argument"
    SERIALIZATION_ERROR = "serialization_error"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    INVALID_TRANSITION = "invalid_transition"
    NOT_WAITING = "not_waiting"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    QUEUE_FULL = "queue_full"
    TOO_MANY_STREAMS = "too_many_streams"
    MAILBOX_FULL = "mailbox_full"
    LEASE_LOST = "lease_lost"
    CORRUPT_RECORD = "corrupt_record"
    CORRUPT_INDEX = "corrupt_index"
    STORE_UNAVAILABLE = "store_unavailable"
    INTERNAL_ERROR = "internal_error"

    def __str__(self) -> str:
        return self.value


#: status and title of each code.
STATUS: dict[ErrorCode, tuple[int, str]] = {
    ErrorCode.UNAUTHENTICATED: (401, "Authentication required"),
    ErrorCode.FORBIDDEN: (403, "Forbidden"),
    ErrorCode.NOT_FOUND: (404, "No such endpoint"),
    ErrorCode.METHOD_NOT_ALLOWED: (405, "Method not allowed"),
    ErrorCode.RUN_NOT_FOUND: (404, "Run not found"),
    ErrorCode.FLOW_NOT_FOUND: (404, "Flow not found"),
    ErrorCode.SCHEDULE_NOT_FOUND: (404, "Schedule not found"),
    ErrorCode.INVALID_JSON: (400, "Request body is not valid JSON"),
    ErrorCode.INVALID_ARGUMENT: (422, "Invalid argument"),
    ErrorCode.SERIALIZATION_ERROR: (422, "Value cannot be stored"),
    ErrorCode.PAYLOAD_TOO_LARGE: (413, "Payload too large"),
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: (415, "Request body is not JSON"),
    ErrorCode.INVALID_TRANSITION: (409, "Invalid lifecycle transition"),
    ErrorCode.NOT_WAITING: (409, "Run is not waiting for that"),
    ErrorCode.IDEMPOTENCY_CONFLICT: (409, "Idempotency conflict"),
    ErrorCode.QUEUE_FULL: (429, "Queue full"),
    ErrorCode.TOO_MANY_STREAMS: (429, "Too many live streams"),
    ErrorCode.MAILBOX_FULL: (429, "Run holds its bound of pending messages"),
    ErrorCode.LEASE_LOST: (409, "Lease lost"),
    ErrorCode.CORRUPT_RECORD: (500, "Stored data is damaged"),
    ErrorCode.CORRUPT_INDEX: (500, "A stored index is damaged"),
    ErrorCode.STORE_UNAVAILABLE: (503, "Store unavailable"),
    ErrorCode.INTERNAL_ERROR: (500, "Internal error"),
}

# Most specific first: the first class an exception is an instance of wins.
_EXCEPTIONS: tuple[tuple[type[SteadyflowError], ErrorCode], ...] = (
    (RunNotFound, ErrorCode.RUN_NOT_FOUND),
    (FlowNotFound, ErrorCode.FLOW_NOT_FOUND),
    (ScheduleNotFound, ErrorCode.SCHEDULE_NOT_FOUND),
    (Forbidden, ErrorCode.FORBIDDEN),
    (InvalidTransition, ErrorCode.INVALID_TRANSITION),
    (NotWaiting, ErrorCode.NOT_WAITING),
    (IdempotencyConflict, ErrorCode.IDEMPOTENCY_CONFLICT),
    (QueueFull, ErrorCode.QUEUE_FULL),
    (MailboxFull, ErrorCode.MAILBOX_FULL),
    (LeaseLost, ErrorCode.LEASE_LOST),
    (CorruptRecord, ErrorCode.CORRUPT_RECORD),
    (CorruptIndex, ErrorCode.CORRUPT_INDEX),
    (InvalidArgument, ErrorCode.INVALID_ARGUMENT),
    (PayloadTooLarge, ErrorCode.PAYLOAD_TOO_LARGE),
    (SerializationError, ErrorCode.SERIALIZATION_ERROR),
)


class ApiError(Exception):
    """An error answer decided by the HTTP layer itself (bad JSON, no credentials...).

    Attributes:
        code: its `ErrorCode` (which gives the status).
        detail: what is wrong, naming the thing at fault.
        run_id: the run the request names, if any.
        headers: extra response headers (``WWW-Authenticate``, ``Retry-After``).
    """

    def __init__(
        self,
        code: ErrorCode,
        detail: str,
        *,
        run_id: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.run_id = run_id
        self.headers = headers or {}


def problem_of(
    exc: BaseException, run_id: str | None = None, *, unavailable: bool = False
) -> ApiError:
    """The error answer for an exception an endpoint raised.

    `run_id` is the run the request names (used when the exception carries
    none); `unavailable` says the store could not be reached (503).
    """
    if isinstance(exc, ApiError):
        return exc
    rid = getattr(exc, "run_id", None)
    rid = rid if isinstance(rid, str) else run_id
    for cls, code in _EXCEPTIONS:
        if isinstance(exc, cls):
            headers = {"Retry-After": "1"} if code is ErrorCode.QUEUE_FULL else None
            return ApiError(code, str(exc), run_id=rid, headers=headers)
    # checked after the SDK's errors: Forbidden is a PermissionError, an OSError
    if unavailable:
        return ApiError(
            ErrorCode.STORE_UNAVAILABLE,
            f"the store cannot be reached: {type(exc).__name__}: {exc}",
            run_id=run_id,
            headers={"Retry-After": "1"},
        )
    # a bug or an error of the store: logged with its traceback, not shown to the caller
    log.error("internal error answering a request", exc_info=exc)
    return ApiError(
        ErrorCode.INTERNAL_ERROR,
        f"internal error ({type(exc).__name__}); the server log has the traceback",
        run_id=run_id,
    )


def problem_body(error: ApiError) -> dict[str, Any]:
    """The JSON body of an error answer."""
    status, title = STATUS[error.code]
    body: dict[str, Any] = {
        "type": TYPE_BASE + error.code.value,
        "title": title,
        "status": status,
        "detail": error.detail,
        "code": error.code.value,
    }
    if error.run_id is not None:
        body["run_id"] = error.run_id
    return body


def problem_response(error: ApiError) -> Response:
    """The ``application/problem+json`` response of an error."""
    status, _ = STATUS[error.code]
    text = json.dumps(problem_body(error), ensure_ascii=False)
    return Response(text, status_code=status, media_type=PROBLEM_TYPE, headers=error.headers)
