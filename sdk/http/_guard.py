"""The middleware every request passes before routing: host names, cross-site
requests, media types, and the headers every answer carries.

- **Host names** (`HostNames`): a server that answers without credentials
  (``--insecure-local``) is open to DNS rebinding: a page of
  ``attacker.example`` whose name now resolves to 127.0.0.1 reaches it as its
  own origin, with ``Host: attacker.example``. Such a request is refused
  (403) unless its host is an address, ``localhost`` (or a name under it), or
  a name the server was given (``--allowed-host``).
- **Cross-site requests**: a browser sends ``Sec-Fetch-Site`` and ``Origin``
  with what it posts; a request that changes something (any method but GET,
  HEAD and OPTIONS) and comes from another site is refused (403), so a
  credential that travels by itself (a proxy that adds the bearer header,
  ``--insecure-local``) is not used by another site's form. A request without
  those headers comes from no browser and is let through.
- **Media types**: a body sent to the API must be ``application/json`` (415
  otherwise): a browser sends that type to another origin only after a CORS
  preflight, which this server never grants, so no other site's page can send
  the API a body, whatever its credentials.
- **Headers**: every answer says ``X-Content-Type-Options: nosniff``; every
  answer but the console's static files says ``Cache-Control: no-store``
  (runs, exports and pages hold arguments and results).

The console (``/ui``) checks its own form posts (CSRF tokens, ``Origin``):
only the host names and the headers apply to it here.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sdk.errors import InvalidArgument
from sdk.http._problems import ApiError, ErrorCode, problem_response

__all__ = ["CONSOLE_PATH", "Guard", "HostNames", "cross_site"]

log = logging.getLogger("steadyflow.http")

#: Where `create_app` mounts the console.
CONSOLE_PATH = "/ui"
#: Methods that read: no cross-site check (a page of another site cannot read the answer).
_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
#: A host name as ``--allowed-host`` takes it; a leading dot allows the names under it.
_NAME = re.compile(r"^\.?[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?$")


class HostNames:
    """The host names a server answers to (the ``Host`` header, without its port).

    Always allowed: addresses (``127.0.0.1``, ``[::1]``, ``10.0.0.7``: DNS
    rebinding needs a name, and a page whose address is the server's is the
    server's own), ``localhost`` and the names under it (``*.localhost``
    resolves to loopback in browsers, without DNS). Then the given names: a name
    allows itself, ``.example.com`` allows ``example.com`` and every name under it.

    Args:
        names: the names to allow besides those (compared without case).

    Raises:
        InvalidArgument: a name that is not a host name (a port, a scheme, a path).

    Example::

        create_app(client, insecure_local=True, allowed_hosts=["devbox.internal"])
    """

    def __init__(self, names: Iterable[str] = ()) -> None:
        exact, suffixes = {"localhost"}, [".localhost"]
        for given in names:
            name = given.strip().lower().rstrip(".") if isinstance(given, str) else ""
            if not _NAME.match(name) and not _address(name):
                raise InvalidArgument(
                    f"allowed host {given!r} is not a host name (give the name alone, without "
                    "scheme, port or path: 'api.example.com', or '.example.com' for the names "
                    "under it)"
                )
            if name.startswith("."):
                exact.add(name[1:])
                suffixes.append(name)
            else:
                exact.add(name)
        self._exact = frozenset(exact)
        self._suffixes = tuple(suffixes)

    def __repr__(self) -> str:
        return f"HostNames({sorted(self._exact)!r})"

    def allows(self, host: str) -> bool:
        """Whether a ``Host`` header's value (with or without its port) is allowed."""
        name = _without_port(host.strip().lower()).rstrip(".")
        if not name:
            return False
        return _address(name) or name in self._exact or name.endswith(self._suffixes)


def _without_port(host: str) -> str:
    if host.startswith("["):  # [v6] or [v6]:port
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _address(name: str) -> bool:
    try:
        ipaddress.ip_address(name[1:-1] if name.startswith("[") else name)
    except ValueError:
        return False
    return True


def cross_site(headers: Headers) -> str | None:
    """Why a browser's request comes from another site, or None (same origin, or no browser).

    ``Origin: null`` (a sandboxed frame, a ``file:`` page, a redirect from
    elsewhere; never a page of this server, whose referrer policy keeps its
    origin) is refused. ``Sec-Fetch-Site`` is set by the browser and cannot be
    forged by a page: ``cross-site`` and ``same-site`` (a sibling subdomain,
    another port) are refused. Without it (an older browser), ``Origin`` must
    name this server's host. A request with neither comes from no browser.
    """
    origin = headers.get("origin")
    if origin is not None and origin.strip().lower() == "null":
        return "Origin: null"
    site = headers.get("sec-fetch-site", "").strip().lower()
    if site in ("cross-site", "same-site"):
        return f"Sec-Fetch-Site: {site}"
    if origin is None or site in ("same-origin", "none"):  # "none": the user's own navigation
        return None
    if urlsplit(origin.strip()).netloc.lower() != headers.get("host", "").lower():
        return f"Origin: {origin[:100]}"
    return None


def _route_path(scope: Scope) -> str:
    """The path inside the app (without the prefix it is mounted under)."""
    path, root = str(scope["path"]), str(scope.get("root_path", ""))
    return path[len(root) :] if root and path.startswith(root + "/") else path


def _is_json(headers: Headers) -> bool:
    media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return media == "application/json"


def _has_body(headers: Headers) -> bool:
    length = headers.get("content-length", "").strip()
    return "transfer-encoding" in headers or (length not in ("", "0"))


class Guard:
    """The ASGI middleware `create_app` puts in front of its routes (the module says what it
    checks and adds).

    Args:
        app: the app behind it.
        hosts: the host names to allow (None: any).
    """

    def __init__(self, app: ASGIApp, hosts: HostNames | None) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = _route_path(scope)
        cache = not path.startswith(f"{CONSOLE_PATH}/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["X-Content-Type-Options"] = "nosniff"
                if cache:
                    headers["Cache-Control"] = "no-store"
            await send(message)

        refusal = self._refusal(scope, path)
        if refusal is None:
            await self.app(scope, receive, send_with_headers)
        else:
            await problem_response(refusal)(scope, receive, send_with_headers)

    def _refusal(self, scope: Scope, path: str) -> ApiError | None:
        headers = Headers(scope=scope)
        method = str(scope["method"])
        if self.hosts is not None and not self.hosts.allows(headers.get("host", "")):
            host = headers.get("host", "")[:100]
            log.info("refused %s %s for host %r (not an allowed host)", method, path, host)
            return ApiError(
                ErrorCode.FORBIDDEN,
                f"this server does not answer to the host name {host!r}: browse to it by "
                "localhost or its address, or allow the name (steadyflow serve --allowed-host "
                "NAME, create_app(allowed_hosts=...))",
            )
        if path == CONSOLE_PATH or path.startswith(CONSOLE_PATH + "/"):
            return None  # the console checks its own posts (CSRF tokens)
        why = None if method in _SAFE else cross_site(headers)
        if why is not None:
            log.info("refused a cross-site request %s %s (%s)", method, path, why)
            return ApiError(
                ErrorCode.FORBIDDEN,
                f"a {method} from another site is refused ({why}): the API takes changes "
                "from its own origin and from clients that are not browsers",
            )
        if _has_body(headers) and not _is_json(headers):
            given = headers.get("content-type", "")[:100] or "none"
            return ApiError(
                ErrorCode.UNSUPPORTED_MEDIA_TYPE,
                f"a request body must be JSON with 'Content-Type: application/json' "
                f"(the request's type: {given})",
            )
        return None
