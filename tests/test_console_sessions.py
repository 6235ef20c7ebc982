"""The console's sign-in sessions (sdk.http._sessions): the cookie holds an opaque id
that expires, not the API token; sign-out ends it for good; a session grants what
its token grants now, and a restart ends it."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request

from sdk import Client
from sdk.errors import InvalidArgument
from sdk.http import DEFAULT_SESSION_IDLE, DEFAULT_SESSION_LIFETIME, BearerTokens, create_app
from sdk.http._sessions import MAX_SESSIONS_PER_ACTOR, Sessions
from stores.redis import RedisStore
from testing import FakeClock
from tests.test_console import ALICE, BOB, TOKENS, csrf_of

COOKIE = "steadyflow_session"


@pytest.fixture(name="clock")
def clock_fixture() -> FakeClock:
    return FakeClock()


@pytest.fixture(name="client")
def client_fixture(memory_store: RedisStore, clock: FakeClock) -> Client:
    return Client(memory_store, clock=clock)


@contextlib.asynccontextmanager
async def browser(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on `app`, keeping cookies like a browser."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sf") as http:
        yield http


async def sign_in(http: httpx.AsyncClient, token: str = ALICE) -> str:
    """Sign in through the form; the session id the cookie holds."""
    answer = await http.post("/ui/signin", data={"token": token, "next": "/ui/runs"})
    assert answer.status_code == 303, answer.text
    return str(http.cookies[COOKIE])


async def replay(
    app: Starlette, session_id: str, method: str = "GET", path: str = "/ui/runs", **kw: Any
) -> httpx.Response:
    """A request of another client (a thief's) that sends this cookie, and only it."""
    headers = {"Cookie": f"{COOKIE}={session_id}", **kw.pop("headers", {})}
    async with browser(app) as http:
        return await http.request(method, path, headers=headers, **kw)


async def signed_in_as(app: Starlette, session_id: str) -> str | None:
    """Who a browser that sends only this cookie is, or None (sent to sign in)."""
    answer = await replay(app, session_id)
    if answer.status_code == 303:
        assert "/ui/signin" in answer.headers["location"]
        return None
    assert answer.status_code == 200, answer.text
    return answer.text.split("<strong data-actor>", 1)[1].split("</strong>", 1)[0]


def derived(token: str) -> list[str]:
    """What a cookie could hold that is made of the token (a thief could replay it)."""
    raw = token.encode()
    return [token, raw.hex(), hashlib.sha256(raw).hexdigest(),
            base64.urlsafe_b64encode(raw).decode().rstrip("="),
            base64.urlsafe_b64encode(hashlib.sha256(raw).digest()).decode().rstrip("="),
            base64.b64encode(raw).decode().rstrip("=")]  # fmt: skip


# -- the cookie -------------------------------------------------------------------------------


async def test_the_cookie_holds_a_random_session_id_never_the_token(client: Client) -> None:
    tokens = BearerTokens(TOKENS)
    app = create_app(client, authenticate=tokens)
    async with browser(app) as http:
        answer = await http.post("/ui/signin", data={"token": ALICE})
        cookie = answer.headers["set-cookie"]
        first = str(http.cookies[COOKIE])
        second = await sign_in(http)
        # the id is not a credential of the API
        api = await http.get("/v1/runs", headers={"Authorization": f"Bearer {second}"})

    assert cookie.startswith(f"{COOKIE}={first};")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert "secure" not in cookie.lower()  # plain http here; https: tests/test_http_serve.py
    assert "max-age" not in cookie.lower() and "expires" not in cookie.lower()  # a browser session
    for value in (first, second):
        assert len(value) >= 43  # 32 random bytes
        assert not any(part in value or value in part for part in derived(ALICE)), value
    assert ALICE[:16] not in cookie
    assert first != second  # a sign-in opens a new session...
    assert await signed_in_as(app, second) == "alice"
    assert await signed_in_as(app, first) is None  # ...and ends the one the browser brought
    assert api.status_code == 401
    # another server with the same tokens knows nothing of it
    assert await signed_in_as(create_app(client, authenticate=tokens), second) is None


async def test_the_signin_page_says_how_long_a_session_lasts(client: Client) -> None:
    app = create_app(client, authenticate=BearerTokens(TOKENS), session_idle=600,
                     session_lifetime=8 * 3600)  # fmt: skip
    async with browser(app) as http:
        form = await http.get("/ui/signin")

    assert "after 10 minutes\nwithout use, or 8 hours after signing in" in form.text
    assert (DEFAULT_SESSION_IDLE, DEFAULT_SESSION_LIFETIME) == (1800.0, 43200.0)


async def test_signing_in_removes_the_cookie_that_held_the_token_before(client: Client) -> None:
    app = create_app(client, authenticate=BearerTokens(TOKENS))
    async with browser(app) as http:
        http.cookies.set("steadyflow_token", ALICE, domain="sf.local", path="/ui")
        answer = await http.post("/ui/signin", data={"token": ALICE})
        assert "steadyflow_token" not in http.cookies
    async with browser(app) as http:  # and the old cookie alone signs no one in any more
        legacy = await http.get("/ui/runs", headers={"Cookie": f"steadyflow_token={ALICE}"})

    assert 'steadyflow_token=""' in answer.headers["set-cookie"]
    assert legacy.status_code == 303


# -- signing out --------------------------------------------------------------------------------


async def test_signing_out_ends_the_session_even_for_a_replayed_cookie(client: Client) -> None:
    app = create_app(client, authenticate=BearerTokens(TOKENS))
    async with browser(app) as http:
        stolen = await sign_in(http)
        csrf = csrf_of((await http.get("/ui/runs")).text)
        out = await http.post("/ui/signout", data={"csrf": csrf})
        assert COOKIE not in http.cookies
    read = await replay(app, stolen)
    posted = await replay(app, stolen, "POST", "/ui/runs/x/cancel",
                          data={"csrf": csrf, "confirm": "yes"})  # fmt: skip
    stream = await replay(app, stolen, path="/ui/live", headers={"Accept": "text/event-stream"})
    unknown = await replay(app, stolen, path="/ui/nothing")

    assert out.status_code == 303 and out.headers["location"] == "/ui/signin"
    assert "Max-Age=0" in out.headers["set-cookie"]
    assert read.status_code == 303 and read.headers["location"].startswith("/ui/signin?next=")
    assert posted.status_code == 401 and stream.status_code == 401
    assert unknown.status_code == 401  # not even what exists


async def test_a_live_stream_ends_when_its_session_does(client: Client) -> None:
    app = create_app(client, authenticate=BearerTokens(TOKENS), sse_keepalive=0.05)
    async with browser(app) as http:
        await sign_in(http)
        csrf = csrf_of((await http.get("/ui/runs")).text)
        # httpx's ASGI transport answers once the app's answer ends: the stream must end
        following = asyncio.create_task(
            http.get("/ui/live", headers={"Accept": "text/event-stream"})
        )
        await asyncio.sleep(0.3)
        assert not following.done()
        await http.post("/ui/signout", data={"csrf": csrf})
        stream = await asyncio.wait_for(following, 5)

    assert stream.status_code == 200 and stream.text.startswith("retry: 2000")


# -- expiry -------------------------------------------------------------------------------------


async def test_a_session_unused_for_its_idle_time_is_refused(
    client: Client, clock: FakeClock
) -> None:
    app = create_app(client, authenticate=BearerTokens(TOKENS), session_idle=60,
                     session_lifetime=3600)  # fmt: skip
    async with browser(app) as http:
        session_id = await sign_in(http)
        clock.advance(59)
        used = await signed_in_as(app, session_id)  # a use: the idle time starts again
        clock.advance(59)
        refreshed = await http.get("/ui/runs", headers={"X-Steadyflow-Background": "1"})
        clock.advance(2)  # 61 s since the person's last request; the page's refresh is none
        expired = await signed_in_as(app, session_id)
        clock.advance(1)
        later = await http.get("/ui/runs")

    assert used == "alice"
    assert refreshed.status_code == 200
    assert expired is None
    assert later.status_code == 303  # the browser too: sign in again


async def test_a_session_ends_at_its_lifetime_however_busy(
    client: Client, clock: FakeClock
) -> None:
    app = create_app(client, authenticate=BearerTokens(TOKENS), session_idle=60,
                     session_lifetime=300)  # fmt: skip
    async with browser(app) as http:
        session_id = await sign_in(http)
        seen = []
        for _ in range(6):
            clock.advance(50)
            seen.append(await signed_in_as(app, session_id))
        again = await sign_in(http)  # a new sign-in: a new lifetime

    assert seen == ["alice"] * 5 + [None]  # at 300 s
    assert await signed_in_as(app, again) == "alice"


async def test_an_expired_sessions_live_stream_is_refused(client: Client, clock: FakeClock) -> None:
    app = create_app(client, authenticate=BearerTokens(TOKENS), session_idle=60)
    async with browser(app) as http:
        await sign_in(http)
        clock.advance(60)
        stream = await http.get("/ui/live", headers={"Accept": "text/event-stream"})

    assert stream.status_code == 401


# -- what the session grants ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "after",
    [
        {BOB: "bob"},  # alice's token removed from the tokens file
        {ALICE: "alice:viewer", BOB: "bob"},  # her roles changed
        {ALICE: "alice:operator,approver", BOB: "bob"},  # the same file, read again
    ],
)
async def test_a_restart_ends_every_session(
    memory_store: RedisStore, after: dict[str, str]
) -> None:
    before = BearerTokens.parse(f"{ALICE}=alice:operator,approver,{BOB}=bob", "before")
    app = create_app(Client(memory_store, before.authorizer()), authenticate=before)
    async with browser(app) as http:
        session_id = await sign_in(http)
    assert await signed_in_as(app, session_id) == "alice"
    tokens = BearerTokens.parse(",".join(f"{t}={a}" for t, a in after.items()), "after")
    restarted = create_app(Client(memory_store, tokens.authorizer()), authenticate=tokens)
    replayed = await signed_in_as(restarted, session_id)
    async with browser(restarted) as http:
        signin = await http.post("/ui/signin", data={"token": ALICE})

    assert replayed is None
    assert signin.status_code == (303 if ALICE in after else 401)


