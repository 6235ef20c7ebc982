"""Bad input is refused at the HTTP API's and the console's boundary with a 4xx, and
one bad record never breaks a read for everyone (issue 30).

Through the app (httpx's ASGI transport, as test_http.py), and the gravest case,
a start that planted a run breaking every listing, through a real ``steadyflow
serve`` process too. The Client's and the command line's side of the same
checks are in test_out_of_range_times.py.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.routing import Mount
from starlette.routing import Route as StarletteRoute

from sdk import Client, Worker, flow
from sdk.http import BearerTokens, create_app
from stores.redis import RedisStore
from tests.crashflows import ROOT, STEADYFLOW
from tests.test_http import HEADERS, api, problem
from tests.test_http_serve import server_fixture  # noqa: F401 (the `server` fixture)
from tests.test_out_of_range_times import STORED, TAMPERED_CURSOR, plant

#: Endings of run ids that a path of the API or the console would shadow.
ENDINGS = ("/checkpoints", "/events", "/export", "/live", "/timeline", "/waits")
#: How deep a request's JSON may nest (docs/http.md, "Limits").
MAX_JSON_DEPTH = 100
#: The start times of the issue: year 10000 and year 0 once in UTC.
PLANTING = ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00"]
MIB = 1 << 20


@flow(name="tests.http_boundary.echo")
async def echo(value: Any = None) -> Any:
    return value


@flow(name="tests.http_boundary.on_event", on_event="tests.http_boundary.event")
async def on_event(data: Any) -> Any:
    return data


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', html)
    assert found is not None, "no CSRF field on the page"
    return found.group(1)


# -- High: a start that would plant a run no reader can show ----------------------------


@pytest.mark.parametrize("start_at", PLANTING)
async def test_a_start_at_no_reader_could_show_is_422_and_stores_nothing(
    memory_store: RedisStore, start_at: str
) -> None:
    async with api(Client(memory_store)) as http:
        answer = await http.post(
            "/v1/runs",
            json={"flow": "tests.http_boundary.echo", "args": [1], "start_at": start_at},
        )
        detail = problem(answer, 422, "invalid_argument")["detail"]
        assert "body.start_at must be from 0001-01-02" in detail
        listed = await http.get("/v1/runs")
    assert listed.status_code == 200
    assert listed.json()["runs"] == []


async def test_a_stored_run_with_a_time_out_of_range_breaks_no_read(
    memory_store: RedisStore,
) -> None:
    client = Client(memory_store)
    await client.start(echo, 1, run_id="healthy")
    await plant(memory_store, "late", STORED["late"])
    await plant(memory_store, "early", STORED["early"])
    async with api(client) as http:
        listed = await http.get("/v1/runs")
        assert listed.status_code == 200, listed.text
        runs = {r["run_id"]: r for r in listed.json()["runs"]}
        assert sorted(runs) == ["early", "healthy", "late"]
        assert runs["healthy"]["damage"] is None
        for run_id in ("late", "early"):
            assert "field 'start_at' is out of range" in runs[run_id]["damage"]
            assert runs[run_id]["start_at"] is None
            one = await http.get(f"/v1/runs/{run_id}")
            assert one.status_code == 200 and one.json() == runs[run_id]
            for part in ("timeline", "waits", "export", "events", "checkpoints"):
                read = await http.get(f"/v1/runs/{run_id}/{part}")
                assert read.status_code == 200, (part, read.text)
        canceled = await http.post("/v1/runs/late/cancel", json={"reason": "planted"})
        assert canceled.status_code == 200, canceled.text
        assert canceled.json()["status"] == "canceled"

        page = await http.get("/ui/runs")
        assert page.status_code == 200, page.text
        assert "healthy" in page.text and page.text.count("data-damaged") == 2
        shown = await http.get("/ui/runs/early")
        assert shown.status_code == 200, shown.text
        assert "data-damage" in shown.text and "field &#39;start_at&#39; is out of range" in (
            shown.text
        )
        assert (await http.get("/ui/counts")).status_code == 200


# -- Low: 4xx, not 500 ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v1/runs?since=9999-12-31T23:59:59-14:00", 422),
        ("GET", "/v1/runs?since=0001-01-01T00:00:00%2B14:00", 422),
        ("GET", f"/v1/runs?cursor={TAMPERED_CURSOR}", 422),
        ("GET", "/ui/runs?since=9999-12-31T23:59:59-14:00", 422),
        ("GET", f"/ui/runs?cursor={TAMPERED_CURSOR}", 422),
        ("GET", "/ui/runs?limit=²", 422),
        ("GET", "/ui/runs?limit=" + "9" * 5000, 200),  # cut down to 200, as 1000 is
        ("GET", "/ui/counts?flow=%00", 422),
        ("GET", "/ui/runs/%00", 422),
        ("GET", "/ui/runs/%00/live", 422),
        ("GET", "/v1/runs/%00", 422),
        ("GET", "/v1/runs/" + "x" * 400, 422),
        ("GET", "/ui/runs/" + "x" * 400, 422),
        ("GET", "/ui/runs/" + "x" * 400 + "/live", 422),
        ("GET", "/v1/runs/" + "x" * 400 + "/events", 422),
    ],
)
async def test_bad_queries_and_ids_are_4xx(
    memory_store: RedisStore, method: str, path: str, status: int
) -> None:
    client = Client(memory_store)
    await client.start(echo, 1, run_id="healthy")
    async with api(client) as http:
        answer = await http.request(method, path)
    assert answer.status_code == status, answer.text[:500]
    if path.startswith("/v1/"):
        problem(answer, status, "invalid_argument")


async def _chunks(chunks: list[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def test_a_form_over_max_body_is_413_signed_in_or_not(memory_store: RedisStore) -> None:
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    body = b"token=" + b"x" * MIB
    async with api(Client(memory_store)) as http:
        stranger = await http.post(
            "/ui/signin", content=body, headers={**form, "Authorization": ""}
        )
        approve = await http.post("/ui/runs/x/approve", content=body, headers=form)
        unsized = await http.post(  # no Content-Length: refused while it is read
            "/ui/runs/x/approve", content=_chunks([b"name=x&"] + [b"x" * 65536] * 17), headers=form
        )
    for answer in (stranger, approve, unsized):
        assert answer.status_code == 413, answer.text[:300]
        assert "over the limit of 1,048,576 bytes" in answer.text


# -- run ids the routes would shadow -------------------------------------------------------


def _route_table(store: RedisStore) -> list[tuple[str, str]]:
    """(method, path) of every route of the app, the console's (mounted) included."""
    app = create_app(Client(store), authenticate=BearerTokens({"x" * 16: "x"}))
    out: list[tuple[str, str]] = []
    for route in app.routes:
        mounted = route.routes if isinstance(route, Mount) else [route]
        prefix = route.path if isinstance(route, Mount) else ""
        for r in mounted:
            if isinstance(r, StarletteRoute):
                out.extend((m, prefix + r.path) for m in r.methods or ())
    return out


