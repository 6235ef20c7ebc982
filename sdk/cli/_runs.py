"""``steadyflow runs list|show|timeline|events``: read runs (no flow code needed)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import click
from rich.text import Text

from sdk._core._clock import EARLIEST, instant
from sdk._core._types import RunRecord, RunStatus, WaitKind
from sdk._core._waiting import current, from_data, key_label, summary
from sdk.cli._client import run_client
from sdk.cli._options import CONTEXT_SETTINGS, EXIT_CODES, StoreOptions, store_options
from sdk.cli._render import (
    compact,
    duration,
    echo_json,
    fields,
    status,
    table,
    timeline_tree,
    when,
)
from sdk.client._client import Client
from sdk.client._follow import follow_run
from sdk.client._jsonshapes import run_page_shape, shape, shapes, timeline_shape
from sdk.client._runpages import RunFilter, RunPage, page_runs
from sdk.client._timeline import run_duration, timeline
from sdk.errors import InvalidArgument

__all__ = ["runs"]

_AGO = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}

_PARKED = (RunStatus.WAITING_FOR_SIGNAL, RunStatus.WAITING_FOR_HUMAN)

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON (stable shapes).")


@click.group("runs", context_settings=CONTEXT_SETTINGS, epilog=EXIT_CODES)
def runs() -> None:
    """List runs and read one run: record, timeline, events."""


class Since(click.ParamType):  # type: ignore[type-arg]
    """``--since``: ``30m``, ``2h``, ``1d`` ago, or an ISO 8601 time (UTC if it has no offset)."""

    name = "since"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, datetime):
            return value
        text = str(value).strip()
        ago = _AGO.fullmatch(text)
        if ago:
            try:
                at = datetime.now(UTC) - timedelta(**{_UNITS[ago.group(2)]: float(ago.group(1))})
            except OverflowError:
                self.fail(f"{text[:40]!r} ago is before {EARLIEST.isoformat()}", param)
        else:
            try:
                at = datetime.fromisoformat(text)
            except ValueError:
                self.fail(
                    f"{text[:40]!r} is neither a duration ago (30m, 2h, 1d) nor an ISO time", param
                )
            at = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
        try:
            instant(at, "the time")
        except InvalidArgument as exc:
            self.fail(str(exc), param)
        return at


@runs.command("list", context_settings=CONTEXT_SETTINGS, epilog=EXIT_CODES)
@click.option(
    "--status",
    type=click.Choice([s.value for s in RunStatus]),
    default=None,
    help="Only this status.",
)
@click.option("--flow", metavar="NAME", default=None, help="Only runs of this flow.")
@click.option("--queue", metavar="NAME", default=None, help="Only runs on this queue.")
@click.option("--tenant", metavar="ID", default=None, help="Only runs of this tenant.")
@click.option("--parent", metavar="RUN_ID", default=None, help="Only child flows of this run.")
@click.option(
    "--waiting-on",
    type=click.Choice([k.value for k in WaitKind]),
    default=None,
    help="Only waiting runs that wait on something of this kind (an approval, an event...).",
)
@click.option(
    "--since",
    type=Since(),
    default=None,
    help="Only runs created since: 30m, 2h, 1d, or an ISO time.",
)
@click.option(
    "--limit", type=click.IntRange(1, 10_000), default=50, show_default=True, help="Runs per page."
)
@click.option(
    "--cursor",
    metavar="CURSOR",
    default=None,
    help="The next page: the cursor the previous page printed.",
)
@json_option
@store_options
def list_runs(
    status: str | None, flow: str | None, queue: str | None, tenant: str | None,
    parent: str | None, waiting_on: str | None, since: datetime | None, limit: int,
    cursor: str | None, as_json: bool, store: StoreOptions,
) -> None:  # fmt: skip
    """Runs, newest first, one page at a time; the next page's cursor is printed last."""

    async def read(c: Client) -> RunPage:
        # the filter checks its values: inside, so a bad one exits 2 naming it
        where = RunFilter(status, flow, queue, tenant, parent, since, waiting_on)
        return await page_runs(c, where, limit=limit, cursor=cursor)

    page = run_client(store, read)
    if as_json:
        echo_json(run_page_shape(page.runs, page.next_cursor))
        return
    now = datetime.now(UTC)
    table(
        ("RUN ID", "FLOW", "STATUS", "WAITING ON", "QUEUE", "TENANT", "CREATED", "DURATION",
         "STEP"),
        (
            (r.run_id, r.flow, _status(r), _waiting_on(r), r.queue, r.tenant_id,
             when(r.created_at), duration(run_duration(r, now)), key_label(r.current_step_id))
            for r in page.runs
        ),
    )  # fmt: skip
    if not page.runs:
        click.echo("no runs match", err=True)
    if page.next_cursor:
        click.echo(f"next page: --cursor {page.next_cursor}")


def _status(run: RunRecord) -> Text:
    shown = status(run.status.value)
    if run.damage is not None:  # its text is in `runs show`
        shown.append(" (damaged)", style="red")
    return shown


def _waiting_on(run: RunRecord) -> str | None:
    return summary(run.waiting_on) or None


