"""The HTTP API's gate: authentication, the Authorizer behind it, bounded bodies, bad JSON."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.requests import Request

from sdk import Client, RunRecord, Serializer
from sdk.errors import InvalidArgument
from sdk.http import BearerTokens, create_app
from sdk.http._auth import is_loopback
from stores import open_store
from stores.redis import RedisStore
from testing import FlowTestEnv
from tests.test_http import (
    HEADERS,
    TOKEN,
    api,
    env_fixture,  # noqa: F401 (the "env" fixture)
    problem,
)


def bare(app: object, client: tuple[str, int] = ("127.0.0.1", 5000)) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=client)  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url="http://localhost")


class NoOne:
    """An Authorizer that refuses everything and remembers what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def can(self, actor: str, action: str, run: RunRecord) -> bool:
        self.asked.append((actor, action))
        return False


async def test_no_endpoint_answers_without_a_valid_token(env: FlowTestEnv) -> None:
    app = create_app(env.client, authenticate=BearerTokens({TOKEN: "ops"}))
    async with bare(app) as http:
        anonymous = await http.get("/v1/runs")
        wrong = await http.get("/v1/runs", headers={"Authorization": "Bearer not-the-token-000"})
        basic = await http.get("/v1/runs", headers={"Authorization": f"Basic {TOKEN}"})
        start = await http.post("/v1/runs", json={"flow": "tests.http.greet", "args": ["x"]})
        document = await http.get("/openapi.json")
        ready = await http.get("/readyz")
        health = await http.get("/healthz")
        allowed = await http.get("/v1/runs", headers=HEADERS)

    for answer in (anonymous, wrong, basic, start, document, ready):
        assert "Bearer" in problem(answer, 401, "unauthenticated")["detail"]
        assert answer.headers["www-authenticate"] == 'Bearer realm="steadyflow"'
    assert await env.client.list_runs() == []
    assert health.status_code == 200  # liveness only: no store read, nothing revealed
    assert allowed.status_code == 200


async def test_the_authorizer_decides_with_the_caller_as_actor_and_refusals_are_audited(
    env: FlowTestEnv,
) -> None:
    run = await env.client.start("tests.http.signalled", run_id="gated-run")
    await env.run_until_idle()
    policy = NoOne()
    guarded = Client(env.store, policy, clock=env.clock)
    async with api(guarded) as http:
        cancel = await http.post("/v1/runs/gated-run/cancel", json={"reason": "stop"})
        signal = await http.post("/v1/runs/gated-run/signals/go", json={"payload": 1})

    body = problem(cancel, 403, "forbidden")
    assert body["run_id"] == "gated-run"
    assert "'ops'" in body["detail"]
    problem(signal, 403, "forbidden")
    assert policy.asked == [("ops", "cancel"), ("ops", "signal")]
    assert (await run.status()).value == "waiting_for_signal"
    denied = [e.data for e in await env.client.events("gated-run") if e.type == "auth.denied"]
    assert denied == [{"actor": "ops", "action": "cancel"}, {"actor": "ops", "action": "signal"}]


async def test_a_custom_authenticate_hook_may_be_async(env: FlowTestEnv) -> None:
    async def by_header(request: Request) -> str | None:
        return request.headers.get("x-user")

    async with bare(create_app(env.client, authenticate=by_header)) as http:
        ok = await http.post("/v1/runs", json={"flow": "tests.http.greet", "args": ["x"]},
                             headers={"x-user": "carol"})  # fmt: skip
        refused = await http.get("/v1/runs")

    assert ok.status_code == 201
    problem(refused, 401, "unauthenticated")


async def test_insecure_local_answers_loopback_clients_only(env: FlowTestEnv) -> None:
    app = create_app(env.client, insecure_local=True)
    async with bare(app) as local, bare(app, ("10.1.2.3", 5000)) as remote:
        mine = await local.post("/v1/runs", json={"flow": "tests.http.signalled", "run_id": "l"})
        cancel = await local.post("/v1/runs/l/cancel", json={"reason": "done"})
        theirs = await remote.get("/v1/runs")

    assert mine.status_code == 201
    assert cancel.status_code == 200
    events = await env.client.events("l")
    assert [e.data["actor"] for e in events if e.type == "run.cancel_requested" or
            e.type == "run.canceled"][:1] == ["local"]  # fmt: skip
    assert "'10.1.2.3'" in problem(theirs, 403, "forbidden")["detail"]


async def test_create_app_refuses_to_build_an_open_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("STEADYFLOW_API_TOKENS", raising=False)
    store = open_store("memory://")
    try:
        with pytest.raises(InvalidArgument, match="nothing to authenticate"):
            create_app(Client(store))
        monkeypatch.setenv("STEADYFLOW_API_TOKENS", f"{TOKEN}=ops")
        async with bare(create_app(Client(store))) as http:
            assert (await http.get("/v1/runs", headers=HEADERS)).status_code == 200
    finally:
        await store.close()


def test_tokens_parse_from_text_and_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("# operators\naaaaaaaaaaaaaaaa1 = alice\nbbbbbbbbbbbbbbbb2=bob,\n")
    tokens = BearerTokens.from_file(path)

    assert tokens.actor_of("aaaaaaaaaaaaaaaa1") == "alice"
    assert tokens.actor_of("bbbbbbbbbbbbbbbb2") == "bob"
    assert tokens.actor_of("aaaaaaaaaaaaaaaa") is None
    assert "aaaa" not in repr(tokens)
    with pytest.raises(InvalidArgument, match="shorter than 16"):
        BearerTokens.parse("short=alice", "test")
    with pytest.raises(InvalidArgument, match="entry #2 is not 'token=actor'"):
        BearerTokens.parse("aaaaaaaaaaaaaaaa1=alice,justatoken", "test")
    with pytest.raises(InvalidArgument, match="tokens file"):
        BearerTokens.from_file(tmp_path / "missing")


