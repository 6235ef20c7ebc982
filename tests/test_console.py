"""The web console (sdk.console) through httpx's ASGI transport: sign-in, CSRF,
pages, actions and refusals. The flows here are also served by the real
processes of test_console_browser.py (``steadyflow serve tests.test_console``)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from sdk import (
    Client,
    Queue,
    RetryPolicy,
    RunStatus,
    Worker,
    flow,
    run_child,
    sleep,
    step,
    wait_for,
)
from sdk.http import BearerTokens, create_app
from stores.redis import RedisStore

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef00"
TOKENS = {ALICE: "alice", BOB: "bob"}

# -- flows (also served by the browser test's processes) ------------------------------


@step(name="tests.console.reserve", retry=RetryPolicy(max_attempts=3, initial_interval=0.05))
async def reserve(workdir: str) -> dict[str, Any]:
    """Fails its first attempt (a file remembers it), so the timeline shows a retry."""
    tried = Path(workdir) / "reserve.tried"
    if not tried.exists():
        tried.write_text("1")
        raise ConnectionError("warehouse did not answer")
    return {"reserved": True, "items": list(range(3))}


@step(name="tests.console.pack")
async def pack(workdir: str) -> str:
    """With a ``crash`` file present, hangs on its first execution until the test
    kills the worker; a later activation (the recovery) finishes it."""
    started = Path(workdir) / "pack.started"
    if (Path(workdir) / "crash").exists() and not started.exists():
        started.write_text("1")
        await asyncio.sleep(3600)  # the worker is killed during this
    return "packed"


@step(name="tests.console.ship")
async def ship(workdir: str) -> str:
    """Waits for a ``release`` file when a ``hold`` file exists, so a test can watch
    the run finish live."""
    # a file the test process writes: there is no event to await across processes
    while (Path(workdir) / "hold").exists() and not (Path(workdir) / "release").exists():  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    return "shipped"


@flow(name="tests.console.shipment")
async def shipment(workdir: str, note: str = "") -> dict[str, Any]:
    """Reserve (retried), pack (crash-recovered), wait for alice's approval, ship."""
    await reserve(workdir)
    await pack(workdir)
    decision = await wait_for("ship-order", human=True, approvers=["alice"])
    if not decision.approved:
        return {"shipped": False, "by": decision.actor}
    return {"shipped": await ship(workdir) == "shipped", "by": decision.actor}


@flow(name="tests.console.echo")
async def echo(value: Any) -> Any:
    return value


@step(name="tests.console.refuse", retry=RetryPolicy(max_attempts=1))
async def refuse(why: str) -> None:
    raise PermissionError(why)


@flow(name="tests.console.refused")
async def refused(why: str) -> None:
    await refuse(why)


@flow(name="tests.console.line_reservation")
async def line(sku: str) -> str:
    return f"held {sku}"


@flow(
    name="tests.console.order_fulfillment",
    queue=Queue("tests.console.payments", concurrency=4),
)
async def fulfillment(order_id: str, skus: list[str]) -> list[str]:
    """Children first, then a person approves, then a sleep: three kinds of waits."""
    holds = await asyncio.gather(*(run_child(line, sku) for sku in skus))
    await wait_for("manager-approval", human=True)
    await sleep(60)
    return list(holds)


# -- the harness ------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def console(client: Client, token: str | None = ALICE) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on the app, signed in with `token` (None: not signed in)."""
    app = create_app(client, authenticate=BearerTokens(TOKENS))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sf") as http:
        if token is not None:
            answer = await http.post("/ui/signin", data={"token": token, "next": "/ui/runs"})
            assert answer.status_code == 303, answer.text
        yield http


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', html)
    assert found is not None, "no CSRF field on the page"
    return found.group(1)


async def waiting_shipment(client: Client, workdir: Path, run_id: str = "order-1") -> str:
    """A shipment run that waits for approval (after one retried step)."""
    await client.start(shipment, str(workdir), run_id=run_id)
    await Worker(client.store, flows=[shipment]).run_until_idle()
    assert (await client.get(run_id)).status is RunStatus.WAITING_FOR_HUMAN
    return run_id