@runs.command("show", context_settings=CONTEXT_SETTINGS, epilog=EXIT_CODES)
@click.argument("run_id")
@json_option
@store_options
def show(run_id: str, as_json: bool, store: StoreOptions) -> None:
    """A run: its record, what it waits for, who serves it, and its error."""
    found = run_client(store, lambda c: _show(c, run_id))
    if as_json:
        echo_json(found)
        return
    run = found["run"]
    fields(
        (name, _field(name, value))
        for name, value in run.items()
        if name not in ("error", "result", "versions", "format_version", "waiting_on")
        and not name.startswith("lease_")
    )
    if run["result"] is not None:
        click.echo(f"result: {compact(run['result'])}")
    for wait in found["waits"]:
        who = found["approvers"].get(wait["name"]) if wait["kind"] == WaitKind.HUMAN else None
        deciders = f" (may decide: {', '.join(who)})" if who else ""
        click.echo(f"waiting for: {_describe(wait)}{deciders}")
    if run["lease_owner"] is not None:
        click.echo(f"leased by: {run['lease_owner']} until {run['lease_expires_at']}")
    if run["status"] in ("pending", "running", "replaying"):
        serving = found["serving_workers"]
        names = ", ".join(
            f"{w['worker_id']} ({w['in_flight']}/{w['concurrency']} busy)" for w in serving
        )
        click.echo(f"served by: {names or 'no live worker serves this flow on this queue'}")
    if found["queue"] is not None and found["queue"]["limited_by"]:
        click.echo(
            f"queue {run['queue']!r} is held back by its {found['queue']['limited_by']} limit"
        )
    error = run["error"]
    if error is not None:
        click.echo(f"error: {error['type']} (reason {error['reason']}, step {error['step_key']})")
        click.echo(error["message"])
        if error.get("traceback"):
            click.echo(error["traceback"].rstrip("\n"))


def _field(name: str, value: Any) -> Any:
    if name == "status":
        return status(value)
    if name == "current_step_id":  # a built-in call by what it is, not its journal key
        return key_label(value)
    return value


def _describe(wait: dict[str, Any]) -> str:
    """A `WaitingOn` shape as `WaitingOn.describe` words it."""
    return " ".join(w.describe() for w in from_data([wait])) or str(wait)


async def _show(client: Client, run_id: str) -> dict[str, Any]:
    """`runs show --json`: ``{"run", "waits", "approvers", "serving_workers", "queue"}``
    (``waits``: the run's `RunRecord.waiting_on`, or for a run parked by an older
    version, what its journal says it waits for)."""
    run = await client.get(run_id)
    old = run.status in _PARKED and not run.waiting_on  # parked before waiting_on was kept
    waits = current(run, await client.export(run_id) if old else None)
    human = run.status is RunStatus.WAITING_FOR_HUMAN  # else no approvers: no second read
    approvers = await client.approvers(run_id) if human else {}
    serving = [w for w in await client.workers() if w.serves(run.flow, run.queue, run.flow_version)]
    queue = next((q for q in await client.queues() if q.name == run.queue), None)
    return {
        "run": shape(run),
        "waits": shapes(waits),
        "approvers": {name: list(who) for name, who in approvers.items()},
        "serving_workers": shapes(serving),
        "queue": None if queue is None else shape(queue),
    }


@runs.command("timeline", context_settings=CONTEXT_SETTINGS, epilog=EXIT_CODES)
@click.argument("run_id")
@click.option(
    "--depth", type=click.IntRange(0, 10), default=1, show_default=True,
    help="Levels of child flows shown with their own timelines (0: one line each).",
)  # fmt: skip
@json_option
@store_options
def timeline_command(run_id: str, depth: int, as_json: bool, store: StoreOptions) -> None:
    """Steps, waits, retries and child flows as a time-ordered tree with durations."""
    root = run_client(store, lambda c: timeline(c, run_id, depth=depth))
    if as_json:
        echo_json(timeline_shape(root))
    else:
        timeline_tree(root)


@runs.command("events", context_settings=CONTEXT_SETTINGS, epilog=EXIT_CODES)
@click.argument("run_id")
@click.option(
    "--follow", "-f", is_flag=True, help="Then print new events live, until the run ends or Ctrl-C."
)
@click.option("--cursor", metavar="EVENT_ID", default=None, help="Start after this event id.")
@click.option(
    "--limit",
    type=click.IntRange(1, 100_000),
    default=None,
    help="At most this many events (not with --follow). [default: all]",
)
@json_option
@store_options
def events(
    run_id: str, follow: bool, cursor: str | None, limit: int | None, as_json: bool,
    store: StoreOptions,
) -> None:  # fmt: skip
    """A run's event log, oldest first; with --follow, live."""
    if follow and limit is not None:
        raise click.UsageError("--limit does not go with --follow (which reads until the run ends)")
    if follow:
        run_client(store, lambda c: _follow(c, run_id, cursor, as_json))
        return
    page = run_client(store, lambda c: c.events(run_id, cursor=cursor, limit=limit or 100_000))
    if as_json:
        next_cursor = page[-1].event_id if limit is not None and len(page) == limit else None
        echo_json({"events": shapes(page), "next_cursor": next_cursor})
        return
    for event in page:
        _echo_event(event.event_id, event.at, event.type, event.step_key, event.data)


async def _follow(client: Client, run_id: str, cursor: str | None, as_json: bool) -> None:
    async for event in follow_run(client, run_id, cursor=cursor):
        if as_json:
            echo_json(shape(event), lines=True)
        else:
            _echo_event(event.event_id, event.at, event.type, event.step_key, event.data)


def _echo_event(event_id: str, at: datetime, kind: str, step_key: str | None, data: Any) -> None:
    parts = [when(at), event_id, kind]
    if step_key:
        parts.append(key_label(step_key) or step_key)
    if data is not None:
        parts.append(compact(data))
    click.echo("  ".join(parts))
