"""``steadyflow serve [MODULE...]``: the HTTP runtime API (`sdk.http`), served by uvicorn.

Imports the flow modules (so ``POST /v1/runs`` can check a start's arguments
against its flow), opens the store inside the server's event loop, and
serves until SIGTERM or SIGINT. Requests need a bearer token from
``$STEADYFLOW_API_TOKENS`` or ``--tokens-file``; ``--insecure-local`` (a
developer's machine) drops that, and is refused unless ``--host`` is a
loopback address.

Who may do what: ``--authorizer module:object`` (an `Authorizer`, or a class or
function that makes one), or else the roles the tokens carry
(``token=actor:role,role``: `sdk.RoleAuthorizer`; a token without roles may
only read). ``--insecure-local`` without ``--authorizer`` allows everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Iterator
from typing import TYPE_CHECKING

import click

from sdk.cli._client import load_authorizer
from sdk.cli._options import CONTEXT_SETTINGS, EXIT_CODES, StoreOptions, store_options
from sdk.cli._worker import LOG_LEVELS, import_flow_modules
from sdk.errors import InvalidArgument

if TYPE_CHECKING:
    import uvicorn

    from sdk.client._clientcore import Authorizer
    from sdk.http import Authenticate

__all__ = ["serve"]


@click.command("serve", context_settings=CONTEXT_SETTINGS, epilog=EXIT_CODES)
@click.argument("modules", nargs=-1, metavar="[MODULE...]")
@store_options
@click.option(
    "--host", metavar="H", default="127.0.0.1", show_default=True, help="Address to listen on."
)
@click.option(
    "--port",
    metavar="N",
    type=click.IntRange(1, 65535),
    default=8000,
    show_default=True,
    help="Port to listen on.",
)
@click.option(
    "--tokens-file",
    metavar="F",
    type=click.Path(dir_okay=False),
    default=None,
    help="Bearer tokens, 'token=actor' or 'token=actor:role,role' per line (roles: viewer, "
    "operator, approver, admin). [default: $STEADYFLOW_API_TOKENS]",
)
@click.option(
    "--authorizer",
    "authorizer_spec",
    metavar="MODULE:OBJECT",
    default=None,
    help="The Authorizer that decides who may do what (or a class or function making one). "
    "[default: the roles in the tokens, token=actor:role,role; a token without roles "
    "may only read]",
)
@click.option(
    "--insecure-local",
    is_flag=True,
    default=False,
    help="Answer without authentication (actor 'local'); loopback --host only.",
)
@click.option("--log-level", metavar="LEVEL", type=click.Choice(LOG_LEVELS, case_sensitive=False),
              envvar="STEADYFLOW_LOG_LEVEL", show_envvar=True, default="INFO",
              show_default=True, help="Log level; logs go to stderr.")  # fmt: skip
def serve(
    modules: tuple[str, ...],
    store: StoreOptions,
    host: str,
    port: int,
    tokens_file: str | None,
    authorizer_spec: str | None,
    insecure_local: bool,
    log_level: str,
) -> None:
    """Serve the HTTP runtime API (docs/http.md) for the flows the MODULEs define.

    Every endpoint but /healthz needs 'Authorization: Bearer TOKEN'. What a token
    may do is --authorizer's to decide, or else its roles' (docs/security.md).
    """
    try:
        from sdk.http import BearerTokens
        from sdk.http._auth import is_loopback
    except ImportError as exc:
        raise click.ClickException(
            f"serve needs the http extra: pip install 'steadyflow[http]' ({exc})"
        ) from None
    if insecure_local and not is_loopback(host):
        raise click.UsageError(
            f"--insecure-local answers without authentication: it is refused on --host {host} "
            "(use 127.0.0.1 or ::1, or give tokens instead)"
        )
    try:
        tokens = BearerTokens.from_file(tokens_file) if tokens_file else BearerTokens.from_env()
    except InvalidArgument as exc:
        raise click.UsageError(str(exc)) from None
    if tokens is None and not insecure_local:
        raise click.UsageError(
            "no tokens to authenticate requests with: set STEADYFLOW_API_TOKENS='token=actor,...' "
            "or give --tokens-file (or, on your own machine, --insecure-local)"
        )
    authorizer = load_authorizer(authorizer_spec)
    if authorizer is not None and tokens is not None and tokens.roles:
        raise click.UsageError(
            f"--authorizer {authorizer_spec} decides who may do what, and the tokens carry "
            "roles too: give one or the other (drop the roles, or --authorizer)"
        )
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if insecure_local and authorizer is None and tokens is not None and tokens.roles:
        raise click.UsageError(
            "--insecure-local allows everything, so the roles the tokens carry would be "
            "ignored: unset the tokens, or give --authorizer"
        )
    if authorizer is None and tokens is not None and not insecure_local:
        authorizer = tokens.authorizer()
        readers = sorted(tokens.actors - tokens.roles.keys())
        if readers:
            logging.getLogger("steadyflow.http").warning(
                "tokens without roles may only read: %s (give roles, e.g. 'token=%s:operator'; "
                "docs/security.md)", ", ".join(readers), readers[0],
            )  # fmt: skip
    import_flow_modules(modules)
    asyncio.run(_serve(store, tokens, authorizer, insecure_local, host, port, log_level.lower()))


async def _serve(
    options: StoreOptions,
    tokens: Authenticate | None,
    authorizer: Authorizer | None,
    insecure_local: bool,
    host: str,
    port: int,
    log_level: str,
) -> None:
    """Run uvicorn until SIGTERM or SIGINT, then close the store."""
    import uvicorn

    from sdk.client._client import Client
    from sdk.http import create_app

    store = options.open()  # in this loop: a redis-py client belongs to the loop that made it
    try:
        client = Client(store, authorizer)
        app = create_app(client, authenticate=tokens, insecure_local=insecure_local)
        config = uvicorn.Config(
            app, host=host, port=port, log_level=log_level, lifespan="off",
            # open event streams are cut after this many seconds of a shutdown
            timeout_graceful_shutdown=5,
        )  # fmt: skip
        await _server_class()(config).serve()
    finally:
        await store.close()


def _server_class() -> type[uvicorn.Server]:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, stopped by SIGTERM or SIGINT with exit status 0 (as the
        worker is): uvicorn's own handlers raise the signal again once it has shut
        down, so the process would end killed by it."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._stop, sig)
            try:
                yield
            finally:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)

        def _stop(self, sig: signal.Signals) -> None:
            logging.getLogger("steadyflow.http").info("%s received: stopping", sig.name)
            if self.should_exit and sig is signal.SIGINT:
                self.force_exit = True  # a second Ctrl-C: do not wait for open streams
            self.should_exit = True

    return Server
