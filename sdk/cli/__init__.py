"""The ``steadyflow`` command line (the console script; also ``python -m sdk.cli``).

One `click` group, `cli`. Each command lives in a module of this package and
is added to the group below; commands that use a store take the shared
``--store`` / ``--prefix`` / ``--partitions`` options (`sdk.cli._options`),
whose defaults are ``$STEADYFLOW_STORE`` and ``$STEADYFLOW_PREFIX``.

A package of its own that ``sdk/__init__.py`` never imports: ``import sdk``
does not pay for click, and ``python -m sdk.worker`` (the worker command under
its older name) is not imported twice (a module that runs with ``-m`` and is
also imported by ``sdk`` would be loaded twice, its flows registered twice). A
package rather than one ``_cli.py`` because the operator commands to come
(``runs``, ``signal``, ``approve``, ``cancel``, ``replay``, ``serve``...) each
get a module.
"""

from __future__ import annotations

import click

from sdk import __version__
from sdk.cli._options import CONTEXT_SETTINGS, EXIT_CODES
from sdk.cli._worker import worker

__all__ = ["cli", "main"]


@click.group(context_settings=CONTEXT_SETTINGS, epilog=EXIT_CODES)
@click.version_option(__version__, prog_name="steadyflow")
def cli() -> None:
    """Steadyflow: durable flows on Redis. Run workers and operate runs."""


cli.add_command(worker)


def main() -> None:
    """The console script: run the group, then exit with its exit code."""
    cli.main(prog_name="steadyflow")