@pytest.fixture(name="client")
def client_fixture(memory_store: RedisStore) -> Client:
    return Client(memory_store)


# -- signing in ---------------------------------------------------------------------------


async def test_pages_send_a_stranger_to_the_sign_in_form(client: Client) -> None:
    async with console(client, token=None) as http:
        answer = await http.get("/ui/runs/order-1?all=1")
        assert answer.status_code == 303
        assert answer.headers["location"] == "/ui/signin?next=%2Fui%2Fruns%2Forder-1%3Fall%3D1"
        form = await http.get(answer.headers["location"])
        assert 'name="token"' in form.text and 'value="/ui/runs/order-1?all=1"' in form.text
        wrong = await http.post("/ui/signin", data={"token": "not-a-token-of-this-server"})
        assert wrong.status_code == 401
        assert "not known to this server" in wrong.text
        assert "set-cookie" not in wrong.headers


async def test_sign_in_opens_a_session_in_a_strict_http_only_cookie(client: Client) -> None:
    async with console(client, token=None) as http:
        answer = await http.post(
            "/ui/signin", data={"token": ALICE, "next": "https://evil.example/ui/"}
        )
        assert answer.status_code == 303
        assert answer.headers["location"] == "/ui/runs"  # never another site
        cookie = answer.headers["set-cookie"]
        assert cookie.startswith("steadyflow_session=") and ALICE not in cookie
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
        home = await http.get("/ui/")
        assert home.status_code == 307 and home.headers["location"] == "/ui/runs"
        page = await http.get("/ui/runs")
        assert page.status_code == 200
        assert "Signed in as <strong data-actor>alice</strong>" in page.text
        out = await http.post("/ui/signout", data={"csrf": csrf_of(page.text)})
        assert out.status_code == 303
        assert (await http.get("/ui/runs")).status_code == 303  # signed out


async def test_an_authorization_header_works_without_signing_in(client: Client) -> None:
    async with console(client, token=None) as http:
        page = await http.get("/ui/runs", headers={"Authorization": f"Bearer {BOB}"})
        assert page.status_code == 200
        assert "<strong data-actor>bob</strong>" in page.text
        api = await http.get("/v1/runs", headers={"Authorization": f"Bearer {BOB}"})
        assert api.status_code == 200  # the same token, the same app


# -- pages --------------------------------------------------------------------------------


async def test_runs_list_filters_pages_and_finds_a_run_by_id(client: Client) -> None:
    for n in range(7):
        await client.start(echo, n, run_id=f"echo-{n}")
    await Worker(client.store, flows=[echo]).run_until_idle()
    await client.start(echo, "later", run_id="pending-1")
    async with console(client) as http:
        first = await http.get("/ui/runs", params={"limit": 3})
        ids = re.findall(r'<a class="runid" href="/ui/runs/([^"]+)">', first.text)
        assert ids == ["pending-1", "echo-6", "echo-5"]
        cursor = re.search(r'cursor=([^"&]+)"', first.text)
        assert cursor is not None
        second = await http.get(f"/ui/runs?limit=3&cursor={cursor.group(1)}")
        assert re.findall(r'<a class="runid" href="/ui/runs/(echo-\d)">', second.text) == [
            "echo-4", "echo-3", "echo-2"
        ]  # fmt: skip
        pending = await http.get("/ui/runs", params={"status": "pending"})
        assert "pending-1" in pending.text and "echo-1" not in pending.text
        counts = await http.get("/ui/counts")
        assert re.search(r"completed <strong>7</strong>", counts.text)
        assert re.search(r"pending <strong>1</strong>", counts.text)
        exact = await http.get("/ui/runs", params={"q": "echo-3"})
        assert exact.status_code == 303 and exact.headers["location"] == "/ui/runs/echo-3"
        part = await http.get("/ui/runs", params={"q": "cho-"})
        assert len(re.findall(r'<a class="runid" href="/ui/runs/echo-\d">', part.text)) == 7
        bad = await http.get("/ui/runs", params={"since": "yesterday"})
        assert bad.status_code == 422 and "is not a date and time" in bad.text


