"""The route table: every endpoint of the API, declared once.

The app is built from it (`sdk.http._app`), requests are checked against it
(`sdk.http._routing`), and the OpenAPI document is generated from it
(`sdk.http._openapi`). To add an endpoint: write its handler, add its
`Route` here; the document and the checks follow.
"""

from __future__ import annotations

from typing import Any

from sdk._core._checks import MAX_ID, MAX_TEXT, PRIORITY_RANGE
from sdk._core._types import RunStatus, WaitKind
from sdk.client._treecopy import CHILDREN
from sdk.http import _actions as act
from sdk.http import _runs as runs
from sdk.http._problems import ErrorCode as E
from sdk.http._routing import Call, Param, Route
from sdk.http._shapes import ref

__all__ = ["routes"]

_ID = {"type": "string", "minLength": 1, "maxLength": MAX_ID}
_TEXT = {"type": "string", "minLength": 1, "maxLength": MAX_TEXT}
_ANY = {"description": "any JSON value"}
_RUN_ID = Param("run_id", "path", _ID, "The run's id (it may hold '/').", required=True)
_NAME = Param("name", "path", _ID, "The signal's or wait's name.", required=True)
_SCHEDULE_ID = Param("schedule_id", "path", _ID, "The schedule's id.", required=True)
_RUN = ref("RunRecord")


def _obj(props: dict[str, Any], *required: str, description: str = "") -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    if description:
        schema["description"] = description
    return schema


def _list_of(key: str, item: dict[str, Any]) -> dict[str, Any]:
    return _obj({key: {"type": "array", "items": item}}, key)


_OPTION_FIELDS = ("thread_id", "trace_id", "environment", "policy_snapshot_id")
_PRIORITY = {"type": "integer", "minimum": PRIORITY_RANGE[0], "maximum": PRIORITY_RANGE[-1]}
START_BODY = _obj(
    {
        "flow": {**_ID, "description": "A flow name registered in the server."},
        "args": {"type": "array", "items": _ANY, "description": "Positional arguments."},
        "kwargs": {"type": "object", "description": "Keyword arguments."},
        "run_id": {**_ID, "description": "Your id for the run (default: a random UUID)."},
        "priority": {**_PRIORITY, "description": "Lower runs first."},
        "queue": {**_ID, "description": "Default: the flow's queue."},
        "tenant_id": _ID,
        "concurrency_key": _ID,
        "start_in": {"type": "number", "minimum": 0, "description": "Seconds until it is queued."},
        "start_at": {"type": "string", "format": "date-time", "description": "When it is queued."},
        "options": _obj({k: _ID for k in _OPTION_FIELDS}),
    },
    "flow",
)
_DECISION = _obj({"reason": _TEXT, "payload": _ANY})
_LINEAGE = {
    "checkpoint_id": _ID, "new_run_id": _ID,
    "children": {"type": "string", "enum": list(CHILDREN), "default": CHILDREN[0],
                 "description": "What the new run does with the child runs the source started: "
                 "reuse the ones that completed (replay the others), replay all, or rerun all."},
}  # fmt: skip
_FORK = _obj(
    {**_LINEAGE, "queue": _ID, "priority": _PRIORITY, "tenant_id": _ID, "flow_version": _ID,
     "environment": _ID, "thread_id": _ID, "trace_id": _ID, "policy_snapshot_id": _ID},
)  # fmt: skip


_RESUME = _obj(
    {
        "force": {"type": "boolean", "description": "Skip re-evaluating the run's policy."},
        "version": {**_ID, "description": "The flow version to continue on."},
    }
)


#: An event's data: an object whose fields wait_for_event filters match, or null.
_EVENT_DATA = {
    "type": ["object", "null"],
    "description": "The event's data: a JSON object (wait_for_event filters match its "
    "top-level fields) or null.",
}

