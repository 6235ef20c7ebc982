"""Endpoints that steer runs (signal, decide, cancel, resume, replay, fork), send
events, operate schedules, and report on queues, workers, schedules, the audit
log and health. Each is a thin
layer over `sdk.Client`; the authenticated caller is the actor of every
privileged call, so the client's `Authorizer` decides and audits."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from sdk.client._jsonshapes import shape, shapes
from sdk.http._routing import Call
from sdk.http._runs import json_answer, location

__all__ = [
    "FORK_FIELDS",
    "approve",
    "audit_log",
    "cancel",
    "delete_schedule",
    "deny",
    "fork",
    "healthz",
    "list_queues",
    "list_schedules",
    "list_workers",
    "pause_schedule",
    "readyz",
    "replay",
    "resume",
    "resume_schedule",
    "send_event",
    "signal",
    "trigger_schedule",
]

#: Body fields of a fork that are `Client.fork` options.
FORK_FIELDS = (
    "queue", "priority", "tenant_id", "flow_version", "environment", "thread_id", "trace_id",
    "policy_snapshot_id",
)  # fmt: skip


async def signal(call: Call) -> dict[str, Any]:
    """``POST /v1/runs/{run_id}/signals/{name}``."""
    run_id, name, body = call.params["run_id"], call.params["name"], call.body
    delivered = await call.client.signal(
        run_id, name, body.get("payload"), dedup_id=body.get("dedup_id"), actor=call.actor
    )
    return {"run_id": run_id, "name": name, "delivered": delivered}


async def _decide(call: Call, approved: bool) -> dict[str, Any]:
    run_id, name, body = call.params["run_id"], call.params["name"], call.body
    decide = call.client.approve if approved else call.client.deny
    await decide(
        run_id, name, actor=call.actor, reason=body.get("reason"), payload=body.get("payload")
    )
    return {"run_id": run_id, "name": name, "approved": approved, "actor": call.actor}


async def approve(call: Call) -> dict[str, Any]:
    """``POST /v1/runs/{run_id}/approve/{name}``: the actor is the caller."""
    return await _decide(call, True)


async def deny(call: Call) -> dict[str, Any]:
    """``POST /v1/runs/{run_id}/deny/{name}``: the actor is the caller."""
    return await _decide(call, False)


async def cancel(call: Call) -> dict[str, Any]:
    """``POST /v1/runs/{run_id}/cancel``: the run as it is after the cancel."""
    run_id, body = call.params["run_id"], call.body
    grace = {"grace": body["grace"]} if "grace" in body else {}
    await call.client.cancel(run_id, reason=body["reason"], actor=call.actor, **grace)
    return shape(await call.client.get(run_id))


async def resume(call: Call) -> dict[str, Any]:
    """``POST /v1/runs/{run_id}/resume``."""
    run_id, body = call.params["run_id"], call.body
    await call.client.resume(
        run_id, force=body.get("force", False), actor=call.actor, version=body.get("version")
    )
    return shape(await call.client.get(run_id))


async def replay(call: Call) -> Response:
    """``POST /v1/runs/{run_id}/replay``: 201 with the new run."""
    body = call.body
    handle = await call.client.replay(
        call.params["run_id"], checkpoint_id=body.get("checkpoint_id"), actor=call.actor,
        new_run_id=body.get("new_run_id"), children=body.get("children", "reuse"),
    )  # fmt: skip
    return await _created(call, handle.run_id)


async def fork(call: Call) -> Response:
    """``POST /v1/runs/{run_id}/fork``: 201 with the new run."""
    body = call.body
    options = {k: body[k] for k in FORK_FIELDS if k in body}
    handle = await call.client.fork(
        call.params["run_id"], checkpoint_id=body.get("checkpoint_id"), actor=call.actor,
        new_run_id=body.get("new_run_id"), children=body.get("children", "reuse"), **options,
    )  # fmt: skip
    return await _created(call, handle.run_id)


async def _created(call: Call, run_id: str) -> Response:
    return json_answer(shape(await call.client.get(run_id)), 201, location(run_id))


async def send_event(call: Call) -> dict[str, Any]:
    """``POST /v1/events``: the runs it reached, then the runs it started."""
    body = call.body
    run_ids = await call.client.send_event(
        body["name"], body.get("data"), event_id=body.get("event_id"), actor=call.actor
    )
    return {"run_ids": run_ids}


async def list_queues(call: Call) -> dict[str, Any]:
    """``GET /v1/queues``."""
    return {"queues": shapes(await call.client.queues())}


async def list_workers(call: Call) -> dict[str, Any]:
    """``GET /v1/workers``: the live workers, from their heartbeats."""
    return {"workers": shapes(await call.client.workers())}


async def list_schedules(call: Call) -> dict[str, Any]:
    """``GET /v1/schedules``."""
    return {"schedules": shapes(await call.client.list_schedules())}


async def pause_schedule(call: Call) -> dict[str, Any]:
    """``POST /v1/schedules/{schedule_id}/pause``."""
    return shape(await call.client.pause_schedule(call.params["schedule_id"], actor=call.actor))


async def resume_schedule(call: Call) -> dict[str, Any]:
    """``POST /v1/schedules/{schedule_id}/resume``."""
    return shape(await call.client.resume_schedule(call.params["schedule_id"], actor=call.actor))


async def trigger_schedule(call: Call) -> dict[str, Any]:
    """``POST /v1/schedules/{schedule_id}/trigger``: the run id the tick gets."""
    handle = await call.client.trigger_schedule(call.params["schedule_id"], actor=call.actor)
    return {"schedule_id": call.params["schedule_id"], "run_id": handle.run_id}


async def delete_schedule(call: Call) -> None:
    """``DELETE /v1/schedules/{schedule_id}``."""
    await call.client.delete_schedule(call.params["schedule_id"], actor=call.actor)


async def audit_log(call: Call) -> dict[str, Any]:
    """``GET /v1/audit``: a page of the deployment's audit log (changes, or refusals)."""
    p = call.params
    entries = await call.client.audit_log(
        cursor=p.get("cursor"), limit=p.get("limit", 100), refusals=p.get("refusals", False)
    )
    last = entries[-1].entry_id if entries else p.get("cursor")
    return {"entries": shapes(entries), "next_cursor": last}


async def healthz(call: Call) -> dict[str, Any]:
    """``GET /healthz``: the process answers (no store round trip, no authentication)."""
    return {"status": "ok"}


async def readyz(call: Call) -> dict[str, Any]:
    """``GET /readyz``: the store answers (one read); 503 ``store_unavailable`` if not."""
    await call.client.list_runs(limit=1)
    return {"status": "ready", "store": call.client.store.describe()}