async def test_a_session_grants_what_its_token_grants_now(client: Client) -> None:
    known = dict(TOKENS)

    def authenticate(request: Request) -> str | None:  # a table the operator edits live
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return known.get(token) if scheme == "Bearer" else None

    app = create_app(client, authenticate=authenticate)
    async with browser(app) as http:
        alices = await sign_in(http)
    async with browser(app) as http:
        bobs = await sign_in(http, BOB)
    known[BOB] = "mallory"  # the token now names someone else
    remapped = await signed_in_as(app, bobs)
    del known[ALICE]  # the token is revoked
    revoked = await signed_in_as(app, alices)
    known[ALICE], known[BOB] = "alice", "bob"  # and given back: the sessions stay ended

    assert remapped is None and revoked is None
    assert await signed_in_as(app, alices) is None
    assert await signed_in_as(app, bobs) is None


async def test_an_authorization_header_wins_over_the_cookie(client: Client) -> None:
    async with browser(create_app(client, authenticate=BearerTokens(TOKENS))) as http:
        await sign_in(http)
        page = await http.get("/ui/runs", headers={"Authorization": f"Bearer {BOB}"})
        wrong = await http.get("/ui/runs", headers={"Authorization": "Bearer not-a-token-at-all"})

    assert "<strong data-actor>bob</strong>" in page.text
    assert wrong.status_code == 303


