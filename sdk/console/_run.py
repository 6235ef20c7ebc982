"""A run's page: record, lineage, timeline, steps, waits, checkpoints, event log.

One `Client.export` gives the journal, the event log and the checkpoints in
one read; the timeline is built from it (`sdk.client._timeline`) and drawn as
Gantt bars. Long lists are cut (`ROWS`) with a link that shows all of them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sdk._core._types import RunStatus
from sdk._core._waiting import current
from sdk.client._jsonshapes import shape
from sdk.client._runs import utc
from sdk.client._timeline import TimelineEntry, entries, run_duration, run_entry, start_of
from sdk.console._render import gantt, page
from sdk.console._state import Console
from sdk.errors import InvalidArgument, RunNotFound, SteadyflowError

__all__ = ["ACTIVATION_EVENTS", "NOTICES", "run_page", "run_view"]

#: What the page says after each action (the redirect names the action).
NOTICES = {
    "signal": "Signal sent.",
    "approve": "Approved.",
    "deny": "Denied.",
    "cancel": "Cancel requested.",
    "resume": "Resumed.",
    "replay": "This run is a replay: it was just created.",
    "fork": "This run is a fork: it was just created.",
}

#: Rows of a long timeline / step list / event log shown before "show all".
ROWS = 500
#: Child runs a run's page lists (the newest).
CHILD_ROWS = 100
#: Events that begin an activation of the run, and what to call it.
ACTIVATION_EVENTS = {
    "run.started": "start",
    "run.lease_expired": "recovery (the worker's lease expired)",
    "run.repaired": "repair",
    "run.resumed": "resumed",
    "run.replayed": "replay",
    "run.forked": "fork",
    "run.continued_as_new": "continued as new",
}
_ENDED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED)


#: Events that end an activation: the run parks (waits) or ends.
_PARKS = ("run.waiting_for_signal", "run.waiting_for_human", "run.completed", "run.failed",
          "run.canceled")  # fmt: skip
#: Events of flow code running: one after a park begins a wake-up activation.
_WORK = ("wait.completed", "wait.timed_out", "step.started", "step.completed", "step.failed",
         "step.retry_scheduled", "child.started")  # fmt: skip


def _activations(events: list[dict[str, Any]]) -> list[TimelineEntry]:
    """The run's activations, from its event log: each from the event that began it
    (a start, a recovery, a resume, or flow code running again after a wait) to
    the run parking or ending, or to the next activation."""
    out: list[TimelineEntry] = []
    current: tuple[str, datetime | None, str | None] | None = None  # label, begun, who

    def close(at: datetime | None, status: str) -> None:
        nonlocal current
        if current is not None:
            label, begun, who = current
            said = f"by {who}" if who else None
            out.append(TimelineEntry("activation", f"#{len(out) + 1} {label}", status, begun,
                                     at, said))  # fmt: skip
            current = None

    for ev in events:
        kind, at = str(ev["type"]), utc(float(ev["at"]))
        if kind in ACTIVATION_EVENTS:
            close(at, "completed")
            data = ev.get("data")
            who = data.get("actor") if isinstance(data, dict) else None
            current = (ACTIVATION_EVENTS[kind], at, who if isinstance(who, str) else None)
        elif kind in _PARKS:
            close(at, "parked" if kind.startswith("run.waiting_") else "completed")
        elif kind in _WORK and current is None and out:
            current = ("wake-up", at, None)
    close(None, "running")
    return out


async def run_view(console: Console, run_id: str, *, everything: bool) -> dict[str, Any]:
    """What the run's page shows (raises `RunNotFound`)."""
    client = console.client
    record = await client.get(run_id)
    export = await client.export(run_id)
    children = await client.list_runs(parent_run_id=run_id, limit=CHILD_ROWS)
    root = run_entry(record, "run")
    root.entries.extend(entries(export))
    root.entries.extend(run_entry(c, "child") for c in children)
    root.entries.sort(key=start_of)
    now = datetime.now(UTC)
    acts = _activations(export["events"])
    rows = gantt(TimelineEntry("run", root.label, root.status, root.started_at, root.ended_at,
                               root.detail, [*acts, *root.entries]), now)  # fmt: skip
    steps = [r for r in export["journal"] if r.get("kind") == "step"]
    waits = current(record, export)
    human = record.status is RunStatus.WAITING_FOR_HUMAN
    approvers = await client.approvers(run_id) if human else {}
    events = export["events"]
    checkpoints = list(reversed(export["checkpoints"]))
    return {
        "run": record,
        "fields": shape(record),
        "args": export.get("args"),
        "rows": rows if everything else rows[:ROWS],
        "row_count": len(rows),
        "steps": steps if everything else steps[:ROWS],
        "step_count": len(steps),
        "waits": waits,
        "human": human,
        "approvers": approvers,
        "children": list(reversed(children)),  # oldest first, as they were started
        "children_by_id": {c.run_id: c for c in children},
        "child_limit": CHILD_ROWS,
        "now": now,
        "run_duration": run_duration,
        # the newest first: a replay or fork usually starts near the end
        "checkpoints": checkpoints if everything else checkpoints[:ROWS],
        "checkpoint_count": len(checkpoints),
        "events": events if everything else events[-ROWS:],
        "event_count": len(events),
        "ended": record.status in _ENDED,
        "everything": everything,
        "retries": sum(1 for e in events if e["type"] == "step.retry_scheduled"),
        "recoveries": sum(1 for e in events if e["type"] == "run.lease_expired"),
        "activations": len(acts),
    }


def _may(console: Console, actor: str, action: str, view: dict[str, Any]) -> bool | None:
    """Whether the client's `Authorizer` would let `actor` do `action` (None: no authorizer)."""
    authorizer = console.client.authorizer
    return None if authorizer is None else authorizer.can(actor, action, view["run"])


async def run_page(
    request: Request, console: Console, actor: str, *, error: str | None = None,
    status: int = 200, run_id: str | None = None,
) -> Response:  # fmt: skip
    """``GET /ui/runs/{run_id}`` (and the answer of a refused action: `error`)."""
    run_id = run_id or request.path_params["run_id"]
    everything = request.query_params.get("all") == "1"
    try:
        view = await run_view(console, run_id, everything=everything)
    except RunNotFound:
        return page(request, "notfound.html", status=404, actor=actor,
                    csrf=console.csrf_key.csrf(actor), run_id=run_id)  # fmt: skip
    except InvalidArgument as exc:  # not a run id (a NUL, 400 characters)
        return page(request, "table.html", status=422, actor=actor, title="Not a run id",
                    csrf=console.csrf_key.csrf(actor), rows=[], error=str(exc))  # fmt: skip
    except SteadyflowError as exc:
        return page(request, "table.html", status=500, actor=actor, title=f"Run {run_id}",
                    csrf=console.csrf_key.csrf(actor), rows=[], error=str(exc))  # fmt: skip
    may = {a: _may(console, actor, a, view) for a in ("approve", "deny", "signal", "cancel")}
    return page(
        request, "run.html", status=status, actor=actor, csrf=console.csrf_key.csrf(actor),
        error=error, notice=NOTICES.get(request.query_params.get("done", "")), may=may, **view,
    )  # fmt: skip
