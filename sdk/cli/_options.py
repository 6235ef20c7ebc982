"""What every command shares: the store options, exit codes and context settings."""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import click

from stores import (
    DEFAULT_PREFIX,
    DEFAULT_URL,
    PREFIX_VARIABLE,
    STORE_VARIABLE,
    RedisStore,
    open_store,
)

T = TypeVar("T")

CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"]}


class ExitCode(enum.IntEnum):
    """What the ``steadyflow`` process exits with; scripts can rely on these."""

    OK = 0
    FAILED = 1  # an error at run time (a flow module that does not import, damaged data...)
    USAGE = 2  # unknown command or option, invalid value (click's own code for usage errors)
    NOT_FOUND = 3  # no run (or schedule) with that id
    REFUSED = 4  # the run's status does not allow it (ended, not waiting for that approval...)
    FORBIDDEN = 5  # the authorizer refused the actor (audited as auth.denied)
    UNAVAILABLE = 6  # the store did not answer (connection refused, timeout): try again
    INTERRUPTED = 130  # Ctrl-C (SIGINT), e.g. to stop `runs events --follow`


# \b keeps click from re-wrapping the list. docs/operations.md#exit-codes says the same.
EXIT_CODES = """\b
Exit codes: 0 done (a worker: stopped by SIGTERM or SIGINT);
1 failed (a flow module that does not import, an error at run time);
2 bad usage (unknown command or option, invalid value);
3 not found (no run or schedule with that id);
4 refused (the run's status does not allow it: ended, not waiting...);
5 forbidden (the authorizer refused the actor);
6 store unavailable (Redis did not answer);
130 interrupted (Ctrl-C)."""


@attrs.frozen
class StoreOptions:
    """Where a command's runs live, as given on the command line.

    ``None`` means "not given": `open` passes it on, and `stores.open_store`
    applies ``$STEADYFLOW_STORE`` / ``$STEADYFLOW_PREFIX`` and the defaults, so
    the command line and the Python API resolve them in one place.
    """

    url: str | None
    prefix: str | None
    partitions: int | None

    def open(self) -> RedisStore:
        """The store; call it inside the event loop that will use it."""
        return open_store(self.url, prefix=self.prefix, partitions=self.partitions)


_STORE_OPTIONS = (
    click.option(
        "--store", "store_url", metavar="URL", default=None,
        help="Store: redis://, rediss://, unix://, redis+cluster://, embedded://[DIR] or "
        "memory://. "
        f"[default: ${STORE_VARIABLE}, else {DEFAULT_URL} if a Redis answers there, "
        "else the embedded server]",
    ),
    click.option(
        "--prefix", metavar="P", default=None,
        help=f"Key prefix; every process of a deployment uses the same. "
        f"[default: ${PREFIX_VARIABLE}, else {DEFAULT_PREFIX}]",
    ),
    click.option(
        "--partitions", metavar="N", type=click.IntRange(min=1), default=None,
        help="Hash-tag partitions; the same in every process of a deployment. "
        "[default: 1; 16 for a redis+cluster:// store]",
    ),
)  # fmt: skip


def store_options(command: Callable[..., T]) -> Callable[..., T]:
    """Add ``--store``, ``--prefix`` and ``--partitions``; pass them as ``store=StoreOptions``."""

    @functools.wraps(command)
    def with_store(
        *args: Any,
        store_url: str | None,
        prefix: str | None,
        partitions: int | None,
        **kwargs: Any,
    ) -> T:
        return command(*args, store=StoreOptions(store_url, prefix, partitions), **kwargs)

    for option in reversed(_STORE_OPTIONS):
        with_store = option(with_store)
    return with_store
