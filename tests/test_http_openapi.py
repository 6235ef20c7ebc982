"""The OpenAPI document: generated from the route table, complete, with the enums."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from openapi_spec_validator import validate
from starlette.routing import Route as StarletteRoute

from sdk import Client, EventType, Reason, RunStatus
from sdk._core._types import CheckpointKind
from sdk.http import ErrorCode, create_app
from sdk.http._openapi import document
from sdk.http._routes import routes
from stores.redis import RedisStore
from testing import FlowTestEnv
from tests.test_http import TOKEN, api


@pytest.fixture(name="doc")
def doc_fixture() -> dict[str, Any]:
    return document(routes())


def refs(node: Any) -> list[str]:
    """Every ``$ref`` in a JSON tree."""
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in refs(v)]
    return []


def test_the_document_has_the_openapi_structure(doc: dict[str, Any]) -> None:
    assert doc["openapi"] == "3.1.0"
    assert {"title", "version"} <= doc["info"].keys()
    assert doc["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
    }
    ids = []
    for path, item in doc["paths"].items():
        assert path.startswith("/")
        for method, op in item.items():
            assert method in {"get", "post", "put", "delete", "patch"}
            ids.append(op["operationId"])
            assert op["responses"], (method, path)
            for status, answer in op["responses"].items():
                assert re.fullmatch(r"[1-5][0-9][0-9]", status), status
                assert answer["description"]
            declared = {p["name"] for p in op.get("parameters", ()) if p["in"] == "path"}
            assert declared == set(re.findall(r"{(\w+)}", path)), (method, path)
            for p in op.get("parameters", ()):
                assert p["in"] in {"path", "query"}
                assert p["required"] or p["in"] == "query"
    assert len(ids) == len(set(ids)), "operationIds are unique"
    schemas = doc["components"]["schemas"]
    for ref in refs(doc):
        assert ref.startswith("#/components/schemas/")
        assert ref.rpartition("/")[2] in schemas, ref


def test_every_route_of_the_app_is_in_the_document_and_the_other_way(
    doc: dict[str, Any], memory_store: RedisStore
) -> None:
    app = create_app(Client(memory_store), insecure_local=True)
    served = {
        (method.lower(), r.path.replace(":path}", "}"))  # a run id may hold "/"
        for r in app.routes
        if isinstance(r, StarletteRoute)
        for method in (r.methods or set()) - {"HEAD"}
    }
    documented = {(m, p) for p, item in doc["paths"].items() for m in item}

    assert served == documented
    for path in ("/v1/runs", "/v1/runs/{run_id}/events", "/v1/runs/{run_id}/signals/{name}",
                 "/v1/runs/{run_id}/approve/{name}", "/v1/runs/{run_id}/deny/{name}",
                 "/v1/runs/{run_id}/cancel", "/v1/runs/{run_id}/resume",
                 "/v1/runs/{run_id}/replay", "/v1/runs/{run_id}/fork",
                 "/v1/runs/{run_id}/export", "/v1/runs/{run_id}/checkpoints", "/v1/events",
                 "/v1/queues", "/v1/workers", "/healthz", "/readyz"):  # fmt: skip
        assert path in doc["paths"], path


@pytest.mark.parametrize("enum", [RunStatus, Reason, EventType, CheckpointKind, ErrorCode])
def test_statuses_reasons_event_types_and_error_codes_are_enums(
    doc: dict[str, Any], enum: Any
) -> None:
    schema = doc["components"]["schemas"][enum.__name__]

    assert schema["type"] == "string"
    assert schema["enum"] == [m.value for m in enum]


def test_records_refer_to_their_enums(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    run = schemas["RunRecord"]

    assert run["properties"]["status"] == {"$ref": "#/components/schemas/RunStatus"}
    assert set(run["required"]) >= {"run_id", "flow", "status", "created_at", "result"}
    assert schemas["Event"]["properties"]["type"] == {"$ref": "#/components/schemas/EventType"}
    reason = schemas["ErrorInfo"]["properties"]["reason"]
    assert {"$ref": "#/components/schemas/Reason"} in reason["anyOf"]
    assert schemas["Problem"]["properties"]["code"] == {"$ref": "#/components/schemas/ErrorCode"}


def test_each_error_answer_names_the_codes_it_may_carry(doc: dict[str, Any]) -> None:
    start = doc["paths"]["/v1/runs"]["post"]["responses"]
    codes = {
        code
        for status, answer in start.items()
        if status >= "400"
        for code in answer["content"]["application/problem+json"]["schema"]["allOf"][1][
            "properties"
        ]["code"]["enum"]
    }
    assert {"flow_not_found", "invalid_argument", "invalid_json", "payload_too_large",
            "idempotency_conflict", "queue_full", "unauthenticated"} <= codes  # fmt: skip
    assert codes <= {c.value for c in ErrorCode}
    events = doc["paths"]["/v1/runs/{run_id}/events"]["get"]["responses"]["429"]
    assert "too_many_streams" in events["description"]
    assert "security" not in doc["paths"]["/v1/runs"]["post"]  # the document-wide bearer
    assert doc["paths"]["/healthz"]["get"]["security"] == []


async def test_the_app_serves_the_document(doc: dict[str, Any], memory_store: RedisStore) -> None:
    async with api(Client(memory_store)) as http:
        served = await http.get("/openapi.json")
        anonymous = await http.get("/openapi.json", headers={"Authorization": ""})

    assert served.json() == doc
    assert anonymous.status_code == 401
    assert TOKEN not in served.text


def test_the_document_is_valid_openapi_3_1(doc: dict[str, Any]) -> None:
    validate(doc)  # raises with the first fault it finds


def _operation_of(doc: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    for template, item in doc["paths"].items():
        pattern = re.sub(r"{run_id}", "(.+)", re.sub(r"{\w+}", "[^/]+", template)) + "$"
        if re.match(pattern, path) and method in item:
            return item[method]  # type: ignore[no-any-return]
    raise AssertionError(f"{method} {path} is in no path of the document")


async def test_every_answer_fits_its_documented_schema(doc: dict[str, Any]) -> None:
    """Real answers (successes and problems) checked against the document's schemas."""
    checked: list[str] = []

    async def call(http: httpx.AsyncClient, method: str, path: str, **kw: Any) -> Any:
        answer = await http.request(method, path, **kw)
        op = _operation_of(doc, method.lower(), path.split("?")[0])
        documented = op["responses"].get(str(answer.status_code))
        assert documented is not None, (method, path, answer.status_code, answer.text)
        if answer.status_code != 204:
            media = answer.headers["content-type"]
            schema = documented["content"][media]["schema"]
            Draft202012Validator({**schema, "components": doc["components"]}).validate(
                answer.json()
            )
        checked.append(f"{method} {path} {answer.status_code}")
        return answer.json() if answer.content else None

    async with FlowTestEnv() as env, api(env.client) as http:
        body = {"flow": "tests.http.gated", "run_id": "doc-1", "tenant_id": "t"}
        await call(http, "POST", "/v1/runs", json=body)
        await call(http, "POST", "/v1/runs", json={"flow": "tests.http.greet", "args": ["a"]})
        await env.run_until_idle()
        await call(http, "GET", "/v1/runs", params={"limit": 1})
        for part in ("", "/events", "/checkpoints", "/timeline", "/waits", "/export"):
            await call(http, "GET", f"/v1/runs/doc-1{part}")
        await call(http, "POST", "/v1/runs/doc-1/signals/x", json={"payload": [1]})
        await call(http, "POST", "/v1/runs/doc-1/approve/ok", json={"reason": "r"})
        await env.run_until_idle()
        await call(http, "POST", "/v1/runs/doc-1/replay", json={"new_run_id": "doc-2"})
        await call(http, "POST", "/v1/runs/doc-2/cancel", json={"reason": "no"})
        await call(http, "POST", "/v1/runs/doc-2/resume", json={})
        await call(http, "POST", "/v1/runs/doc-1/fork", json={"new_run_id": "doc-3"})
        await call(http, "DELETE", "/v1/runs/doc-1")
        await call(http, "POST", "/v1/events", json={"name": "e", "data": {}})
        for path in ("/v1/queues", "/v1/workers", "/v1/schedules", "/healthz", "/readyz"):
            await call(http, "GET", path)
        # problems
        await call(http, "GET", "/v1/runs/ghost")
        for media in ("application/json", "text/plain"):  # bad JSON (400), not JSON (415)
            await call(http, "POST", "/v1/runs", content=b"{", headers={"Content-Type": media})
        await call(http, "POST", "/v1/runs", json={"flow": "nope"})
        await call(http, "POST", "/v1/runs/doc-3/deny/ok")
        await call(http, "POST", "/v1/runs/doc-2/cancel", json={"reason": "again"})
        await call(http, "GET", "/v1/runs", headers={"Authorization": "Bearer wrong-token-0000"})
        await call(http, "POST", "/v1/schedules/none/trigger")

    assert len(checked) == 30
    assert {c.rsplit(" ", 1)[1] for c in checked} == {
        "200",
        "201",
        "204",
        "400",
        "401",
        "404",
        "409",
        "415",
    }