async def test_the_reserved_endings_are_the_paths_that_shadow_a_run(
    memory_store: RedisStore,
) -> None:
    table = _route_table(memory_store)
    tail = "{run_id:path}"
    run_pages = {(m, p.removesuffix(tail)) for m, p in table if p.endswith(tail)}
    shadowing = set()
    for method, path in table:
        for m, prefix in run_pages:
            if method == m and path.startswith(prefix + tail + "/"):
                rest = path.removeprefix(prefix + tail)
                if "{" not in rest:  # a literal ending: the run id's page loses it
                    shadowing.add(rest)
    from sdk._core._checks import RESERVED_ENDINGS

    assert shadowing == set(RESERVED_ENDINGS) == set(ENDINGS)


@pytest.mark.parametrize("ending", ENDINGS)
async def test_a_run_id_a_route_would_shadow_is_refused_at_start(
    memory_store: RedisStore, ending: str
) -> None:
    client = Client(memory_store)
    await client.start(echo, 1, run_id="source")
    await Worker(memory_store, flows=[echo]).run_until_idle()
    async with api(client) as http:
        started = await http.post(
            "/v1/runs", json={"flow": "tests.http_boundary.echo", "run_id": f"x{ending}"}
        )
        assert ending in problem(started, 422, "invalid_argument")["detail"]
        forked = await http.post("/v1/runs/source/fork", json={"new_run_id": f"y{ending}"})
        problem(forked, 422, "invalid_argument")
        # the flow this event starts would get the id "<flow>:z/events": refused first
        sent = await http.post(
            "/v1/events", json={"name": "tests.http_boundary.event", "event_id": f"z{ending}"}
        )
        assert "run id for flow" in problem(sent, 422, "invalid_argument")["detail"]
    assert sorted(r.run_id for r in await client.list_runs()) == ["source"]


