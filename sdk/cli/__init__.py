"""The ``steadyflow`` command line (the console script; also ``python -m sdk.cli``).

One `click` group, `cli`. Each command lives in a module of this package and
is added to the group below; commands that use a store take the shared
``--store`` / ``--prefix`` / ``--partitions`` options (`sdk.cli._options`),
whose defaults are ``$STEADYFLOW_STORE`` and ``$STEADYFLOW_PREFIX``.

A package of its own that ``sdk/__init__.py`` never imports: ``import sdk``
does not pay for click, and ``python -m sdk.worker`` (the worker command under
its older name) is not imported twice (a module that runs with ``-m`` and is
also imported by ``sdk`` would be loaded twice, its flows registered twice).

Modules: ``_worker`` (``worker``), ``_runs`` (``runs list|show|timeline|events``),
``_actions`` (the privileged ``signal``, ``approve``, ``deny``, ``cancel``,
``resume``, ``replay``, ``fork``, ``delete``), ``_inspect`` (``export``,
``queues``, ``workers``), ``_schedules`` (``schedules ...``), ``_serve``
(``serve``, the HTTP API); ``_client`` (how a command reaches `sdk.Client`:
actor, authorizer, errors as exit codes) and ``_render`` (JSON, tables, trees).
The operator commands need no flow code (docs/operations.md#command-line).
"""

from __future__ import annotations

import click

from sdk import __version__
from sdk.cli import _actions, _inspect
from sdk.cli._options import CONTEXT_SETTINGS, EXIT_CODES
from sdk.cli._runs import runs
from sdk.cli._schedules import schedules
from sdk.cli._serve import serve
from sdk.cli._worker import worker

__all__ = ["cli", "main"]


@click.group(context_settings=CONTEXT_SETTINGS, epilog=EXIT_CODES)
@click.version_option(__version__, prog_name="steadyflow")
def cli() -> None:
    """Steadyflow: durable flows on Redis. Run workers and operate runs."""


cli.add_command(worker)
cli.add_command(runs)
for _command in (*_actions.COMMANDS, *_inspect.COMMANDS):
    cli.add_command(_command)
cli.add_command(schedules)
cli.add_command(serve)


def main() -> None:
    """The console script: run the group, then exit with its exit code."""
    cli.main(prog_name="steadyflow")
