"""``steadyflow serve [MODULE...]``: the HTTP runtime API (`sdk.http`), served by uvicorn.

Imports the flow modules (so ``POST /v1/runs`` can check a start's arguments
against its flow), opens the store inside the server's event loop, and
serves until SIGTERM or SIGINT. Requests need a bearer token from
``$STEADYFLOW_API_TOKENS`` or ``--tokens-file``; ``--insecure-local`` (a
developer's machine) drops that, is refused unless ``--host`` is a loopback
address, and answers only to ``localhost``, addresses and ``--allowed-host``
names (DNS rebinding).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Iterator
from typing import TYPE_CHECKING

import click

from sdk.cli._options import CONTEXT_SETTINGS, EXIT_CODES, StoreOptions, store_options
from sdk.cli._worker import LOG_LEVELS, import_flow_modules
from sdk.errors import InvalidArgument

if TYPE_CHECKING:
    import uvicorn

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
    help="Bearer tokens, 'token=actor' per line. [default: $STEADYFLOW_API_TOKENS]",
)
@click.option(
    "--insecure-local",
    is_flag=True,
    default=False,
    help="Answer without authentication (actor 'local'); loopback --host only, and only for "
    "localhost, addresses and --allowed-host names.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    metavar="NAME",
    multiple=True,
    help="A host name the server answers to besides localhost and addresses "
    "('.example.com': the names under it too); repeatable. Any other Host is refused (403). "
    "[default: any with tokens; none with --insecure-local]",
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
    insecure_local: bool,
    allowed_hosts: tuple[str, ...],
    log_level: str,
) -> None:
    """Serve the HTTP runtime API (docs/http.md) for the flows the MODULEs define.

    Every endpoint but /healthz needs 'Authorization: Bearer TOKEN'.
    """
    try:
        from sdk.http import BearerTokens
        from sdk.http._auth import is_loopback
        from sdk.http._guard import HostNames
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
        HostNames(allowed_hosts)  # a bad name is a usage error, before anything starts
        tokens = BearerTokens.from_file(tokens_file) if tokens_file else BearerTokens.from_env()
    except InvalidArgument as exc:
        raise click.UsageError(str(exc)) from None
    if tokens is None and not insecure_local:
        raise click.UsageError(
            "no tokens to authenticate requests with: set STEADYFLOW_API_TOKENS='token=actor,...' "
            "or give --tokens-file (or, on your own machine, --insecure-local)"
        )
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    import_flow_modules(modules)
    asyncio.run(_serve(store, tokens, insecure_local, allowed_hosts, host, port, log_level.lower()))


async def _serve(
    options: StoreOptions,
    tokens: Authenticate | None,
    insecure_local: bool,
    allowed_hosts: tuple[str, ...],
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
        app = create_app(
            Client(store), authenticate=tokens, insecure_local=insecure_local,
            # given names are checked in any mode; with --insecure-local, the defaults are
            allowed_hosts=allowed_hosts or None,
        )  # fmt: skip
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
