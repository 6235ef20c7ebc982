"""Who is looking at the console: the API's authentication, from a session or a header.

The console accepts exactly the credentials of the HTTP API (one token works
for both): an ``Authorization: Bearer TOKEN`` header (a reverse proxy or a
script can send it), or the same token typed into the sign-in form. The form
does not keep the token in the browser: it opens a session
(`sdk.http._sessions.Sessions`, in the server's memory) and the cookie holds
only its random id, which expires (idle, and at most a lifetime), is
forgotten at sign-out, and means nothing to any other server. The cookie is
``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's page
sends it) and ``Secure`` behind HTTPS. On every request the session's token
is checked again by the API's own `authenticate` hook, on a copy of the
request that carries it as a bearer header, so a custom hook
(`create_app(authenticate=...)`) decides for the console too, and a token it
no longer knows ends the session.

Every form post also carries a CSRF token: an HMAC of the actor under a key
made when the app starts, checked in constant time. It is required whatever
the credential: a proxy that adds the bearer header would otherwise make a
cross-site form post authenticated. A post from another site (its
``Sec-Fetch-Site`` or ``Origin``, ``Origin: null`` included) is refused as well.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from urllib.parse import parse_qsl, quote

from starlette.requests import Request

from sdk.http._guard import cross_site
from sdk.http._problems import ApiError
from sdk.http._routing import Settings, authenticate, read_body

__all__ = ["BACKGROUND", "COOKIE", "LEGACY_COOKIE", "CsrfKey", "actor_of", "csrf_ok", "form_of",
           "safe_next", "session_of", "signed_in", "signin_url", "still_signed_in", "token_actor",
           "ui_of"]  # fmt: skip

#: The cookie that keeps a signed-in browser's session id (never a token).
COOKIE = "steadyflow_session"
#: The cookie that held the token itself before sessions: read no more, removed at sign-in.
LEGACY_COOKIE = "steadyflow_token"
#: The header the console's script sends on the requests it makes by itself (live
#: refreshes): they are not the person's use, so a session's idle time goes on.
BACKGROUND = "x-steadyflow-background"


class CsrfKey:
    """The console's per-app secret: the key of its CSRF tokens."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def csrf(self, actor: str) -> str:
        """The CSRF token of `actor`'s forms."""
        return hmac.new(self._key, actor.encode(), hashlib.sha256).hexdigest()

    def check(self, actor: str, given: str) -> bool:
        """Whether `given` is `actor`'s CSRF token (constant time)."""
        return hmac.compare_digest(self.csrf(actor), given)


def _with_bearer(request: Request, token: str) -> Request:
    """A copy of `request` that carries `token` as its ``Authorization`` header."""
    headers = [(k, v) for k, v in request.scope["headers"] if k != b"authorization"]
    headers.append((b"authorization", f"Bearer {token}".encode("latin-1", "replace")))
    return Request({**request.scope, "headers": headers})


def session_of(request: Request) -> str | None:
    """The session id of the browser's cookie, if it sent one."""
    session_id = request.cookies.get(COOKIE, "").strip()
    return session_id or None


async def token_actor(request: Request, settings: Settings, token: str) -> str | None:
    """The actor `token` names, as the API's authenticator judges it, or None."""
    try:
        return await authenticate(_with_bearer(request, token), settings)
    except ApiError:
        return None


async def signed_in(request: Request, settings: Settings, *, touch: bool = True) -> str:
    """The signed-in actor; `ApiError` (401, or 403 off loopback) when there is none.

    A request with an ``Authorization`` header is judged by it alone; else the
    cookie's session is, if it is open and its token still names the actor who
    signed in (a token the authenticator no longer knows, or maps to someone
    else, ends the session); else `insecure_local` may name the actor. `touch`
    counts the request as the person's use of the session.
    """
    session_id = None if "authorization" in request.headers else session_of(request)
    if session_id is not None:
        held = settings.sessions.get(session_id, touch=touch)
        if held is not None:
            if await token_actor(request, settings, held.token) == held.actor:
                return held.actor
            settings.sessions.close(session_id)
    return await authenticate(request, settings)


async def actor_of(request: Request, settings: Settings, *, touch: bool = True) -> str | None:
    """The signed-in actor, or None (then the console asks to sign in)."""
    try:
        return await signed_in(request, settings, touch=touch)
    except ApiError:
        return None


def still_signed_in(request: Request, settings: Settings) -> Callable[[], bool]:
    """For an answer that lasts (an event stream): whether the session the request
    came with is still open (always, for a request that came without one), so
    the answer ends at sign-out or expiry."""
    session_id = None if "authorization" in request.headers else session_of(request)
    sessions = settings.sessions
    if session_id is None or sessions.get(session_id, touch=False) is None:
        return lambda: True
    return lambda: sessions.get(session_id, touch=False) is not None


def csrf_ok(request: Request, key: CsrfKey, actor: str, given: str) -> bool:
    """Whether a form post is the console's own: right CSRF token, same origin."""
    if cross_site(request.headers) is not None:
        return False
    return key.check(actor, given)


def ui_of(request: Request) -> str:
    """The console's base path: where the app mounted it (``/ui``, or under a prefix)."""
    return str(request.scope.get("root_path", ""))


def safe_next(request: Request, target: str | None) -> str:
    """Where to go after signing in: a console path only (never another site)."""
    ui = ui_of(request) + "/"
    if target and target.startswith(ui) and not target.startswith("//") and "\\" not in target:
        return target
    return ui + "runs"


def signin_url(request: Request) -> str:
    """The sign-in page, coming back to this page afterwards."""
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    ui = ui_of(request)
    return f"{ui}/signin?next={quote(here, safe='')}"


async def form_of(request: Request, settings: Settings) -> dict[str, str]:
    """A form post's fields (``application/x-www-form-urlencoded``, bounded like an
    API body); the first value of a repeated field. No multipart: the console's
    forms send none, and this needs no extra dependency."""
    raw = await read_body(request, settings.max_body)
    pairs = parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True)
    fields: dict[str, str] = {}
    for key, value in pairs:
        fields.setdefault(key, value)
    return fields