def test_loopback_addresses() -> None:
    assert all(map(is_loopback, ["127.0.0.1", "127.8.9.1", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "10.0.0.1", "::", "example.com", None]))


async def test_a_body_over_the_limit_is_a_413_and_writes_nothing(env: FlowTestEnv) -> None:
    big = {"flow": "tests.http.greet", "args": ["x" * 5000]}
    async with api(env.client, max_body=4096) as http:
        declared = await http.post("/v1/runs", json=big)

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
            text = json.dumps(big).encode()
            for i in range(0, len(text), 1000):
                yield text[i : i + 1000]

        streamed = await http.post(
            "/v1/runs", content=chunks(), headers={"Content-Type": "application/json"}
        )

    assert "limit of 4,096 bytes" in problem(declared, 413, "payload_too_large")["detail"]
    assert "at least" in problem(streamed, 413, "payload_too_large")["detail"]
    assert await env.client.list_runs() == []


async def test_arguments_over_the_serializer_limit_are_refused(env: FlowTestEnv) -> None:
    client = Client(env.store, clock=env.clock, converter=Serializer(max_payload_bytes=1000))
    async with api(client) as http:
        answer = await http.post(
            "/v1/runs", json={"flow": "tests.http.greet", "args": ["x" * 2000]}
        )

    assert "over the limit of 1,000 bytes" in problem(answer, 413, "payload_too_large")["detail"]
    assert await env.client.list_runs() == []


@pytest.mark.parametrize(
    ("body", "status", "code", "detail"),
    [
        (b'{"flow": "tests.http.greet", "args": [', 400, "invalid_json", "line 1 column 39"),
        (b"", 400, "invalid_json", "empty"),
        (b"\xff\xfe", 400, "invalid_json", "not UTF-8"),
        (b'{"flow": "tests.http.greet", "args": [NaN]}', 400, "invalid_json", "NaN"),
        (b"[" * 100_000 + b"]" * 100_000, 400, "invalid_json", "nested too deeply"),
        (b'["tests.http.greet"]', 422, "invalid_argument", "body must be object"),
        (b'{"flow": 7}', 422, "invalid_argument", "body.flow must be string"),
        (b'{"flow": "f", "args": {}}', 422, "invalid_argument", "body.args must be array"),
        (b'{"flow": "f", "priority": 99999}', 422, "invalid_argument", "body.priority"),
        (b'{"flow": "f", "prio": 1}', 422, "invalid_argument", "unknown field 'prio'"),
        (b'{"flow": "tests.http.greet", "args": ["a"], "start_at": "soon"}', 422,
         "invalid_argument", "start_at"),
    ],
)  # fmt: skip
async def test_bad_bodies_are_4xx_naming_the_problem(
    memory_store: RedisStore, body: bytes, status: int, code: str, detail: str
) -> None:
    async with api(Client(memory_store), max_body=1_000_000) as http:
        answer = await http.post(
            "/v1/runs", content=body, headers={"Content-Type": "application/json"}
        )

    assert detail in problem(answer, status, code)["detail"]
    assert await Client(memory_store).list_runs() == []


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
_FIELDS = st.sampled_from(
    ["flow", "args", "kwargs", "run_id", "priority", "queue", "tenant_id", "start_in", "start_at",
     "options", "payload", "dedup_id", "reason", "grace", "checkpoint_id", "name", "data"]
)  # fmt: skip
_ENDPOINTS = st.sampled_from(
    ["/v1/runs", "/v1/runs/r1/signals/go", "/v1/runs/r1/approve/ok", "/v1/runs/r1/cancel",
     "/v1/runs/r1/resume", "/v1/runs/r1/replay", "/v1/runs/r1/fork", "/v1/events"]
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    path=_ENDPOINTS,
    body=st.dictionaries(_FIELDS, _JSON, max_size=5)
    | st.fixed_dictionaries({"flow": st.just("tests.http.greet"), "args": st.lists(_JSON)})
    | _JSON,
)
def test_no_body_is_answered_with_a_500(path: str, body: object) -> None:
    async def send() -> httpx.Response:
        store = open_store("memory://")
        try:
            client = Client(store)
            await client.start("tests.http.signalled", run_id="r1")
            async with api(client) as http:
                return await http.post(path, json=body)
        finally:
            await store.close()

    answer = asyncio.run(send())

    assert answer.status_code < 500, answer.text
    if answer.status_code >= 400:
        assert answer.headers["content-type"] == "application/problem+json"


async def test_readyz_says_503_when_the_store_does_not_answer() -> None:
    from tests.conftest import free_port

    store = RedisStore.from_url(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    try:
        async with api(Client(store)) as http:
            ready = await http.get("/readyz")
            health = await http.get("/healthz")
            listing = await http.get("/v1/runs")
    finally:
        await store.close()

    assert "cannot be reached" in problem(ready, 503, "store_unavailable")["detail"]
    assert ready.headers["retry-after"] == "1"
    assert health.status_code == 200
    problem(listing, 503, "store_unavailable")
