"""``steadyflow serve [MODULE...]``: the HTTP runtime API (`sdk.http`), served by uvicorn.

Imports the flow modules (so ``POST /v1/runs`` can check a start's arguments
against its flow), opens the store inside the server's event loop, and
serves until SIGTERM or SIGINT. Requests need a bearer token from
``$STEADYFLOW_API_TOKENS`` or ``--tokens-file``; ``--insecure-local`` (a
developer's machine) drops that, is refused unless ``--host`` is a loopback
address, and answers only to ``localhost``, addresses and ``--allowed-host``
names (DNS rebinding). How uvicorn is set up (proxy headers, the deadlines of
slow clients) is in `sdk.cli._uvicorn`. ``--session-idle`` and
``--session-lifetime`` bound a console sign-in (its session lives in this
process's memory: `sdk.http._sessions`).

Who may do what: ``--authorizer module:object`` (an `Authorizer`, or a class or
function that makes one), or else the roles the tokens carry
(``token=actor:role,role``: `sdk.RoleAuthorizer`; a token without roles may
only read). ``--insecure-local`` without ``--authorizer`` allows everything.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import attrs
import click

from sdk.cli._client import load_authorizer
from sdk.cli._options import CONTEXT_SETTINGS, EXIT_CODES, StoreOptions, store_options
from sdk.cli._worker import LOG_LEVELS, import_flow_modules
from sdk.errors import InvalidArgument

if TYPE_CHECKING:
    from sdk.client._clientcore import Authorizer
    from sdk.http import Authenticate

__all__ = ["serve"]

#: Addresses trusted to send X-Forwarded-* with --proxy-headers, unless told others.
DEFAULT_FORWARDED_ALLOW_IPS = "127.0.0.1,::1"
#: Seconds a client has to send a request's head (docs/http.md#limits).
DEFAULT_HEADER_TIMEOUT = 10.0
#: Seconds a client has to send a whole request, head and body.
DEFAULT_READ_TIMEOUT = 30.0
#: Live streams the server holds open at once (sdk.http._streams says why a bound).
DEFAULT_MAX_STREAMS = 1_000
#: Live streams one actor (a token, a console user) holds open at once.
DEFAULT_MAX_STREAMS_PER_ACTOR = 100


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
@click.option(
    "--proxy-headers",
    is_flag=True,
    default=False,
    help="Behind a proxy: take the scheme and client address from X-Forwarded-Proto and "
    "X-Forwarded-For, sent by --forwarded-allow-ips.",
)
@click.option(
    "--forwarded-allow-ips",
    metavar="IPS",
    default=None,
    help="Comma-separated addresses of the proxies trusted with --proxy-headers, or '*'. "
    f"[default: {DEFAULT_FORWARDED_ALLOW_IPS}]",
)
@click.option(
    "--header-timeout",
    metavar="S",
    type=click.FloatRange(0, min_open=True),
    default=DEFAULT_HEADER_TIMEOUT,
    show_default=True,
    help="Seconds a client has to send a request's head; then its connection is closed.",
)
@click.option(
    "--read-timeout",
    metavar="S",
    type=click.FloatRange(0, min_open=True),
    default=DEFAULT_READ_TIMEOUT,
    show_default=True,
    help="Seconds a client has to send a whole request, head and body.",
)
@click.option(
    "--session-idle",
    metavar="S",
    type=click.FloatRange(0, min_open=True),
    default=1800.0,
    show_default=True,
    help="Seconds a console sign-in lasts without use; then the browser signs in again.",
)
@click.option(
    "--session-lifetime",
    metavar="S",
    type=click.FloatRange(0, min_open=True),
    default=43200.0,
    show_default=True,
    help="Seconds a console sign-in lasts at most, however busy.",
)
@click.option(
    "--max-streams",
    metavar="N",
    type=click.IntRange(1),
    default=DEFAULT_MAX_STREAMS,
    show_default=True,
    help="Live event streams (API and console) the server holds open at once; one more is "
    "answered 429 with Retry-After.",
)
@click.option(
    "--max-streams-per-actor",
    metavar="N",
    type=click.IntRange(1),
    default=DEFAULT_MAX_STREAMS_PER_ACTOR,
    show_default=True,
    help="Live event streams one token (one console user) holds open at once.",
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
    allowed_hosts: tuple[str, ...],
    proxy_headers: bool,
    forwarded_allow_ips: str | None,
    header_timeout: float,
    read_timeout: float,
    session_idle: float,
    session_lifetime: float,
    max_streams: int,
    max_streams_per_actor: int,
    log_level: str,
) -> None:
    """Serve the HTTP runtime API (docs/http.md) for the flows the MODULEs define.

    Every endpoint but /healthz needs 'Authorization: Bearer TOKEN'. What a token
    may do is --authorizer's to decide, or else its roles' (docs/security.md).
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
    if forwarded_allow_ips is not None and not proxy_headers:
        raise click.UsageError(
            "--forwarded-allow-ips names the proxies trusted with --proxy-headers: "
            "add --proxy-headers"
        )
    if read_timeout < header_timeout:
        raise click.UsageError(
            f"--read-timeout ({read_timeout:g} s) bounds the whole request, head included: "
            f"it cannot be shorter than --header-timeout ({header_timeout:g} s)"
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
    listen = Listen(
        host, port, proxy_headers, forwarded_allow_ips or DEFAULT_FORWARDED_ALLOW_IPS,
        header_timeout, read_timeout, session_idle, session_lifetime, max_streams,
        max_streams_per_actor,
    )  # fmt: skip
    asyncio.run(
        _serve(store, tokens, authorizer, insecure_local, allowed_hosts, listen, log_level.lower())
    )


@attrs.frozen
class Listen:
    """How the server listens: the address, the proxy in front, the deadlines of slow
    clients, how long a console sign-in lasts, the bounds of live streams."""

    host: str
    port: int
    proxy_headers: bool
    forwarded_allow_ips: str
    header_timeout: float
    read_timeout: float
    session_idle: float
    session_lifetime: float
    max_streams: int
    max_streams_per_actor: int


async def _serve(
    options: StoreOptions,
    tokens: Authenticate | None,
    authorizer: Authorizer | None,
    insecure_local: bool,
    allowed_hosts: tuple[str, ...],
    listen: Listen,
    log_level: str,
) -> None:
    """Run uvicorn until SIGTERM or SIGINT, then close the store."""
    from sdk.cli._uvicorn import server
    from sdk.client._client import Client
    from sdk.http import create_app

    store = options.open()  # in this loop: a redis-py client belongs to the loop that made it
    try:
        app = create_app(
            Client(store, authorizer), authenticate=tokens, insecure_local=insecure_local,
            # given names are checked in any mode; with --insecure-local, the defaults are
            allowed_hosts=allowed_hosts or None,
            session_idle=listen.session_idle, session_lifetime=listen.session_lifetime,
            max_streams=listen.max_streams, max_streams_per_actor=listen.max_streams_per_actor,
        )  # fmt: skip
        await server(
            app, host=listen.host, port=listen.port, log_level=log_level,
            proxy_headers=listen.proxy_headers, forwarded_allow_ips=listen.forwarded_allow_ips,
            header_timeout=listen.header_timeout, read_timeout=listen.read_timeout,
        ).serve()  # fmt: skip
    finally:
        await store.close()