# -- hostile nesting -----------------------------------------------------------------------


async def test_a_body_nested_past_the_bound_is_400_whatever_the_stack(
    memory_store: RedisStore,
) -> None:
    def body(depth: int) -> bytes:  # {"flow", "args": [...]}: the body nests depth levels
        inner = depth - 2
        return (
            b'{"flow": "tests.http_boundary.echo", "args": [' + b"[" * inner + b"]" * inner + b"]}"
        )

    async with api(Client(memory_store)) as http:
        json_type = {"Content-Type": "application/json"}
        deep = await http.post("/v1/runs", content=body(MAX_JSON_DEPTH + 1), headers=json_type)
        at_bound = await http.post("/v1/runs", content=body(MAX_JSON_DEPTH), headers=json_type)
    assert (
        "nested too deeply (more than 100 levels)" in problem(deep, 400, "invalid_json")["detail"]
    )
    # within the bound: the serializer's own bound on a value names the argument
    assert (
        "nested more than 64 levels deep" in problem(at_bound, 422, "serialization_error")["detail"]
    )


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 990, 100_000])
async def test_a_console_payload_nested_past_the_bound_is_422(
    memory_store: RedisStore, depth: int
) -> None:
    client = Client(memory_store)
    await client.start(echo, 1, run_id="r1")
    async with api(client) as http:
        csrf = csrf_of((await http.get("/ui/runs/r1")).text)
        payload = "[" * depth + "]" * depth
        answer = await http.post(
            "/ui/runs/r1/signal", data={"csrf": csrf, "name": "go", "payload": payload}
        )
    assert answer.status_code == 422, answer.text[:300]
    assert "the payload nests more than 100 levels deep" in answer.text


# -- the same through a real server process ------------------------------------------------


@pytest.mark.slow
@pytest.mark.redis
async def test_the_server_process_refuses_the_planting_start_and_reads_a_planted_run(
    server: str, real_store: RedisStore, redis_url: str, key_prefix: str
) -> None:
    async with httpx.AsyncClient(base_url=server, headers=HEADERS, timeout=20) as http:
        for start_at in PLANTING:
            refused = await http.post(
                "/v1/runs", json={"flow": "tests.http.greet", "args": ["a"], "start_at": start_at}
            )
            assert "body.start_at" in problem(refused, 422, "invalid_argument")["detail"]
        assert (await http.get("/v1/runs")).json()["runs"] == []

        # the run such a request stored before the fix
        healthy = await http.post("/v1/runs", json={"flow": "tests.http.greet", "args": ["b"],
                                                    "run_id": "healthy"})  # fmt: skip
        assert healthy.status_code == 201, healthy.text
        await plant(real_store, "late", STORED["late"])
        listed = await http.get("/v1/runs")
        assert listed.status_code == 200, listed.text
        runs = {r["run_id"]: r for r in listed.json()["runs"]}
        assert sorted(runs) == ["healthy", "late"] and runs["late"]["damage"]
        assert (await http.get("/v1/runs/late")).status_code == 200
        for path in (f"/v1/runs?cursor={TAMPERED_CURSOR}",
                     "/v1/runs?since=9999-12-31T23:59:59-14:00"):  # fmt: skip
            problem(await http.get(path), 422, "invalid_argument")
        page = await http.get("/ui/runs")
        assert page.status_code == 200 and "data-damaged" in page.text
        assert (await http.get("/ui/runs/late")).status_code == 200
        canceled = await http.post("/v1/runs/late/cancel", json={"reason": "planted"})
        assert canceled.status_code == 200, canceled.text

    listing = await asyncio.to_thread(
        subprocess.run,
        [STEADYFLOW, "runs", "list", "--store", redis_url, "--prefix", key_prefix],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert listing.returncode == 0, listing.stderr
    assert "late" in listing.stdout and "(damaged)" in listing.stdout
    assert "Traceback" not in listing.stderr