async def test_run_page_shows_the_wait_the_retry_and_collapses_large_payloads(
    client: Client, tmp_path: Path
) -> None:
    run_id = await waiting_shipment(client, tmp_path)
    await client.start(echo, {"blob": "x" * 5000, "html": "<script>alert(1)</script>"},
                       run_id="big")  # fmt: skip
    await Worker(client.store, flows=[echo]).run_until_idle()
    async with console(client) as http:
        page = (await http.get(f"/ui/runs/{run_id}")).text
        assert 'data-wait="ship-order"' in page
        assert '<strong class="approvers">alice</strong>' in page  # the wait's approvers=
        assert ">Approve</button>" in page and ">Deny</button>" in page
        assert 'data-kind="retry"' in page and "warehouse did not answer" in page
        assert "#1 start" in page
        assert 'data-live="/ui/runs/order-1/live?cursor=' in page  # followed live
        big = (await http.get("/ui/runs/big")).text
        assert '<details class="json"><summary>Result' in big
        assert "<script>alert(1)</script>" not in big and "&lt;script&gt;" in big
        assert 'data-live=""' in big  # an ended run is not followed
        await client.start(refused, "<b>card declined</b>", run_id="failed")
        await Worker(client.store, flows=[refused]).run_until_idle()
        failed = (await http.get("/ui/runs/failed")).text
        assert "<summary>Traceback</summary>" in failed and "in refuse" in failed
        assert "&lt;b&gt;card declined&lt;/b&gt;" in failed and "<b>card" not in failed
        missing = await http.get("/ui/runs/no-such-run")
        assert missing.status_code == 404 and "No run no-such-run" in missing.text
        for path in ("/ui/queues", "/ui/schedules", "/ui/workers"):
            assert (await http.get(path)).status_code == 200


async def test_the_runs_list_shows_top_level_runs_what_they_wait_on_and_how_long(
    client: Client,
) -> None:
    await client.start(fulfillment, "o-1", ["apple", "pear"], run_id="order-9")
    await Worker(client.store).run_until_idle()
    record = await client.get("order-9")
    assert [w.kind for w in record.waiting_on] == ["human"]
    async with console(client) as http:
        page = (await http.get("/ui/runs")).text
        runs = re.findall(r'<a class="runid" href="/ui/runs/([^"]+)">', page)
        assert runs == ["order-9"]  # its child runs are on its page, not among the top level
        assert "Show child runs and schedule ticks too" in page
        chip = '<span class="wk wk-human">approval</span> <code>manager-<wbr>approval</code>'
        assert chip in page
        assert '<th scope="col" class="num">Duration</th>' in page
        everything = (await http.get("/ui/runs", params={"children": "1"})).text
        kids = re.findall(r'<a class="runid" href="/ui/runs/([^"]+)">', everything)
        assert len(kids) == 3 and kids[-1] == "order-9"
        assert everything.count('child of <a href="/ui/runs/order-9">') == 2
        approvals = (await http.get("/ui/runs", params={"waiting_on": "human"})).text
        assert re.findall(r'<a class="runid" href="/ui/runs/([^"]+)">', approvals) == ["order-9"]
        sleeping = (await http.get("/ui/runs", params={"waiting_on": "sleep"})).text
        assert "No runs match." in sleeping
        run = (await http.get("/ui/runs/order-9")).text
        assert "Child runs (2)" in run and run.count("tests.console.line_reservation") >= 2
        # what it waits on, as the flow wrote it: no journal key outside the raw JSON
        waits = run.split('aria-labelledby="waits-h"')[1].split("</section>")[0]
        assert "manager-approval" in waits and "~" not in waits
        timeline = run.split('class="gantt"')[1].split("</ol>")[0]
        assert "~result" not in timeline and "~wait" not in timeline
        assert "approval manager-approval" in timeline


@flow(name="tests.console.tick")
async def tick(at: datetime) -> str:
    return at.isoformat()