_RUN_ERRORS = (E.RUN_NOT_FOUND,)
_STEER_ERRORS = (E.RUN_NOT_FOUND, E.FORBIDDEN, E.INVALID_TRANSITION)
_SCHEDULE_ERRORS = (E.SCHEDULE_NOT_FOUND, E.FORBIDDEN)


def _query(name: str, schema: dict[str, Any], description: str) -> Param:
    return Param(name, "query", schema, description)


_LIMIT = {"type": "integer", "minimum": 1, "maximum": 1000}
_LIST_PARAMS = (
    _query(
        "status",
        {"type": "string", "enum": [s.value for s in RunStatus]},
        "Only runs of this status.",
    ),
    _query("flow", _ID, "Only runs of this flow."),
    _query("queue", _ID, "Only runs on this queue."),
    _query("tenant_id", _ID, "Only runs of this tenant."),
    _query("parent_run_id", _ID, "Only the child flows this run started."),
    _query("since", {"type": "string", "format": "date-time"}, "Only runs created since."),
    _query(
        "waiting_on",
        {"type": "string", "enum": [k.value for k in WaitKind]},
        "Only waiting runs that wait on something of this kind (RunRecord.waiting_on).",
    ),
    _query("cursor", {"type": "string"}, "The next_cursor of the previous page."),
    _query("limit", {**_LIMIT, "default": 50}, "Page size."),
)


