"""What every request passes before its route (sdk/http/_guard.py), through httpx's ASGI
transport: bodies must be JSON, changes from another site are refused, a server answers
to its host names only, every answer says nosniff and no-store, and a stranger learns
nothing of what exists (401 before 404 or 405). The real server's side (slow clients,
proxy headers, DNS rebinding) is in test_http_serve.py, a real browser's in
test_http_browser.py."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from sdk import Client, RunStatus
from sdk.errors import InvalidArgument
from sdk.http import BearerTokens, create_app
from sdk.http._guard import HostNames
from stores.redis import RedisStore
from tests.test_console import ALICE, TOKENS
from tests.test_http import HEADERS, TOKEN, problem


def http_of(app: Any, base: str = "http://localhost:8000") -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 5000))
    return httpx.AsyncClient(transport=transport, base_url=base)


@pytest.fixture(name="client")
def client_fixture(memory_store: RedisStore) -> Client:
    return Client(memory_store)


async def pending(client: Client, run_id: str) -> str:
    await client.start("tests.http.signalled", run_id=run_id)
    return run_id


async def test_a_body_that_is_not_json_is_refused_with_415_and_changes_nothing(
    client: Client,
) -> None:
    run_id = await pending(client, "victim")
    body = b'{"reason": "gone"}'
    async with http_of(create_app(client, authenticate=BearerTokens({TOKEN: "ops"}))) as http:
        refused = [
            await http.post(f"/v1/runs/{run_id}/cancel", content=body, headers={
                **HEADERS, **({"Content-Type": media} if media else {})
            })
            for media in ("text/plain", "application/x-www-form-urlencoded", "", "text/json")
        ]  # fmt: skip
        unauthenticated = await http.post(f"/v1/runs/{run_id}/cancel", content=body)
        assert (await client.get(run_id)).status is RunStatus.PENDING
        with_charset = await http.post(
            f"/v1/runs/{run_id}/cancel",
            content=body,
            headers={**HEADERS, "Content-Type": "application/json; charset=utf-8"},
        )

    for answer in refused:
        detail = problem(answer, 415, "unsupported_media_type")["detail"]
        assert "Content-Type: application/json" in detail
    problem(unauthenticated, 415, "unsupported_media_type")  # before anything else is read
    assert with_charset.status_code == 200, with_charset.text
    assert (await client.get(run_id)).status is RunStatus.CANCELED


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
        {"Sec-Fetch-Site": "same-site", "Origin": "http://other.localhost:8000"},
        {"Origin": "https://evil.example"},  # a browser that sends no Sec-Fetch-Site
        {"Origin": "null"},  # a sandboxed frame, a file: page
        {"Sec-Fetch-Site": "same-origin", "Origin": "null"},
    ],
)
@pytest.mark.parametrize("credential", ["insecure-local", "a proxy's bearer header"])
async def test_a_change_from_another_site_is_refused_whatever_the_credential(
    client: Client, headers: dict[str, str], credential: str
) -> None:
    run_id = await pending(client, "victim")
    if credential == "insecure-local":
        app, sent = create_app(client, insecure_local=True), headers
    else:  # the proxy in front adds the header to whatever the browser sends
        app, sent = create_app(client, authenticate=BearerTokens({TOKEN: "ops"})), {
            **headers, **HEADERS
        }  # fmt: skip
    async with http_of(app) as http:
        cancel = await http.post(f"/v1/runs/{run_id}/cancel", json={"reason": "csrf"}, headers=sent)
        start = await http.post("/v1/runs", json={"flow": "tests.http.greet"}, headers=sent)
        delete = await http.delete(f"/v1/runs/{run_id}", headers=sent)
        read = await http.get(f"/v1/runs/{run_id}", headers=sent)  # reads are not changes

    for answer in (cancel, start, delete):
        assert "from another site is refused" in problem(answer, 403, "forbidden")["detail"]
    assert read.status_code == 200
    assert [r.run_id for r in await client.list_runs()] == [run_id]
    assert (await client.get(run_id)).status is RunStatus.PENDING


async def test_same_origin_browsers_and_clients_that_are_not_browsers_may_change_things(
    client: Client,
) -> None:
    await pending(client, "a")
    await pending(client, "b")
    await pending(client, "c")
    async with http_of(create_app(client, insecure_local=True)) as http:
        fetched = await http.post("/v1/runs/a/cancel", json={"reason": "x"}, headers={
            "Sec-Fetch-Site": "same-origin", "Origin": "http://localhost:8000"
        })  # fmt: skip
        older_browser = await http.post("/v1/runs/b/cancel", json={"reason": "x"},
                                        headers={"Origin": "http://localhost:8000"})  # fmt: skip
        curl = await http.post("/v1/runs/c/cancel", json={"reason": "x"})

    assert [a.status_code for a in (fetched, older_browser, curl)] == [200, 200, 200]


@pytest.mark.parametrize(
    ("allowed", "host", "answered"),
    [
        (None, "localhost:8000", True),
        (None, "127.0.0.1:8000", True),
        (None, "[::1]:8000", True),
        (None, "127.0.0.2", True),
        (None, "app.localhost:8000", True),
        (None, "attacker.example", False),
        (None, "attacker.example:8000", False),
        (None, "localhost.attacker.example", False),
        (None, "", False),
        (["devbox.internal"], "DevBox.Internal:8000", True),
        (["devbox.internal"], "evil.devbox.internal", False),
        ([".example.com"], "ops.example.com", True),
        ([".example.com"], "example.com", True),
        ([".example.com"], "example.com.evil.net", False),
    ],
)
async def test_an_insecure_local_server_answers_to_its_host_names_only(
    client: Client, allowed: list[str] | None, host: str, answered: bool
) -> None:
    """DNS rebinding: a page of attacker.example whose name now resolves to 127.0.0.1."""
    app = create_app(client, insecure_local=True, allowed_hosts=allowed)
    async with http_of(app) as http:
        answer = await http.get("/v1/runs", headers={"Host": host})
        health = await http.get("/healthz", headers={"Host": host})

    if answered:
        assert (answer.status_code, health.status_code) == (200, 200), answer.text
    else:
        assert "does not answer to the host name" in problem(answer, 403, "forbidden")["detail"]
        problem(health, 403, "forbidden")


async def test_a_server_with_tokens_checks_host_names_only_when_given_some(
    client: Client,
) -> None:
    tokens = BearerTokens({TOKEN: "ops"})
    named_app = create_app(client, authenticate=tokens, allowed_hosts=["api.example.com"])
    async with (
        http_of(create_app(client, authenticate=tokens)) as anyhost,
        http_of(named_app) as named,
    ):
        open_to_any = await anyhost.get("/v1/runs", headers={**HEADERS, "Host": "sf.internal"})
        ours = await named.get("/v1/runs", headers={**HEADERS, "Host": "api.example.com"})
        probe = await named.get("/healthz", headers={"Host": "10.1.2.3:8000"})  # an address
        other = await named.get("/v1/runs", headers={**HEADERS, "Host": "sf.internal"})

    assert (open_to_any.status_code, ours.status_code, probe.status_code) == (200, 200, 200)
    problem(other, 403, "forbidden")


@pytest.mark.parametrize("name", ["http://devbox", "devbox:8000", "devbox/ui", "", "dev box", "*"])
def test_an_allowed_host_is_a_host_name(client: Client, name: str) -> None:
    with pytest.raises(InvalidArgument, match="is not a host name"):
        HostNames([name])
    with pytest.raises(InvalidArgument, match="is not a host name"):
        create_app(client, insecure_local=True, allowed_hosts=[name])
    with pytest.raises(InvalidArgument, match="a list of names"):
        create_app(client, insecure_local=True, allowed_hosts="devbox")


async def test_every_answer_says_nosniff_and_api_answers_no_store(client: Client) -> None:
    await pending(client, "r-1")
    async with http_of(create_app(client, authenticate=BearerTokens(TOKENS))) as http:
        auth = {"Authorization": f"Bearer {ALICE}"}
        answers = [
            await http.get("/v1/runs/r-1/export", headers=auth),
            await http.get("/v1/runs", headers=auth),
            await http.get("/v1/runs/ghost", headers=auth),  # a problem
            await http.get("/v1/runs"),  # 401
            await http.get("/v1/nothing/here", headers=auth),  # 404
            await http.post("/v1/runs", content=b"x", headers={"Content-Type": "text/plain"}),
            await http.get("/healthz"),
            await http.get("/openapi.json", headers=auth),
            await http.get("/ui/runs/r-1", headers=auth),
        ]
        style = await http.get("/ui/static/console.css")

    assert [a.status_code for a in answers] == [200, 200, 404, 401, 404, 415, 200, 200, 200]
    for answer in answers:
        assert answer.headers["x-content-type-options"] == "nosniff", answer.url
        assert answer.headers["cache-control"] == "no-store", answer.url
    assert style.status_code == 200
    assert style.headers["x-content-type-options"] == "nosniff"
    assert "cache-control" not in style.headers  # static files may be cached


@pytest.mark.parametrize(
    ("method", "path", "known"),
    [
        ("GET", "/v1/nothing", 404),
        ("GET", "/admin", 404),
        ("PUT", "/v1/runs", 405),
        ("DELETE", "/v1/queues", 405),
        ("POST", "/healthz", 405),
        ("GET", "/ui/nothing", 404),
    ],
)
async def test_a_stranger_gets_401_before_404_or_405(
    client: Client, method: str, path: str, known: int
) -> None:
    app = create_app(client, authenticate=BearerTokens(TOKENS))
    async with http_of(app) as http:
        stranger = await http.request(method, path)
        wrong = await http.request(
            method, path, headers={"Authorization": "Bearer nope-0123456789"}
        )
        signed = await http.request(method, path, headers={"Authorization": f"Bearer {ALICE}"})
        signin = await http.post("/ui/signin", data={"token": ALICE})
        cookie = await http.request(method, path)  # the console's cookie, under /ui only

    for answer in (stranger, wrong):
        problem(answer, 401, "unauthenticated")
        assert answer.headers["www-authenticate"] == 'Bearer realm="steadyflow"'
    code = {404: "not_found", 405: "method_not_allowed"}[known]
    assert signin.status_code == 303
    problem(signed, known, code)
    if path.startswith("/ui/"):
        problem(cookie, known, code)
    else:
        problem(cookie, 401, "unauthenticated")


async def test_an_insecure_local_server_refuses_strangers_off_loopback_before_404(
    client: Client,
) -> None:
    transport = httpx.ASGITransport(app=create_app(client, insecure_local=True),
                                    client=("10.1.2.3", 5000))  # fmt: skip
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        answer = await http.get("/v1/nothing")

    assert "'10.1.2.3'" in problem(answer, 403, "forbidden")["detail"]


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
        {"Origin": "https://evil.example"},
    ],
)
async def test_signing_in_from_another_site_or_an_opaque_origin_is_refused(
    client: Client, headers: dict[str, str]
) -> None:
    async with http_of(create_app(client, authenticate=BearerTokens(TOKENS))) as http:
        refused = await http.post("/ui/signin", data={"token": ALICE}, headers=headers)
        ours = await http.post("/ui/signin", data={"token": ALICE}, headers={
            "Sec-Fetch-Site": "same-origin", "Origin": "http://localhost:8000"
        })  # fmt: skip

    assert refused.status_code == 403
    assert "set-cookie" not in refused.headers
    assert "own sign-in page" in refused.text
    assert ours.status_code == 303 and "set-cookie" in ours.headers