async def test_schedule_ticks_are_tagged_and_kept_out_of_the_overview(client: Client) -> None:
    await client.create_schedule("tests.console.hourly", tick, cron="0 * * * *")
    await client.start(echo, 1, run_id="plain-1")
    ticked = await client.trigger_schedule("tests.console.hourly")
    await Worker(client.store, flows=[tick, echo]).run_until_idle()
    async with console(client) as http:
        overview = (await http.get("/ui/runs")).text
        everything = (await http.get("/ui/runs", params={"children": "1"})).text
        by_flow = (await http.get("/ui/runs", params={"flow": "tests.console.tick"})).text
        schedules = (await http.get("/ui/schedules")).text

    ids = re.findall(r'<a class="runid" href="/ui/runs/([^"]+)">', overview)
    assert ids == ["plain-1"]
    assert ticked.run_id in everything and ticked.run_id in by_flow  # a filter finds it
    assert 'href="/ui/schedules#schedule-tests.console.hourly"' in everything
    assert ">schedule tick</a>" in by_flow
    row = schedules.split('id="schedule-tests.console.hourly"')[1].split("</tr>")[0]
    assert ticked.run_id in row and 'class="status s-completed"' in row


async def test_the_workers_queues_and_schedules_pages_show_fields_not_json(client: Client) -> None:
    await client.start(echo, 1, queue="tests.console.undeclared")
    worker = Worker(client.store, flows=[echo], queues=["default", "tests.console.payments"],
                    name="console-worker-1")  # fmt: skip
    task = asyncio.create_task(worker.run())
    try:
        async with console(client) as http:
            for _ in range(200):
                if await client.workers():
                    break
                await asyncio.sleep(0.02)
            page = (await http.get("/ui/workers")).text
            assert '<li><a class="plain" href="/ui/runs?flow=tests.console.echo">' in page
            assert '["' not in page  # the flows and queues are chips, not a JSON list
            assert '<td data-label="Pid" class="num nowrap">' in page
            assert "<meter" in page
            queues = (await http.get("/ui/queues")).text
            row = queues.split("tests.console.undeclared</a>")[1].split("</tr>")[0]
            assert "not declared here: no limits" in row
            assert (await http.get("/ui/schedules")).status_code == 200
    finally:
        await worker.stop()
        await task


# -- acting -------------------------------------------------------------------------------


async def test_approve_goes_through_the_client_as_the_signed_in_actor(
    client: Client, tmp_path: Path
) -> None:
    run_id = await waiting_shipment(client, tmp_path)
    async with console(client) as http:
        csrf = csrf_of((await http.get(f"/ui/runs/{run_id}")).text)
        answer = await http.post(
            f"/ui/runs/{run_id}/approve",
            data={"csrf": csrf, "name": "ship-order", "reason": "looks fine"},
        )
        assert answer.status_code == 303
        assert answer.headers["location"] == f"/ui/runs/{run_id}?done=approve"
        assert "Approved." in (await http.get(answer.headers["location"])).text
    await Worker(client.store, flows=[shipment]).run_until_idle()
    assert await client.handle(run_id).result() == {"shipped": True, "by": "alice"}


async def test_a_refused_approve_is_shown_and_audited(client: Client, tmp_path: Path) -> None:
    run_id = await waiting_shipment(client, tmp_path)
    async with console(client, token=BOB) as http:
        csrf = csrf_of((await http.get(f"/ui/runs/{run_id}")).text)
        answer = await http.post(f"/ui/runs/{run_id}/approve",
                                 data={"csrf": csrf, "name": "ship-order"})  # fmt: skip
        assert answer.status_code == 403
        assert re.search(r'role="alert" data-refusal>Approve refused: [^<]*bob', answer.text)
    denied = [e for e in await client.events(run_id) if e.type == "auth.denied"]
    assert len(denied) == 1 and denied[0].data["actor"] == "bob"
    assert (await client.get(run_id)).status is RunStatus.WAITING_FOR_HUMAN


async def test_forms_need_the_csrf_token_and_the_same_origin(
    client: Client, tmp_path: Path
) -> None:
    run_id = await waiting_shipment(client, tmp_path)
    async with console(client) as http:
        csrf = csrf_of((await http.get(f"/ui/runs/{run_id}")).text)
        data = {"name": "ship-order"}
        forged = await http.post(f"/ui/runs/{run_id}/approve", data=data)
        assert forged.status_code == 403 and "stale" in forged.text
        elsewhere = await http.post(f"/ui/runs/{run_id}/approve", data={**data, "csrf": csrf},
                                    headers={"Origin": "https://evil.example"})  # fmt: skip
        assert elsewhere.status_code == 403
    assert (await client.get(run_id)).status is RunStatus.WAITING_FOR_HUMAN