def routes() -> tuple[Route, ...]:
    """Every route, in the order the document lists them."""
    return (
        Route("POST", "/v1/runs", "startRun", "Start a run of a registered flow", runs.start_run,
              "runs", status=201, response=_RUN, body=START_BODY,
              errors=(E.FLOW_NOT_FOUND, E.SERIALIZATION_ERROR, E.PAYLOAD_TOO_LARGE,
                      E.IDEMPOTENCY_CONFLICT, E.QUEUE_FULL, E.FORBIDDEN),
              description="The arguments are checked against the flow's signature and "
              "rebuilt into its annotated types before anything is written. The same run_id "
              "with the same arguments returns the existing run. The caller needs the "
              "'start' action (the operator role)."),
        Route("GET", "/v1/runs", "listRuns", "List runs, newest first", runs.list_runs, "runs",
              response=_obj({"runs": {"type": "array", "items": _RUN},
                             "next_cursor": {"type": ["string", "null"]}}, "runs", "next_cursor"),
              params=_LIST_PARAMS),
        Route("GET", "/v1/runs/{run_id}", "getRun", "Get a run", runs.get_run, "runs",
              response=_RUN, params=(_RUN_ID,), errors=_RUN_ERRORS),
        Route("DELETE", "/v1/runs/{run_id}", "deleteRun", "Delete a finished run and its data",
              runs.delete_run, "runs", status=204, params=(_RUN_ID,), errors=_STEER_ERRORS),
        Route("GET", "/v1/runs/{run_id}/events", "listRunEvents", "A run's events",
              runs.run_events, "runs", streams=True,
              response=_obj({"events": {"type": "array", "items": ref("Event")},
                             "next_cursor": {"type": ["string", "null"]}}, "events", "next_cursor"),
              params=(_RUN_ID, _query("cursor", {"type": "string"}, "Events after this event_id."),
                      _query("limit", {**_LIMIT, "default": 100}, "Page size.")),
              errors=(*_RUN_ERRORS, E.TOO_MANY_STREAMS),
              description="With 'Accept: text/event-stream', the log from the cursor (or "
              "Last-Event-ID) and then each new event live, as Server-Sent Events (id: the "
              "event_id, event: its type, data: the Event); the stream ends with 'event: end' "
              "once the run has ended, or 'event: error' with a problem. A stream over the "
              "server's or the caller's limit of open streams is 429 too_many_streams, with "
              "Retry-After."),
        Route("GET", "/v1/runs/{run_id}/checkpoints", "listRunCheckpoints", "A run's checkpoints",
              runs.run_checkpoints, "runs", response=_list_of("checkpoints", ref("Checkpoint")),
              params=(_RUN_ID,), errors=_RUN_ERRORS),
        Route("GET", "/v1/runs/{run_id}/timeline", "getRunTimeline",
              "A run's steps, waits, sleeps, retries and child flows as a time-ordered tree",
              runs.run_timeline, "runs", response=ref("TimelineEntry"), errors=_RUN_ERRORS,
              params=(_RUN_ID, _query("depth", {"type": "integer", "minimum": 0, "maximum": 5,
                                                "default": 1},
                                      "Levels of child flows shown with their own timelines."))),
        Route("GET", "/v1/runs/{run_id}/waits", "listRunWaits",
              "What a run waits for now: approvals, signals, events, children, sleeps, retries",
              runs.run_waits, "runs",
              response=_obj({"waits": {"type": "array", "items": ref("WaitingOn")},
                             "approvers": {"type": "object", "additionalProperties": {
                                 "type": "array", "items": {"type": "string"}},
                                 "description": "Human wait name -> who may decide it "
                                                "(only waits that name approvers)"}},
                            "waits", "approvers"),
              params=(_RUN_ID,), errors=_RUN_ERRORS),
        Route("GET", "/v1/runs/{run_id}/export", "exportRun",
              "A run's record, journal, checkpoints and events (what testing.replay reads)",
              runs.export_run, "runs", response={"type": "object"}, params=(_RUN_ID,),
              errors=_RUN_ERRORS),
        Route("POST", "/v1/runs/{run_id}/signals/{name}", "signalRun", "Send a signal",
              act.signal, "steering", params=(_RUN_ID, _NAME), body_required=False,
              body=_obj({"payload": _ANY, "dedup_id": _ID}),
              response=_obj({"run_id": _ID, "name": _ID, "delivered": {"type": "boolean"}},
                            "run_id", "name", "delivered"),
              errors=(*_STEER_ERRORS, E.SERIALIZATION_ERROR, E.PAYLOAD_TOO_LARGE,
                      E.MAILBOX_FULL)),
        *(
            Route("POST", f"/v1/runs/{{run_id}}/{verb}/{{name}}", f"{verb}Run",
                  f"{verb.capitalize()} a human wait (the actor is the caller)",
                  act.approve if verb == "approve" else act.deny, "steering",
                  params=(_RUN_ID, _NAME), body=_DECISION, body_required=False,
                  response=_obj({"run_id": _ID, "name": _ID, "approved": {"type": "boolean"},
                                 "actor": _ID}, "run_id", "name", "approved", "actor"),
                  errors=(*_STEER_ERRORS, E.NOT_WAITING, E.SERIALIZATION_ERROR,
                          E.PAYLOAD_TOO_LARGE))
            for verb in ("approve", "deny")
        ),
        Route("POST", "/v1/runs/{run_id}/cancel", "cancelRun", "Cancel a run", act.cancel,
              "steering", params=(_RUN_ID,), response=_RUN, errors=_STEER_ERRORS,
              body=_obj({"reason": _TEXT, "grace": {"type": "number", "minimum": 0}}, "reason")),
        Route("POST", "/v1/runs/{run_id}/resume", "resumeRun",
              "Resume a failed, canceled or waiting run", act.resume, "steering",
              params=(_RUN_ID,), body=_RESUME, body_required=False, response=_RUN,
              errors=_STEER_ERRORS),
        Route("POST", "/v1/runs/{run_id}/replay", "replayRun",
              "Re-execute a run as a new run from a checkpoint (default: the first)",
              act.replay, "steering", status=201, params=(_RUN_ID,), body=_obj(_LINEAGE),
              body_required=False, response=_RUN,
              errors=(*_STEER_ERRORS, E.IDEMPOTENCY_CONFLICT)),
        Route("POST", "/v1/runs/{run_id}/fork", "forkRun",
              "Like replay, from a checkpoint (default: the head), with other options",
              act.fork, "steering", status=201, params=(_RUN_ID,), body=_FORK,
              body_required=False, response=_RUN,
              errors=(*_STEER_ERRORS, E.IDEMPOTENCY_CONFLICT)),
        Route("POST", "/v1/events", "sendEvent",
              "Send an event to the runs waiting for it; start its on_event flows",
              act.send_event, "steering",
              body=_obj({"name": _ID, "data": _EVENT_DATA, "event_id": _ID}, "name"),
              response=_obj({"run_ids": {"type": "array", "items": _ID}}, "run_ids"),
              errors=(E.SERIALIZATION_ERROR, E.PAYLOAD_TOO_LARGE, E.FORBIDDEN)),
        Route("GET", "/v1/queues", "listQueues", "Queues: depth, executing, limits",
              act.list_queues, "operations", response=_list_of("queues", ref("QueueInfo"))),
        Route("GET", "/v1/workers", "listWorkers", "Live workers, from their heartbeats",
              act.list_workers, "operations", response=_list_of("workers", ref("WorkerInfo"))),
        Route("GET", "/v1/schedules", "listSchedules", "Schedules", act.list_schedules,
              "operations", response=_list_of("schedules", ref("ScheduleInfo"))),
        *(
            Route("POST", f"/v1/schedules/{{schedule_id}}/{verb}", f"{verb}Schedule",
                  f"{verb.capitalize()} a schedule", handler, "operations",
                  params=(_SCHEDULE_ID,), response=ref("ScheduleInfo"),
                  errors=_SCHEDULE_ERRORS)
            for verb, handler in (("pause", act.pause_schedule), ("resume", act.resume_schedule))
        ),
        Route("POST", "/v1/schedules/{schedule_id}/trigger", "triggerSchedule",
              "Start a run of a schedule now", act.trigger_schedule, "operations",
              params=(_SCHEDULE_ID,),
              response=_obj({"schedule_id": _ID, "run_id": _ID}, "schedule_id", "run_id"),
              errors=_SCHEDULE_ERRORS),
        Route("DELETE", "/v1/schedules/{schedule_id}", "deleteSchedule", "Delete a schedule",
              act.delete_schedule, "operations", status=204, params=(_SCHEDULE_ID,),
              errors=_SCHEDULE_ERRORS),
        Route("GET", "/v1/audit", "listAuditEntries",
              "The deployment's audit log: run deletions, schedule operations (or refusals)",
              act.audit_log, "operations",
              response=_obj({"entries": {"type": "array", "items": ref("AuditEntry")},
                             "next_cursor": {"type": ["string", "null"]}},
                            "entries", "next_cursor"),
              params=(_query("cursor", {"type": "string"}, "Entries after this entry_id."),
                      _query("limit", {**_LIMIT, "default": 100}, "Page size."),
                      _query("refusals", {"type": "boolean", "default": False},
                             "The refusals log (auth.denied of starts and schedule "
                             "operations) instead of the changes log.")),
              description="Oldest first. Kept apart from the runs' own logs: a deleted "
              "run's deletion, with who deleted it, stays here."),
        Route("GET", "/healthz", "healthz", "Liveness: the process answers (no authentication)",
              act.healthz, "health", public=True,
              response=_obj({"status": {"type": "string", "enum": ["ok"]}}, "status")),
        Route("GET", "/readyz", "readyz", "Readiness: the store answers", act.readyz, "health",
              response=_obj({"status": {"type": "string", "enum": ["ready"]},
                             "store": {"type": "object"}}, "status", "store")),
        Route("GET", "/openapi.json", "openapi", "This OpenAPI document", _openapi, "meta",
              response={"type": "object"}),
    )  # fmt: skip


async def _openapi(call: Call) -> dict[str, Any]:
    from sdk.http._openapi import document

    return document(routes())
