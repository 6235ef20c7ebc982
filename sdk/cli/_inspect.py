"""``steadyflow export``, ``queues``, ``workers`` and ``audit``: a run's whole record,
and the deployment."""

from __future__ import annotations

import click

from sdk.cli._client import run_client
from sdk.cli._options import CONTEXT_SETTINGS, EXIT_CODES, StoreOptions, store_options
from sdk.cli._render import duration, echo_json, table, when
from sdk.cli._worker import import_flow_modules
from sdk.client._jsonshapes import shapes

__all__ = ["COMMANDS"]


@click.command("export", context_settings=CONTEXT_SETTINGS, epilog=EXIT_CODES)
@click.argument("run_id")
@store_options
def export(run_id: str, store: StoreOptions) -> None:
    """A run's record, journal, checkpoints and events as JSON on stdout (``> run.json``),
    the file testing.replay checks new flow code against."""
    echo_json(run_client(store, lambda c: c.export(run_id)))


@click.command("queues", context_settings=CONTEXT_SETTINGS, epilog=EXIT_CODES)
@click.option(
    "--import", "modules", metavar="MODULE", multiple=True,
    help="Import these flow modules first, so their Queue limits are shown (repeatable).",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON (stable shapes).")
@store_options
def queues(modules: tuple[str, ...], as_json: bool, store: StoreOptions) -> None:
    """Queues: ready and executing runs, the limit holding runs back, the oldest wait."""
    import_flow_modules(modules)
    found = run_client(store, lambda c: c.queues())
    if as_json:
        echo_json({"queues": shapes(found)})
        return
    table(
        ("QUEUE", "PENDING", "EXECUTING", "LIMITED BY", "OLDEST PENDING", "CONCURRENCY",
         "MAX PENDING"),
        (
            (q.name, q.pending, q.executing, q.limited_by, duration(q.oldest_pending_age),
             q.queue.concurrency if q.queue else None, q.queue.max_pending if q.queue else None)
            for q in found
        ),
    )  # fmt: skip


@click.command("workers", context_settings=CONTEXT_SETTINGS, epilog=EXIT_CODES)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (stable shapes).")
@store_options
def workers(as_json: bool, store: StoreOptions) -> None:
    """Live workers, from their heartbeats: id, host, flows served, slots in use."""
    found = run_client(store, lambda c: c.workers())
    if as_json:
        echo_json({"workers": shapes(found)})
        return
    table(
        ("WORKER", "HOST", "PID", "SLOTS", "QUEUES", "FLOWS", "LAST BEAT"),
        (
            (w.worker_id, w.host, w.pid, f"{w.in_flight}/{w.concurrency}",
             ",".join(w.queues) if w.queues is not None else "(all)", ", ".join(w.flows),
             when(w.last_beat))
            for w in found
        ),
    )  # fmt: skip
    if not found:
        click.echo("no live worker on this store and prefix", err=True)


@click.command("audit", context_settings=CONTEXT_SETTINGS, epilog=EXIT_CODES)
@click.option(
    "--refusals",
    is_flag=True,
    help="The refusals log (auth.denied of starts and schedule operations).",
)
@click.option(
    "--cursor",
    metavar="ENTRY_ID",
    default=None,
    help="Entries after this one (the last entry_id of the previous page).",
)
@click.option(
    "--limit",
    metavar="N",
    type=click.IntRange(1, 100_000),
    default=100,
    show_default=True,
    help="Entries to show.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (stable shapes).")
@store_options
def audit(
    refusals: bool, cursor: str | None, limit: int, as_json: bool, store: StoreOptions
) -> None:
    """The deployment's audit log, oldest first: run deletions and schedule operations,
    with who did them (kept when the run is gone); or, with --refusals, the refused
    starts and schedule operations."""
    found = run_client(store, lambda c: c.audit_log(cursor=cursor, limit=limit, refusals=refusals))
    last = found[-1].entry_id if found else cursor
    if as_json:
        echo_json({"entries": shapes(found), "next_cursor": last})
        return
    table(
        ("AT", "TYPE", "ACTOR", "RUN", "SCHEDULE", "ENTRY"),
        ((when(e.at), e.type, e.actor, e.run_id, e.schedule_id, e.entry_id) for e in found),
    )
    if len(found) == limit:
        click.echo(f"more: --cursor {last}", err=True)


COMMANDS = (export, queues, workers, audit)
