"""Endpoints that start and read runs: each a thin layer over `sdk.Client`."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from urllib.parse import quote

from starlette.responses import Response

from sdk._core._clock import instant
from sdk._core._serde import dumps
from sdk._core._types import RunOptions, RunStatus
from sdk._core._waiting import current
from sdk.client._jsonshapes import run_page_shape, shape, shapes, timeline_shape
from sdk.client._runpages import RunFilter, page_runs
from sdk.client._timeline import timeline
from sdk.errors import FlowNotFound, InvalidArgument
from sdk.http._problems import ApiError, ErrorCode
from sdk.http._routing import Call
from sdk.http._sse import event_stream, wants_stream
from sdk.model._flowdef import RESERVED_OPTIONS

__all__ = [
    "delete_run",
    "export_run",
    "get_run",
    "json_answer",
    "list_runs",
    "location",
    "run_checkpoints",
    "run_events",
    "run_timeline",
    "run_waits",
    "start_run",
]

#: Start options of the body that are passed to `Client.start` as they are.
_START_OPTIONS = ("run_id", "priority", "queue", "tenant_id", "concurrency_key", "start_in")
#: A W3C ``traceparent`` header (version 00): taken as the run's trace id when the
#: body gives none.
_TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")

#: Fields of the body's ``options`` (`RunOptions`).
_RUN_OPTIONS = ("thread_id", "trace_id", "environment", "policy_snapshot_id")


def _when(text: str, what: str) -> datetime:
    """An aware datetime from ISO 8601 text (``Z`` or an offset required), in the
    range of times Steadyflow stores (`instant`)."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgument(f"{what} is not an ISO 8601 date-time: {text[:60]!r}") from None
    if when.tzinfo is None:
        raise InvalidArgument(f"{what} needs a UTC offset (like 'Z' or '+02:00'): {text[:60]!r}")
    instant(when, what)
    return when


def location(run_id: str) -> dict[str, str]:
    """The ``Location`` header of a run's URL."""
    return {"Location": f"/v1/runs/{quote(run_id, safe='')}"}


def json_answer(data: Any, status: int, headers: dict[str, str] | None = None) -> Response:
    """A JSON answer with headers of its own (``Location``)."""
    return Response(dumps(data), status_code=status, media_type="application/json", headers=headers)


async def start_run(call: Call) -> Response:
    """``POST /v1/runs``: start a run of a registered flow.

    The JSON arguments are bound to the flow's signature and rebuilt into its
    annotated types (the same decoding a worker applies) before anything is
    written; `Client.start` then encodes them as any start does.
    """
    client, body = call.client, call.body
    name = body["flow"]
    fd = client.registry.find_flow(name)
    if fd is None:
        known = sorted(client.registry.flows())
        raise FlowNotFound(
            f"no flow named {name[:200]!r} is registered in this server "
            f"({len(known)} known{': ' + ', '.join(known[:20]) if known else ''}); "
            "start `steadyflow serve` with the module that defines it"
        )
    args, kwargs = body.get("args", []), body.get("kwargs", {})
    taken = sorted(RESERVED_OPTIONS & kwargs.keys())
    if taken:
        raise ApiError(
            ErrorCode.INVALID_ARGUMENT,
            f"body.kwargs: {', '.join(taken)} are start options, not flow arguments; give them "
            "at the top level of the body",
        )
    try:
        fd.signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise InvalidArgument(f"flow {name!r}: {exc}") from None
    values, named = fd.decode_args(dumps({"args": args, "kwargs": kwargs}), client.serializer)
    options: dict[str, Any] = {k: body[k] for k in _START_OPTIONS if k in body}
    if "start_at" in body:
        options["start_at"] = _when(body["start_at"], "body.start_at")
    given = dict(body.get("options", {}))
    traceparent = call.request.headers.get("traceparent", "")
    if "trace_id" not in given and _TRACEPARENT.fullmatch(traceparent):
        # the caller's W3C trace context: the run's spans continue its trace (sdk.otel)
        given["trace_id"] = traceparent
    if given:
        options["options"] = RunOptions(**{k: given[k] for k in _RUN_OPTIONS if k in given})
    handle = await client.start(name, *values, **options, actor=call.actor, **named)
    return json_answer(shape(await client.get(handle.run_id)), 201, location(handle.run_id))


async def list_runs(call: Call) -> dict[str, Any]:
    """``GET /v1/runs``: a page of runs, newest first."""
    p = call.params
    since = p.get("since")
    where = RunFilter(
        status=p.get("status"),
        flow=p.get("flow"),
        queue=p.get("queue"),
        tenant_id=p.get("tenant_id"),
        parent_run_id=p.get("parent_run_id"),
        since=None if since is None else _when(since, "query parameter 'since'"),
        waiting_on=p.get("waiting_on"),
    )
    page = await page_runs(call.client, where, limit=p.get("limit", 50), cursor=p.get("cursor"))
    return run_page_shape(page.runs, page.next_cursor)


async def get_run(call: Call) -> dict[str, Any]:
    """``GET /v1/runs/{run_id}``."""
    return shape(await call.client.get(call.params["run_id"]))


async def delete_run(call: Call) -> None:
    """``DELETE /v1/runs/{run_id}``: a finished run and all of its data."""
    await call.client.delete(call.params["run_id"], actor=call.actor)


async def run_events(call: Call) -> Any:
    """``GET /v1/runs/{run_id}/events``: a page of the log, or (``Accept:
    text/event-stream``) the log then each new event live."""
    run_id, p = call.params["run_id"], call.params
    if wants_stream(call.request):
        return await event_stream(call, run_id, p.get("cursor"))
    events = await call.client.events(run_id, cursor=p.get("cursor"), limit=p.get("limit", 100))
    last = events[-1].event_id if events else p.get("cursor")
    return {"events": shapes(events), "next_cursor": last}


async def run_checkpoints(call: Call) -> dict[str, Any]:
    """``GET /v1/runs/{run_id}/checkpoints``."""
    return {"checkpoints": shapes(await call.client.checkpoints(call.params["run_id"]))}


async def run_timeline(call: Call) -> dict[str, Any]:
    """``GET /v1/runs/{run_id}/timeline``: steps, waits, retries and children as a tree."""
    root = await timeline(call.client, call.params["run_id"], depth=call.params.get("depth", 1))
    return timeline_shape(root)


async def run_waits(call: Call) -> dict[str, Any]:
    """``GET /v1/runs/{run_id}/waits``: what the run is parked on now (`WaitingOn`
    entries: its `RunRecord.waiting_on`), and who may decide its human waits (those
    that name their approvers)."""
    client, run_id = call.client, call.params["run_id"]
    record = await client.get(run_id)
    parked = record.status in (RunStatus.WAITING_FOR_SIGNAL, RunStatus.WAITING_FOR_HUMAN)
    # a run parked by a version that kept no waiting_on: its journal says
    export = await client.export(run_id) if parked and not record.waiting_on else None
    waits = shapes(current(record, export))
    # only a run parked on a human wait has approvers: else no second read of the run
    human = record.status is RunStatus.WAITING_FOR_HUMAN
    approvers = await client.approvers(run_id) if human else {}
    return {"waits": waits, "approvers": {name: list(who) for name, who in approvers.items()}}


async def export_run(call: Call) -> dict[str, Any]:
    """``GET /v1/runs/{run_id}/export``: what `testing.replay` reads."""
    return await call.client.export(call.params["run_id"])
