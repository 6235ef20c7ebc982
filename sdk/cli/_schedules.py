"""``steadyflow schedules list|show|create|pause|resume|delete|trigger``.

The commands that change a schedule take ``--actor`` and ``--authorizer`` as the
other privileged commands do (`sdk.cli._client.privileged`); each change is an
entry of the deployment's audit log (``steadyflow audit``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import click

from sdk._core._clock import MAX_SECONDS
from sdk.cli._actions import JsonValue
from sdk.cli._client import privileged, run_client
from sdk.cli._options import CONTEXT_SETTINGS, EXIT_CODES, StoreOptions, store_options
from sdk.cli._render import echo_json, fields, table, when
from sdk.client._client import Authorizer, Client
from sdk.client._jsonshapes import shape, shapes
from sdk.errors import ScheduleNotFound
from sdk.model._schedules import ScheduleInfo

__all__ = ["schedules"]

_json = click.option("--json", "as_json", is_flag=True, help="Print JSON (stable shapes).")
_OVERLAPS = ("skip", "buffer_one", "allow")


@click.group("schedules", context_settings=CONTEXT_SETTINGS, epilog=EXIT_CODES)
def schedules() -> None:
    """Cron schedules: list, show, create, pause, resume, delete, trigger."""


def _command(name: str) -> Callable[[Callable[..., Any]], click.Command]:
    return schedules.command(name, context_settings=CONTEXT_SETTINGS, epilog=EXIT_CODES)


def _acting(actor: str | None, authorizer: Authorizer | None) -> None:
    """With an authorizer, a change must name its actor (the client asks only then)."""
    if authorizer is not None and actor is None:
        raise click.UsageError(
            "with --authorizer, name who acts: --actor NAME or $STEADYFLOW_ACTOR"
        )


@_command("list")
@_json
@store_options
def list_schedules(as_json: bool, store: StoreOptions) -> None:
    """Every schedule, oldest first."""
    found = run_client(store, lambda c: c.list_schedules())
    if as_json:
        echo_json({"schedules": shapes(found)})
        return
    table(
        ("SCHEDULE", "FLOW", "CRON", "TZ", "PAUSED", "NEXT TICK", "LAST RUN", "FIRED", "SKIPPED"),
        (
            (s.schedule_id, s.flow, s.cron, s.tz, "yes" if s.paused else "no", when(s.next_tick),
             s.last_run_id, s.fired, s.skipped)
            for s in found
        ),
    )  # fmt: skip


def _echo(info: ScheduleInfo, as_json: bool) -> None:
    if as_json:
        echo_json(shape(info))
    else:
        fields((name, value) for name, value in shape(info).items())


@_command("show")
@click.argument("schedule_id")
@_json
@store_options
def show(schedule_id: str, as_json: bool, store: StoreOptions) -> None:
    """One schedule."""

    async def one(c: Client) -> ScheduleInfo:
        found = [s for s in await c.list_schedules() if s.schedule_id == schedule_id]
        if not found:
            raise ScheduleNotFound(schedule_id)
        return found[0]

    _echo(run_client(store, one), as_json)


@_command("create")
@click.argument("schedule_id")
@click.argument("flow")
@click.option("--cron", required=True, metavar="EXPR", help="A cron expression: '30 2 * * *'.")
@click.option(
    "--tz", default="UTC", show_default=True, help="The time zone the expression is read in."
)
@click.option(
    "--overlap", type=click.Choice(_OVERLAPS), default="skip", show_default=True,
    help="A tick while the last run goes on: skip it, buffer one, or allow it.",
)  # fmt: skip
@click.option(
    "--catchup", metavar="SECONDS", type=click.FloatRange(min=0, max=MAX_SECONDS), default=None,
    help="Fire ticks missed within this window. [default: only the last missed]",
)  # fmt: skip
@click.option(
    "--args", "args", type=JsonValue(), default=None, help="JSON list: arguments after the tick."
)
@click.option(
    "--kwargs", "kwargs", type=JsonValue(), default=None, help="JSON object: keyword arguments."
)
@_json
@privileged
@store_options
def create(
    schedule_id: str, flow: str, cron: str, tz: str, overlap: str, catchup: float | None,
    args: Any, kwargs: Any, as_json: bool, actor: str | None, authorizer: Authorizer | None,
    store: StoreOptions,
) -> None:  # fmt: skip
    """Run FLOW (a registered flow name) on a cron schedule; each tick starts one run."""
    if args is not None and not isinstance(args, list):
        raise click.BadParameter("must be a JSON list", param_hint="--args")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--kwargs")
    _acting(actor, authorizer)
    window = None if catchup is None else timedelta(seconds=catchup)
    info = run_client(
        store,
        lambda c: c.create_schedule(
            schedule_id, flow, cron=cron, args=args or (), kwargs=kwargs, tz=tz,
            overlap=overlap, catchup=window, actor=actor,
        ),
        authorizer,
    )  # fmt: skip
    _echo(info, as_json)


@_command("pause")
@click.argument("schedule_id")
@privileged
@store_options
def pause(
    schedule_id: str, actor: str | None, authorizer: Authorizer | None, store: StoreOptions
) -> None:
    """Stop firing ticks until resumed (a run in progress goes on)."""
    _acting(actor, authorizer)
    run_client(store, lambda c: c.pause_schedule(schedule_id, actor=actor), authorizer)
    click.echo(f"schedule {schedule_id!r} paused")


@_command("resume")
@click.argument("schedule_id")
@privileged
@store_options
def resume(
    schedule_id: str, actor: str | None, authorizer: Authorizer | None, store: StoreOptions
) -> None:
    """Fire ticks again, from the next one (missed ticks are not caught up)."""
    _acting(actor, authorizer)
    info = run_client(store, lambda c: c.resume_schedule(schedule_id, actor=actor), authorizer)
    click.echo(f"schedule {schedule_id!r} resumed; next tick {when(info.next_tick)}")


@_command("delete")
@click.argument("schedule_id")
@privileged
@store_options
def delete(
    schedule_id: str, actor: str | None, authorizer: Authorizer | None, store: StoreOptions
) -> None:
    """Delete the schedule (its runs are kept)."""
    _acting(actor, authorizer)
    run_client(store, lambda c: c.delete_schedule(schedule_id, actor=actor), authorizer)
    click.echo(f"schedule {schedule_id!r} deleted")


@_command("trigger")
@click.argument("schedule_id")
@privileged
@store_options
def trigger(
    schedule_id: str, actor: str | None, authorizer: Authorizer | None, store: StoreOptions
) -> None:
    """Start a run of the schedule now; prints its run id."""
    _acting(actor, authorizer)
    handle = run_client(store, lambda c: c.trigger_schedule(schedule_id, actor=actor), authorizer)
    click.echo(handle.run_id)