async def test_cancel_asks_for_confirmation_and_a_signal_for_json(
    client: Client, tmp_path: Path
) -> None:
    run_id = await waiting_shipment(client, tmp_path)
    async with console(client) as http:
        csrf = csrf_of((await http.get(f"/ui/runs/{run_id}")).text)
        unconfirmed = await http.post(f"/ui/runs/{run_id}/cancel",
                                      data={"csrf": csrf, "reason": "customer left"})  # fmt: skip
        assert unconfirmed.status_code == 422 and "confirmation box" in unconfirmed.text
        assert (await client.get(run_id)).status is RunStatus.WAITING_FOR_HUMAN
        bad = await http.post(f"/ui/runs/{run_id}/signal",
                              data={"csrf": csrf, "name": "note", "payload": "{nope"})  # fmt: skip
        assert bad.status_code == 422 and "the payload is not JSON" in bad.text
        sent = await http.post(
            f"/ui/runs/{run_id}/signal",
            data={"csrf": csrf, "name": "note", "payload": '{"a": [1]}'},
        )
        assert sent.status_code == 303
        done = await http.post(
            f"/ui/runs/{run_id}/cancel",
            data={"csrf": csrf, "reason": "customer left", "confirm": "yes"},
        )
        assert done.status_code == 303
    await Worker(client.store, flows=[shipment]).run_until_idle()
    record = await client.get(run_id)
    assert record.status is RunStatus.CANCELED and record.reason == "customer left"


async def test_replay_from_a_checkpoint_opens_the_new_run(client: Client) -> None:
    await client.start(echo, 1, run_id="src")
    await Worker(client.store, flows=[echo]).run_until_idle()
    checkpoint = (await client.checkpoints("src"))[0].checkpoint_id
    async with console(client) as http:
        csrf = csrf_of((await http.get("/ui/runs/src")).text)
        answer = await http.post(
            "/ui/runs/src/replay",
            data={"csrf": csrf, "checkpoint_id": checkpoint, "confirm": "yes"},
        )
        assert answer.status_code == 303
        new_id = answer.headers["location"].removeprefix("/ui/runs/").partition("?")[0]
        assert new_id != "src"
        page = (await http.get(answer.headers["location"])).text
        assert "This run is a replay" in page and 'href="/ui/runs/src"' in page


async def test_the_console_follows_a_prefix_the_app_is_mounted_under(client: Client) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    await client.start(echo, 1, run_id="e1")
    app = Starlette(
        routes=[Mount("/sf", app=create_app(client, authenticate=BearerTokens(TOKENS)))]
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sf") as http:
        away = await http.get("/sf/ui/runs/e1")
        assert away.headers["location"] == "/sf/ui/signin?next=%2Fsf%2Fui%2Fruns%2Fe1"
        signed = await http.post("/sf/ui/signin", data={"token": ALICE, "next": "/sf/ui/runs/e1"})
        assert signed.headers["location"] == "/sf/ui/runs/e1"
        assert "Path=/sf/ui" in signed.headers["set-cookie"]
        page = (await http.get("/sf/ui/runs/e1")).text
        assert 'href="/sf/ui/static/console.css"' in page and 'href="/sf/ui/runs"' in page
        assert (await http.get("/sf/ui/static/console.js")).status_code == 200


async def test_a_finished_runs_live_stream_says_it_ended(client: Client) -> None:
    await client.start(echo, 1, run_id="e2")
    await Worker(client.store, flows=[echo]).run_until_idle()
    async with console(client) as http:
        answer = await http.get("/ui/runs/e2/live")
        assert answer.headers["content-type"].startswith("text/event-stream")
        assert "event: changed" in answer.text  # the events after no cursor: all of them
        assert answer.text.endswith("event: end\ndata: {}\n\n")
        missing = await http.get("/ui/runs/nope/live")
        assert missing.status_code == 404
