"""The HTTP runtime API (sdk.http) through httpx's ASGI transport, on memory:// and real Redis.

Every endpoint, its answer and its problem codes. Authentication, bounds and
bad JSON are in test_http_auth.py, the event stream in test_http_sse.py, the
OpenAPI document in test_http_openapi.py, the real server in test_http_serve.py.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from sdk import Client, Decision, Queue, RunStatus, flow, step, wait_for, wait_for_event
from sdk.http import BearerTokens, create_app
from stores import open_store
from testing import FlowTestEnv
from tests.conftest import need_real_redis, redis_store

TOKEN = "ops-token-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
PROBLEM = "application/problem+json"


@contextlib.asynccontextmanager
async def api(client: Client, **options: Any) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on `create_app(client)`, authenticated as actor "ops"."""
    options.setdefault("authenticate", BearerTokens({TOKEN: "ops"}))
    app = create_app(client, **options)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sf", headers=HEADERS) as h:
        yield h


def problem(answer: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The problem body of `answer`, after checking its status, media type and code."""
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == PROBLEM
    body: dict[str, Any] = answer.json()
    assert body["code"] == code, body
    assert body["status"] == status
    assert {"type", "title", "detail"} <= body.keys()
    return body


@step(name="tests.http.shout")
async def shout(text: str) -> str:
    return text.upper()


@flow(name="tests.http.greet")
async def greet(name: str, times: int = 1) -> str:
    return await shout(f"hello {name} " * times)


@flow(name="tests.http.when")
async def when(at: datetime) -> str:
    return f"datetime {at.isoformat()}" if isinstance(at, datetime) else "not a datetime"


@flow(name="tests.http.signalled")
async def signalled() -> Any:
    return await wait_for("go")


@flow(name="tests.http.gated")
async def gated() -> Decision:
    decision: Decision = await wait_for("ok", human=True)
    return decision


@step(name="tests.http.flaky")
async def flaky() -> str:
    if FAIL[0]:
        raise RuntimeError("boom")
    return "fixed"


FAIL = [True]


@flow(name="tests.http.breaks")
async def breaks() -> str:
    return await flaky()


@flow(name="tests.http.payment")
async def payment(order: str) -> Any:
    return await wait_for_event("paid", match={"order": order})


@flow(name="tests.http.limited", queue=Queue("tests-http-tight", max_pending=1))
async def limited() -> None:
    return None


@pytest.fixture(name="env", params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def env_fixture(
    request: pytest.FixtureRequest, key_prefix: str
) -> AsyncIterator[FlowTestEnv]:
    """A FlowTestEnv on memory:// and on the real Redis (under the test's key prefix)."""
    async with contextlib.AsyncExitStack() as stack:
        if request.param == "memory":
            store = open_store("memory://")
            stack.push_async_callback(store.close)
        else:
            store = await stack.enter_async_context(redis_store(need_real_redis(), key_prefix))
        yield await stack.enter_async_context(FlowTestEnv(store=store))


async def start(http: httpx.AsyncClient, flow_name: str, *args: Any, **body: Any) -> str:
    answer = await http.post("/v1/runs", json={"flow": flow_name, "args": list(args), **body})
    assert answer.status_code == 201, answer.text
    run_id: str = answer.json()["run_id"]
    return run_id


async def test_start_get_and_list_a_run(env: FlowTestEnv) -> None:
    async with api(env.client) as http:
        answer = await http.post(
            "/v1/runs",
            json={"flow": "tests.http.greet", "args": ["ada"], "kwargs": {"times": 2},
                  "run_id": "greet-1", "priority": 3, "tenant_id": "acme"},
        )  # fmt: skip
        assert answer.status_code == 201, answer.text
        assert answer.headers["location"] == "/v1/runs/greet-1"
        run = answer.json()
        assert (run["run_id"], run["status"], run["priority"], run["tenant_id"]) == (
            "greet-1", "pending", 3, "acme",
        )  # fmt: skip
        await env.run_until_idle()

        got = (await http.get("/v1/runs/greet-1")).json()
        assert got["status"] == "completed"
        assert got["result"] == "HELLO ADA HELLO ADA "
        assert got["flow"] == "tests.http.greet"
        listed = (await http.get("/v1/runs", params={"status": "completed"})).json()
        assert [r["run_id"] for r in listed["runs"]] == ["greet-1"]
        assert listed["next_cursor"] is None


async def test_a_start_takes_the_callers_traceparent_as_the_runs_trace_id(
    env: FlowTestEnv,
) -> None:
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with api(env.client) as http:
        traced = await http.post(
            "/v1/runs", json={"flow": "tests.http.greet", "args": ["ada"], "run_id": "t-1"},
            headers={"traceparent": parent},
        )  # fmt: skip
        given = await http.post(
            "/v1/runs",
            json={"flow": "tests.http.greet", "args": ["bob"], "run_id": "t-2",
                  "options": {"trace_id": "mine"}},
            headers={"traceparent": parent},
        )  # fmt: skip
        bad = await http.post(
            "/v1/runs", json={"flow": "tests.http.greet", "args": ["cy"], "run_id": "t-3"},
            headers={"traceparent": "not-a-trace"},
        )  # fmt: skip
    assert [a.status_code for a in (traced, given, bad)] == [201, 201, 201]
    assert (await env.client.get("t-1")).trace_id == parent
    assert (await env.client.get("t-2")).trace_id == "mine"  # the body's own wins
    assert (await env.client.get("t-3")).trace_id == "t-3"  # not W3C: ignored


async def test_the_same_start_again_returns_the_run_and_other_arguments_conflict(
    env: FlowTestEnv,
) -> None:
    async with api(env.client) as http:
        body = {"flow": "tests.http.greet", "args": ["ada"], "run_id": "same"}
        assert (await http.post("/v1/runs", json=body)).status_code == 201
        assert (await http.post("/v1/runs", json=body)).json()["run_id"] == "same"

        other = await http.post("/v1/runs", json={**body, "args": ["bob"]})

        assert problem(other, 409, "idempotency_conflict")["detail"].startswith("run 'same'")


async def test_listing_pages_with_a_cursor_and_filters(env: FlowTestEnv) -> None:
    async with api(env.client) as http:
        for i in range(5):
            await start(http, "tests.http.greet", f"n{i}", run_id=f"page-{i}",
                        tenant_id="even" if i % 2 == 0 else "odd")  # fmt: skip
        seen: list[str] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
            page = (await http.get("/v1/runs", params=params)).json()
            seen += [r["run_id"] for r in page["runs"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        evens = (await http.get("/v1/runs", params={"tenant_id": "even"})).json()["runs"]
        bad = await http.get("/v1/runs", params={"cursor": "not-a-cursor"})
        wrong_status = await http.get("/v1/runs", params={"status": "sleeping"})

    assert sorted(seen) == [f"page-{i}" for i in range(5)]
    assert len(seen) == 5
    assert sorted(r["run_id"] for r in evens) == ["page-0", "page-2", "page-4"]
    assert "not-a-cursor" in problem(bad, 422, "invalid_argument")["detail"]
    assert "sleeping" in problem(wrong_status, 422, "invalid_argument")["detail"]


async def test_start_checks_the_arguments_against_the_flow_before_writing(
    env: FlowTestEnv,
) -> None:
    async with api(env.client) as http:
        missing = await http.post("/v1/runs", json={"flow": "tests.http.greet"})
        extra = await http.post(
            "/v1/runs", json={"flow": "tests.http.greet", "args": ["a"], "kwargs": {"loud": 1}}
        )
        wrong_type = await http.post("/v1/runs", json={"flow": "tests.http.when", "args": [42]})
        reserved = await http.post(
            "/v1/runs", json={"flow": "tests.http.greet", "args": ["a"], "kwargs": {"queue": "x"}}
        )
        typed = await http.post(
            "/v1/runs", json={"flow": "tests.http.when", "args": ["2026-01-02T03:04:05+00:00"]}
        )
        await env.run_until_idle()

        assert "tests.http.greet" in problem(missing, 422, "invalid_argument")["detail"]
        assert "loud" in problem(extra, 422, "invalid_argument")["detail"]
        assert "'at'" in problem(wrong_type, 422, "serialization_error")["detail"]
        assert "queue" in problem(reserved, 422, "invalid_argument")["detail"]
        # the JSON string was rebuilt into the annotated datetime before the start
        done = (await http.get(f"/v1/runs/{typed.json()['run_id']}")).json()
        assert done["result"] == "datetime 2026-01-02T03:04:05+00:00"
    assert [r.flow for r in await env.client.list_runs()] == ["tests.http.when"]


async def test_an_unknown_flow_is_a_404_naming_it(env: FlowTestEnv) -> None:
    async with api(env.client) as http:
        answer = await http.post("/v1/runs", json={"flow": "billing.nope", "args": []})

    assert "'billing.nope'" in problem(answer, 404, "flow_not_found")["detail"]
    assert await env.client.list_runs() == []


async def test_an_unknown_run_is_a_404_with_its_run_id(env: FlowTestEnv) -> None:
    async with api(env.client) as http:
        for path in ("", "/events", "/checkpoints", "/export"):
            body = problem(await http.get(f"/v1/runs/ghost{path}"), 404, "run_not_found")
            assert body["run_id"] == "ghost"
        body = problem(await http.post("/v1/runs/ghost/cancel", json={"reason": "x"}), 404,
                       "run_not_found")  # fmt: skip
        assert body["run_id"] == "ghost"


async def test_signal_delivers_once_per_dedup_id(env: FlowTestEnv) -> None:
    async with api(env.client) as http:
        run_id = await start(http, "tests.http.signalled")
        await env.run_until_idle()
        assert (await http.get(f"/v1/runs/{run_id}")).json()["status"] == "waiting_for_signal"

        url = f"/v1/runs/{run_id}/signals/go"
        first = await http.post(url, json={"payload": {"n": 1}, "dedup_id": "d1"})
        again = await http.post(url, json={"payload": {"n": 2}, "dedup_id": "d1"})
        await env.run_until_idle()
        after_end = await http.post(url)

    assert first.json() == {"run_id": run_id, "name": "go", "delivered": True}
    assert again.json()["delivered"] is False
    assert (await env.client.get(run_id)).result == {"n": 1}
    assert problem(after_end, 409, "invalid_transition")["run_id"] == run_id


async def test_approve_and_deny_decide_as_the_caller(env: FlowTestEnv) -> None:
    async with api(env.client) as http:
        yes = await start(http, "tests.http.gated")
        no = await start(http, "tests.http.gated")
        waiting = await start(http, "tests.http.signalled")
        await env.run_until_idle()

        approved = await http.post(f"/v1/runs/{yes}/approve/ok", json={"reason": "fine"})
        denied = await http.post(f"/v1/runs/{no}/deny/ok")
        not_waiting = await http.post(f"/v1/runs/{waiting}/approve/ok")
        await env.run_until_idle()

    assert approved.json() == {"run_id": yes, "name": "ok", "approved": True, "actor": "ops"}
    assert denied.json()["approved"] is False
    assert await env.client.handle(yes).result() == Decision(True, "ops", "fine", None)
    assert (await env.client.handle(no).result()).approved is False
    assert problem(not_waiting, 409, "not_waiting")["run_id"] == waiting


async def test_cancel_then_cancel_again_is_an_invalid_transition(env: FlowTestEnv) -> None:
    async with api(env.client) as http:
        run_id = await start(http, "tests.http.signalled")
        canceled = await http.post(f"/v1/runs/{run_id}/cancel", json={"reason": "not needed"})
        again = await http.post(f"/v1/runs/{run_id}/cancel", json={"reason": "twice"})
        no_reason = await http.post(f"/v1/runs/{run_id}/cancel", json={})

    assert canceled.status_code == 200
    assert (canceled.json()["status"], canceled.json()["reason"]) == ("canceled", "not needed")
    assert "'canceled'" in problem(again, 409, "invalid_transition")["detail"]
    assert "body.reason is required" in problem(no_reason, 422, "invalid_argument")["detail"]


async def test_resume_replay_and_fork(env: FlowTestEnv) -> None:
    FAIL[0] = True
    try:
        async with api(env.client) as http:
            run_id = await start(http, "tests.http.breaks", run_id="breaks-1")
            await env.run_until_idle()
            failed = (await http.get(f"/v1/runs/{run_id}")).json()
            assert (failed["status"], failed["error"]["reason"]) == ("failed", "step_failed")
            FAIL[0] = False

            resumed = await http.post(f"/v1/runs/{run_id}/resume")
            replayed = await http.post(f"/v1/runs/{run_id}/replay", json={"new_run_id": "r-1"})
            forked = await http.post(
                f"/v1/runs/{run_id}/fork", json={"new_run_id": "f-1", "tenant_id": "t2"}
            )
            bad_checkpoint = await http.post(
                f"/v1/runs/{run_id}/fork", json={"checkpoint_id": "999999"}
            )
            await env.run_until_idle()

            assert resumed.status_code == 200
            assert resumed.json()["status"] == "running"
            assert (replayed.status_code, replayed.headers["location"]) == (201, "/v1/runs/r-1")
            assert replayed.json()["source_run_id"] == run_id
            assert (forked.status_code, forked.json()["tenant_id"]) == (201, "t2")
            assert bad_checkpoint.status_code == 422, bad_checkpoint.text
            for rid in (run_id, "r-1", "f-1"):
                got = (await http.get(f"/v1/runs/{rid}")).json()
                assert (got["status"], got["result"]) == ("completed", "fixed"), (rid, got)
    finally:
        FAIL[0] = True


async def test_events_checkpoints_and_export(env: FlowTestEnv) -> None:
    async with api(env.client) as http:
        run_id = await start(http, "tests.http.greet", "ada")
        await env.run_until_idle()

        first = (await http.get(f"/v1/runs/{run_id}/events", params={"limit": 2})).json()
        rest = (
            await http.get(f"/v1/runs/{run_id}/events", params={"cursor": first["next_cursor"]})
        ).json()
        bad_cursor = await http.get(f"/v1/runs/{run_id}/events", params={"cursor": "x"})
        bad_limit = await http.get(f"/v1/runs/{run_id}/events", params={"limit": "lots"})
        checkpoints = (await http.get(f"/v1/runs/{run_id}/checkpoints")).json()["checkpoints"]
        exported = (await http.get(f"/v1/runs/{run_id}/export")).json()

    types = [e["type"] for e in first["events"] + rest["events"]]
    assert types[:2] == ["run.created", "run.started"]
    assert types[-1] == "run.completed"
    assert first["next_cursor"] == first["events"][-1]["event_id"]
    assert rest["events"][0]["correlation"]["run_id"] == run_id
    problem(bad_cursor, 422, "invalid_argument")
    assert "'limit'" in problem(bad_limit, 422, "invalid_argument")["detail"]
    assert checkpoints[0]["kind"] == "run_started"
    assert checkpoints[-1]["kind"] == "run_finished"
    assert (exported["steadyflow_export"], exported["run_id"]) == ("run", run_id)
    assert exported["record"]["status"] == "completed"


async def test_delete_a_finished_run_only(env: FlowTestEnv) -> None:
    async with api(env.client) as http:
        waiting = await start(http, "tests.http.signalled")
        done = await start(http, "tests.http.greet", "x")
        await env.run_until_idle()

        refused = await http.delete(f"/v1/runs/{waiting}")
        deleted = await http.delete(f"/v1/runs/{done}")
        gone = await http.get(f"/v1/runs/{done}")

    assert "cancel it first" in problem(refused, 409, "invalid_transition")["detail"]
    assert (deleted.status_code, deleted.content) == (204, b"")
    problem(gone, 404, "run_not_found")


async def test_send_event_reaches_the_waiting_run(env: FlowTestEnv) -> None:
    async with api(env.client) as http:
        run_id = await start(http, "tests.http.payment", "o-1")
        await env.run_until_idle()

        sent = await http.post(
            "/v1/events", json={"name": "paid", "data": {"order": "o-1"}, "event_id": "e1"}
        )
        again = await http.post(
            "/v1/events", json={"name": "paid", "data": {"order": "o-1"}, "event_id": "e1"}
        )
        await env.run_until_idle()

    assert sent.json() == {"run_ids": [run_id]}
    assert again.json() == {"run_ids": []}
    assert (await env.client.get(run_id)).result == {"order": "o-1"}


async def test_event_data_no_wait_could_match_is_refused_naming_the_field(
    env: FlowTestEnv,
) -> None:
    async with api(env.client) as http:
        run_id = await start(http, "tests.http.payment", "o-1")
        await env.run_until_idle()
        refused = [
            await http.post("/v1/events", json={"name": "paid", "data": data})
            for data in ("notadict", 12, ["o-1"])
        ]
        null = await http.post("/v1/events", json={"name": "paid", "data": None})

    for answer in refused:
        assert answer.headers["content-type"] == "application/problem+json"
        assert (
            "body.data must be object or null" in problem(answer, 422, "invalid_argument")["detail"]
        )
    assert null.json() == {"run_ids": []}  # null is data; this wait filters on a field
    assert (await env.client.get(run_id)).status.value == "waiting_for_signal"


async def test_a_full_queue_is_a_429(env: FlowTestEnv) -> None:
    async with api(env.client) as http:
        await start(http, "tests.http.limited")
        full = await http.post("/v1/runs", json={"flow": "tests.http.limited"})

    assert "'tests-http-tight'" in problem(full, 429, "queue_full")["detail"]
    assert full.headers["retry-after"] == "1"


async def test_queues_workers_schedules_and_probes(env: FlowTestEnv) -> None:
    async with api(env.client) as http:
        await start(http, "tests.http.greet", "q")
        queues = (await http.get("/v1/queues")).json()["queues"]
        workers = (await http.get("/v1/workers")).json()
        schedules = (await http.get("/v1/schedules")).json()
        missing = await http.post("/v1/schedules/nope/pause")
        health = await http.get("/healthz", headers={"Authorization": ""})
        ready = await http.get("/readyz")

    default = next(q for q in queues if q["name"] == "default")
    assert (default["pending"], default["executing"]) == (1, 0)
    assert workers == {"workers": []}  # FlowTestEnv's worker does not heartbeat
    assert schedules == {"schedules": []}
    problem(missing, 404, "schedule_not_found")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert ready.json()["status"] == "ready"


async def test_unknown_paths_and_methods_are_problems(env: FlowTestEnv) -> None:
    async with api(env.client) as http:
        nowhere = await http.get("/v2/things")
        wrong_method = await http.put("/v1/runs")

    assert "/v2/things" in problem(nowhere, 404, "not_found")["detail"]
    problem(wrong_method, 405, "method_not_allowed")


async def test_a_run_status_answer_uses_the_enum_values(env: FlowTestEnv) -> None:
    async with api(env.client) as http:
        run_id = await start(http, "tests.http.signalled")
        await env.run_until_idle()
        listed = await http.get("/v1/runs", params={"status": RunStatus.WAITING_FOR_SIGNAL.value})

    assert [r["run_id"] for r in listed.json()["runs"]] == [run_id]


@flow(name="tests.http.versioned", version="1")
async def versioned() -> Any:
    return await wait_for("go")


async def test_resume_moves_a_run_onto_another_version(env: FlowTestEnv) -> None:
    async with api(env.client) as http:
        run_id = await start(http, "tests.http.versioned")
        await env.run_until_idle()
        assert (await http.get(f"/v1/runs/{run_id}")).json()["flow_version"] == "1"

        moved = await http.post(f"/v1/runs/{run_id}/resume", json={"version": "2"})
        empty = await http.post(f"/v1/runs/{run_id}/resume", json={"version": ""})

    assert moved.status_code == 200, moved.text
    assert moved.json()["flow_version"] == "2"
    assert "body.version must not be empty" in problem(empty, 422, "invalid_argument")["detail"]
    resumed = [e.data for e in await env.client.events(run_id) if e.type == "run.resumed"]
    assert resumed[0]["actor"] == "ops"


def test_import_sdk_and_its_cli_do_not_import_starlette() -> None:
    import subprocess
    import sys

    code = (
        "import sys, sdk, sdk.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('starlette', 'uvicorn')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert done.stdout.strip() == "[]"


async def test_a_run_id_with_a_slash_is_addressed_by_path(env: FlowTestEnv) -> None:
    async with api(env.client) as http:
        await start(http, "tests.http.signalled", run_id="orders/42")
        await env.run_until_idle()

        got = await http.get("/v1/runs/orders/42")
        encoded = await http.get("/v1/runs/orders%2F42/checkpoints")
        events = await http.get("/v1/runs/orders/42/events")
        signal = await http.post("/v1/runs/orders/42/signals/go", json={"payload": 1})
        await env.run_until_idle()

    assert got.json()["run_id"] == "orders/42"
    assert encoded.json()["checkpoints"][0]["run_id"] == "orders/42"
    assert events.json()["events"][0]["run_id"] == "orders/42"
    assert signal.json() == {"run_id": "orders/42", "name": "go", "delivered": True}
    assert (await env.client.get("orders/42")).result == 1


async def test_timeline_and_current_waits_of_a_run(env: FlowTestEnv) -> None:
    async with api(env.client) as http:
        run_id = await start(http, "tests.http.gated")
        await env.run_until_idle()

        parked = (await http.get(f"/v1/runs/{run_id}/waits")).json()
        waits = parked["waits"]
        assert parked["approvers"] == {}  # its wait names none (test_authorization reads some)
        tree = (await http.get(f"/v1/runs/{run_id}/timeline", params={"depth": 0})).json()
        too_deep = await http.get(f"/v1/runs/{run_id}/timeline", params={"depth": 99})
        missing = await http.get("/v1/runs/ghost/timeline")

    # a human approval is shown as one, by the name the flow gave it (no journal key)
    assert [(w["kind"], w["name"]) for w in waits] == [("human", "ok")]
    assert "~" not in json.dumps(parked)
    assert (tree["kind"], tree["status"]) == ("run", "waiting_for_human")
    assert tree["label"].startswith(run_id)
    assert any(e["kind"] == "wait" and e["status"] == "waiting" for e in tree["entries"])
    assert "depth" in problem(too_deep, 422, "invalid_argument")["detail"]
    problem(missing, 404, "run_not_found")


async def test_runs_are_listed_by_what_they_wait_on(env: FlowTestEnv) -> None:
    async with api(env.client) as http:
        gated = await start(http, "tests.http.gated")
        await env.run_until_idle()
        human = (await http.get("/v1/runs", params={"waiting_on": "human"})).json()
        signal = (await http.get("/v1/runs", params={"waiting_on": "signal"})).json()
        bad = await http.get("/v1/runs", params={"waiting_on": "approval"})

    assert [r["run_id"] for r in human["runs"]] == [gated]
    assert human["runs"][0]["waiting_on"] == [
        {"kind": "human", "name": "ok", "deadline": None, "match": None}
    ]
    assert signal["runs"] == []
    assert "waiting_on" in problem(bad, 422, "invalid_argument")["detail"]