# -- the table ------------------------------------------------------------------------------------


def test_the_table_is_bounded_and_never_shows_an_id_or_a_token(clock: FakeClock) -> None:
    sessions = Sessions(60, 3600, clock)
    ids = [sessions.open("alice", ALICE) for _ in range(MAX_SESSIONS_PER_ACTOR + 1)]
    bobs = sessions.open("bob", BOB)
    shown = repr(sessions) + repr(sessions.get(ids[-1]))

    assert len(sessions) == MAX_SESSIONS_PER_ACTOR + 1  # alice's oldest went
    assert sessions.get(ids[0]) is None and sessions.get(ids[1]) is not None
    assert ALICE not in shown and ids[-1] not in shown
    clock.advance(61)
    sessions.open("carol", "carol-token-0123456789")
    assert len(sessions) == 1  # a sign-in forgets the expired ones
    assert sessions.get(bobs) is None


@pytest.mark.parametrize(
    ("idle", "lifetime"), [(0, 3600), (60, -1), (float("nan"), 60), ("30", 60)]
)
def test_create_app_refuses_a_session_time_that_is_not_positive(
    client: Client, idle: Any, lifetime: Any
) -> None:
    with pytest.raises(InvalidArgument, match=r"session_(idle|lifetime)"):
        create_app(client, authenticate=BearerTokens(TOKENS), session_idle=idle,
                   session_lifetime=lifetime)  # fmt: skip


def test_serve_takes_the_apps_session_times_by_default() -> None:
    from sdk.cli._serve import serve

    defaults = {p.name: p.default for p in serve.params}
    assert defaults["session_idle"] == DEFAULT_SESSION_IDLE
    assert defaults["session_lifetime"] == DEFAULT_SESSION_LIFETIME
