"""How an operator command reaches `sdk.Client`: the store, the actor, the authorizer,
and SDK errors as exit codes and one line of text (never a traceback).

Privileged commands (``signal``, ``approve``, ``deny``, ``cancel``, ``resume``,
``replay``, ``fork``, ``delete``, ``send-event``, and the ``schedules`` commands that
change a schedule) take ``--actor`` (default ``$STEADYFLOW_ACTOR``)
and ``--authorizer module:attr`` (default ``$STEADYFLOW_AUTHORIZER``): the
attribute is an `Authorizer` (an object with ``can(actor, action, run)``), or
a class or function that makes one when called with no arguments. The Client
asks it, and audits a refusal as an ``auth.denied`` event, exactly as in Python.

Tests give the commands a store of their own with ``cli.main(obj=opener)`` (or
``CliRunner.invoke(cli, ..., obj=opener)``): `opener` is called with no arguments,
inside the command's event loop, for each store the command opens.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import click
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from sdk.cli._options import ExitCode, StoreOptions
from sdk.client._client import Authorizer, Client
from sdk.errors import (
    CorruptIndex,
    CorruptRecord,
    FlowNotFound,
    Forbidden,
    IdempotencyConflict,
    InvalidArgument,
    InvalidTransition,
    MailboxFull,
    NotWaiting,
    QueueFull,
    RunNotFound,
    ScheduleNotFound,
    SerializationError,
    SteadyflowError,
)
from sdk.store import PartitionsMismatch, Store

__all__ = [
    "ACTOR_VARIABLE", "AUTHORIZER_VARIABLE", "fail", "load_authorizer", "privileged", "run_client",
]  # fmt: skip

T = TypeVar("T")

ACTOR_VARIABLE = "STEADYFLOW_ACTOR"
AUTHORIZER_VARIABLE = "STEADYFLOW_AUTHORIZER"

# An SDK error -> what the process exits with (the first class that matches).
_EXITS: tuple[tuple[type[BaseException], ExitCode], ...] = (
    (RunNotFound, ExitCode.NOT_FOUND),
    (ScheduleNotFound, ExitCode.NOT_FOUND),
    (FlowNotFound, ExitCode.NOT_FOUND),
    (Forbidden, ExitCode.FORBIDDEN),
    (InvalidTransition, ExitCode.REFUSED),
    (NotWaiting, ExitCode.REFUSED),
    (IdempotencyConflict, ExitCode.REFUSED),
    (QueueFull, ExitCode.REFUSED),
    (MailboxFull, ExitCode.REFUSED),
    (InvalidArgument, ExitCode.USAGE),
    (SerializationError, ExitCode.USAGE),
    (PartitionsMismatch, ExitCode.USAGE),  # --partitions is not the deployment's
    (CorruptRecord, ExitCode.FAILED),
    (CorruptIndex, ExitCode.FAILED),
    (SteadyflowError, ExitCode.FAILED),
    (RedisConnectionError, ExitCode.UNAVAILABLE),
    (RedisTimeoutError, ExitCode.UNAVAILABLE),
    (ConnectionError, ExitCode.UNAVAILABLE),
)


def fail(message: str, code: ExitCode) -> NoReturn:
    """Stop the command: ``Error: message`` on stderr, exit `code`."""
    click.echo(f"Error: {message}", err=True)
    raise click.exceptions.Exit(int(code))


def run_client(
    store: StoreOptions,
    work: Callable[[Client], Awaitable[T]],
    authorizer: Authorizer | None = None,
) -> T:
    """Open the store, run ``work(client)`` in a new event loop, close the store.

    SDK errors become exit codes (`ExitCode`) with the error's own text, which
    names the run, the argument or the status at fault; Ctrl-C exits 130.
    """
    opener = click.get_current_context().find_root().obj

    async def main() -> T:
        opened: Store = opener() if callable(opener) else store.open()
        try:
            return await work(Client(opened, authorizer))
        finally:
            await opened.close()

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        fail("interrupted", ExitCode.INTERRUPTED)
    except click.ClickException:
        raise
    except Exception as exc:
        code = next((c for kind, c in _EXITS if isinstance(exc, kind)), None)
        if code is None:
            raise  # a bug: its traceback is what to read
        where = f" ({store.url or 'the default store'})" if code is ExitCode.UNAVAILABLE else ""
        fail(f"{exc}{where}", code)


def load_authorizer(spec: str | None, option: str = "--authorizer") -> Authorizer | None:
    """The authorizer ``module:attr`` names (None for none): the attribute itself, or
    what calling it with no arguments makes when it is a class or a factory (it has
    no ``can``). Anything wrong is a usage error (exit 2) naming `spec`."""
    if not spec:
        return None
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise click.BadParameter(
            f"{spec!r} is not module:attr (e.g. myapp.auth:authorizer)", param_hint=option
        )
    if os.getcwd() not in sys.path:  # as `steadyflow worker`: the current directory imports
        sys.path.insert(0, os.getcwd())
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as e:  # a missing module, or one that fails as it is imported
        raise click.BadParameter(
            f"{spec!r}: cannot import {module_name!r} ({type(e).__name__}: {e})", param_hint=option
        ) from None
    for part in attr.split("."):
        if not hasattr(found, part):
            raise click.BadParameter(
                f"{spec!r}: module {module_name!r} has no attribute {attr!r}", param_hint=option
            )
        found = getattr(found, part)
    if isinstance(found, type) or (callable(found) and not hasattr(found, "can")):
        try:
            found = found()  # a class or a factory
        except Exception as e:
            raise click.BadParameter(
                f"{spec!r}: calling it with no arguments to make the authorizer failed "
                f"({type(e).__name__}: {e})",
                param_hint=option,
            ) from None
    if not callable(getattr(found, "can", None)):
        raise click.BadParameter(
            f"{spec!r} is not an Authorizer (it has no can(actor, action, run) method)",
            param_hint=option,
        )
    return found  # type: ignore[no-any-return]


_PRIVILEGED_OPTIONS = (
    click.option(
        "--actor", metavar="NAME", envvar=ACTOR_VARIABLE, show_envvar=True, default=None,
        help="Who acts; recorded in the run's event log, and what the authorizer decides on.",
    ),
    click.option(
        "--authorizer", "authorizer_spec", metavar="MODULE:ATTR", envvar=AUTHORIZER_VARIABLE,
        show_envvar=True, default=None,
        help="An Authorizer (or a class or function making one) that decides who may act. "
        "[default: none: every actor may]",
    ),
)  # fmt: skip


def privileged(command: Callable[..., T]) -> Callable[..., T]:
    """Add ``--actor`` and ``--authorizer``; pass them as ``actor`` and ``authorizer``."""

    @functools.wraps(command)
    def with_actor(*args: Any, actor: str | None, authorizer_spec: str | None, **kw: Any) -> T:
        return command(
            *args, actor=actor or None, authorizer=load_authorizer(authorizer_spec), **kw
        )

    for option in reversed(_PRIVILEGED_OPTIONS):
        with_actor = option(with_actor)
    return with_actor
