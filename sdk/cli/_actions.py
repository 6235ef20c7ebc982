"""The privileged commands: ``signal``, ``approve``, ``deny``, ``cancel``, ``resume``,
``replay``, ``fork``, ``send-event``, ``delete``. Each is one `Client` call, made as ``--actor``
and through ``--authorizer`` (see `sdk.cli._client`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from sdk._core._limits import MAX_JSON_DEPTH, nested_deeper
from sdk._core._types import RunStatus
from sdk.cli._client import privileged, run_client
from sdk.cli._options import CONTEXT_SETTINGS, EXIT_CODES, StoreOptions, store_options
from sdk.cli._render import echo_json
from sdk.cli._worker import import_flow_modules
from sdk.client._client import Authorizer, Client
from sdk.client._treecopy import CHILDREN

__all__ = ["COMMANDS"]


class JsonValue(click.ParamType):  # type: ignore[type-arg]
    """A JSON text, parsed (``--payload '{"amount": 3}'``)."""

    name = "json"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            data = json.loads(value)
        except ValueError as e:
            self.fail(f"{value[:80]!r} is not JSON ({e}); quote strings: '\"text\"'", param)
        except RecursionError:  # deeper than the stack holds
            self.fail(f"the JSON nests more than {MAX_JSON_DEPTH} levels deep", param)
        if nested_deeper(data, MAX_JSON_DEPTH):  # before anything recursive sees it
            self.fail(f"the JSON nests more than {MAX_JSON_DEPTH} levels deep", param)
        return data


Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def _command(name: str, help_text: str) -> Callable[[Callable[..., Any]], click.Command]:
    return click.command(name, context_settings=CONTEXT_SETTINGS, epilog=EXIT_CODES, help=help_text)


def _payload_option(what: str) -> Decorator:
    return click.option("--payload", type=JsonValue(), default=None, help=f"JSON {what}.")


@_command("signal", "Send the signal NAME to a run; kept until a wait_for(NAME) takes it.")
@click.argument("run_id")
@click.argument("name")
@_payload_option("payload the wait_for returns")
@click.option("--dedup-id", metavar="ID", default=None, help="Deliver once per run under this id.")
@privileged
@store_options
def signal(
    run_id: str, name: str, payload: Any, dedup_id: str | None, actor: str | None,
    authorizer: Authorizer | None, store: StoreOptions,
) -> None:  # fmt: skip
    delivered = run_client(
        store,
        lambda c: c.signal(run_id, name, payload, dedup_id=dedup_id, actor=actor),
        authorizer,
    )
    if delivered:
        click.echo(f"signal {name!r} sent to run {run_id!r}")
    else:
        click.echo(
            f"signal {name!r} with dedup id {dedup_id!r} was already delivered to {run_id!r}"
        )


def _decision(verb: str) -> click.Command:
    @_command(
        verb, f"{verb.capitalize()} the human wait NAME of a run (wait_for(NAME, human=True))."
    )
    @click.argument("run_id")
    @click.argument("name")
    @click.option("--reason", metavar="TEXT", default=None, help="Why; recorded with the decision.")
    @_payload_option("value given with the decision")
    @privileged
    @store_options
    def decide(
        run_id: str, name: str, reason: str | None, payload: Any, actor: str | None,
        authorizer: Authorizer | None, store: StoreOptions,
    ) -> None:  # fmt: skip
        if actor is None:
            raise click.UsageError(f"{verb} needs an actor: --actor NAME or $STEADYFLOW_ACTOR")

        async def call(c: Client) -> bool:
            method = c.approve if verb == "approve" else c.deny
            return await method(run_id, name, actor=actor, reason=reason, payload=payload)

        run_client(store, call, authorizer)
        click.echo(f"{verb}d {name!r} of run {run_id!r} as {actor!r}")

    return decide


@_command("cancel", "Cancel a run; the flow may clean up for up to --grace seconds.")
@click.argument("run_id")
@click.option("--reason", metavar="TEXT", required=True, help="Why; the run's reason.")
@click.option(
    "--grace", metavar="SECONDS", type=click.FloatRange(min=0), default=30.0, show_default=True,
    help="Seconds the flow has to clean up; 0 cancels at once.",
)  # fmt: skip
@privileged
@store_options
def cancel(
    run_id: str, reason: str, grace: float, actor: str | None, authorizer: Authorizer | None,
    store: StoreOptions,
) -> None:  # fmt: skip

    async def call(c: Client) -> RunStatus:
        await c.cancel(run_id, reason=reason, actor=actor, grace=grace)
        return (await c.get(run_id)).status

    now = run_client(store, call, authorizer)
    if now is RunStatus.CANCELED:
        click.echo(f"run {run_id!r} canceled")
    else:
        click.echo(f"run {run_id!r}: cancel requested; the flow has {grace:g}s to clean up")


@_command("resume", "Continue a failed, canceled or waiting run from its checkpoint.")
@click.argument("run_id")
@click.option(
    "--force", is_flag=True,
    help="Skip re-evaluating the run's policy (the authorizer is asked for force_resume).",
)  # fmt: skip
@click.option(
    "--version", "version", metavar="VERSION", default=None,
    help="Move the run onto this version of its flow (also a run stuck pending because no "
    "worker serves its version). [default: the run's own]",
)  # fmt: skip
@privileged
@store_options
def resume(
    run_id: str, force: bool, version: str | None, actor: str | None,
    authorizer: Authorizer | None, store: StoreOptions,
) -> None:  # fmt: skip
    run_client(
        store, lambda c: c.resume(run_id, force=force, actor=actor, version=version), authorizer
    )
    at = "" if version is None else f" on version {version!r}"
    click.echo(f"run {run_id!r} resumed{at}")


def _derive(verb: str, default: str) -> click.Command:
    @_command(
        verb,
        f"{verb.capitalize()} a run as a new run from a checkpoint (default: {default}); "
        "prints the new run id.",
    )
    @click.argument("run_id")
    @click.option(
        "--checkpoint", metavar="ID", default=None, help=f"Checkpoint id. [default: {default}]"
    )
    @click.option(
        "--new-run-id", metavar="RUN_ID", default=None, help="The new run's id. [default: a UUID]"
    )
    @click.option(
        "--children",
        type=click.Choice(CHILDREN),
        default=CHILDREN[0],
        show_default=True,
        help="The child runs the source started: reuse those that completed (replay the "
        "others), replay all, or rerun all.",
    )
    @click.option("--json", "as_json", is_flag=True, help='Print {"run_id", "source_run_id"}.')
    @privileged
    @store_options
    def derive(
        run_id: str, checkpoint: str | None, new_run_id: str | None, children: str,
        as_json: bool, actor: str | None, authorizer: Authorizer | None, store: StoreOptions,
    ) -> None:  # fmt: skip
        async def call(c: Client) -> str:
            method = c.replay if verb == "replay" else c.fork
            handle = await method(
                run_id, checkpoint_id=checkpoint, actor=actor, new_run_id=new_run_id,
                children=children,
            )  # fmt: skip
            return handle.run_id

        new_id = run_client(store, call, authorizer)
        if as_json:
            echo_json({"run_id": new_id, "source_run_id": run_id})
        else:
            click.echo(new_id)

    return derive


@_command(
    "send-event",
    "Send the event NAME with DATA_JSON (a JSON object, or null): deliver it to every run "
    "whose wait_for_event(NAME, match=...) it satisfies, and start the @flow(on_event=NAME) "
    "flows of the --import modules. Prints the run ids it reached, then those it started.",
)
@click.argument("name")
@click.argument("data", metavar="DATA_JSON", type=JsonValue())
@click.option(
    "--event-id", metavar="ID", default=None,
    help="De-duplicates: an event id reaches each wait, and starts each flow, at most once "
    "(send a retried webhook with its delivery id). [default: a new random id]",
)  # fmt: skip
@click.option(
    "--import", "modules", metavar="MODULE", multiple=True,
    help="Import these flow modules first, so their @flow(on_event=NAME) flows start "
    "(repeatable).",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help='Print {"run_ids": [...]}.')
@privileged
@store_options
def send_event(
    name: str, data: Any, event_id: str | None, modules: tuple[str, ...], as_json: bool,
    actor: str | None, authorizer: Authorizer | None, store: StoreOptions,
) -> None:  # fmt: skip
    if modules:
        import_flow_modules(modules)
    reached = run_client(
        store, lambda c: c.send_event(name, data, event_id=event_id, actor=actor), authorizer
    )
    if as_json:
        echo_json({"run_ids": reached})
        return
    for run_id in reached:
        click.echo(run_id)
    if not reached:
        click.echo(f"event {name!r}: no run waits for it (nothing was delivered)", err=True)


@_command("delete", "Delete a finished run and all of its data, for good.")
@click.argument("run_id")
@privileged
@store_options
def delete(
    run_id: str, actor: str | None, authorizer: Authorizer | None, store: StoreOptions
) -> None:
    run_client(store, lambda c: c.delete(run_id, actor=actor), authorizer)
    click.echo(f"run {run_id!r} deleted")


COMMANDS = (
    signal, _decision("approve"), _decision("deny"), cancel, resume,
    _derive("replay", "the first"), _derive("fork", "the head"), send_event, delete,
)  # fmt: skip
