"""``GET /v1/runs/{run_id}/events`` with ``Accept: text/event-stream``: the log, then live.

httpx's ASGI transport hands a body over only once it is complete, so the
live tests drive the app with a small ASGI client of their own (`Stream`)
that reads the body as it is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from sdk import Client
from sdk.http import create_app
from testing import FlowTestEnv
from tests.test_http import (
    TOKEN,
    api,
    env_fixture,  # noqa: F401 (the "env" fixture)
    problem,
)

# a live event must come from the feed: the stream's idle re-check is far off
NO_IDLE_CHECK = 3600.0


class Stream:
    """One streaming GET against an ASGI app; `read_until` reads the body as it comes."""

    def __init__(self, app: Any, path: str, headers: dict[str, str]) -> None:
        self.app = app
        self.path = path
        self.headers = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        self.sent: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.gone = asyncio.Event()
        self.requested = False
        self.text = ""
        self.status = 0
        self.ended = False

    async def _receive(self) -> dict[str, Any]:
        if not self.requested:
            self.requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict[str, Any]) -> None:
        await self.sent.put(message)

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[Stream]:
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "GET", "scheme": "http", "path": self.path,
            "raw_path": self.path.encode(), "query_string": b"", "root_path": "",
            "headers": [(b"host", b"sf"), *self.headers],
            "client": ("127.0.0.1", 5000), "server": ("sf", 80),
        }  # fmt: skip
        task = asyncio.create_task(self.app(scope, self._receive, self._send))
        try:
            yield self
        finally:
            self.gone.set()  # the client hangs up
            await asyncio.wait_for(task, 10)

    async def read_until(self, text: str | None) -> str:
        """The body so far, once it holds `text` (None: once it has ended); fails
        after 20 s without it."""

        async def more() -> None:
            while (text not in self.text) if text is not None else not self.ended:
                if self.ended:
                    raise AssertionError(f"the stream ended without {text!r}:\n{self.text}")
                message = await self.sent.get()
                if message["type"] == "http.response.start":
                    self.status = message["status"]
                else:
                    self.text += message.get("body", b"").decode()
                    self.ended = not message.get("more_body", False)

        await asyncio.wait_for(more(), 20)
        return self.text


def frames(text: str) -> list[dict[str, str]]:
    """The SSE messages of `text` that carry an event (comments left out)."""
    out = []
    for block in text.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":")
        )
        if "event" in fields:
            out.append(fields)
    return out


def stream_headers(**extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}", "Accept": "text/event-stream", **extra}


def app_of(client: Client, **options: Any) -> Any:
    from sdk.http import BearerTokens

    return create_app(client, authenticate=BearerTokens({TOKEN: "ops"}), **options)


async def test_the_stream_delivers_an_event_appended_after_it_started(env: FlowTestEnv) -> None:
    handle = await env.start("tests.http.signalled", run_id="live-1")
    await env.run_until_idle()
    app = app_of(env.client, sse_idle=NO_IDLE_CHECK)

    async with Stream(app, "/v1/runs/live-1/events", stream_headers()).open() as stream:
        backlog = await stream.read_until("event: run.waiting_for_signal")
        assert stream.status == 200
        assert "event: signal.received" not in backlog

        await env.client.signal("live-1", "go", {"n": 7})  # after the request started
        text = await stream.read_until("event: signal.received")
        await env.run_until_idle()
        await stream.read_until("event: end")
        text = await stream.read_until(None)

    assert stream.ended
    got = frames(text)
    types = [f["event"] for f in got]
    assert types[:2] == ["run.created", "run.started"]
    after = types[types.index("run.waiting_for_signal") + 1 :]
    assert after[0] == "signal.received"
    assert after[-2:] == ["run.completed", "end"]
    ids = [f["id"] for f in got if "id" in f]
    assert ids == [e.event_id for e in await env.client.events("live-1")]
    assert await handle.result() == {"n": 7}


async def test_a_quiet_stream_sends_keep_alives_and_stops_when_the_client_leaves(
    env: FlowTestEnv,
) -> None:
    await env.start("tests.http.signalled", run_id="quiet-1")
    await env.run_until_idle()
    app = app_of(env.client, sse_keepalive=0.05, sse_idle=NO_IDLE_CHECK)

    async with Stream(app, "/v1/runs/quiet-1/events", stream_headers()).open() as stream:
        await stream.read_until(": keep-alive")
        await stream.read_until(": keep-alive\n\n: keep-alive")
    # leaving the block hung up, and the app's call returned (Stream.open waited for it)
    assert not stream.ended


async def test_last_event_id_resumes_after_that_event(env: FlowTestEnv) -> None:
    await env.start("tests.http.greet", "ada", run_id="done-1")
    await env.run_until_idle()
    events = await env.client.events("done-1")

    async with api(env.client) as http:
        answer = await http.get(
            "/v1/runs/done-1/events",
            headers={"Accept": "text/event-stream", "Last-Event-ID": events[1].event_id},
        )

    assert answer.headers["content-type"].startswith("text/event-stream")
    assert answer.headers["cache-control"] == "no-store"
    got = frames(answer.text)
    assert [f.get("id") for f in got[:-1]] == [e.event_id for e in events[2:]]
    assert got[-1] == {"event": "end", "data": "{}"}


async def test_a_stream_of_an_unknown_run_or_a_bad_cursor_is_a_problem(env: FlowTestEnv) -> None:
    await env.start("tests.http.greet", "ada", run_id="done-2")
    sse = {"Accept": "text/event-stream"}
    async with api(env.client) as http:
        unknown = await http.get("/v1/runs/ghost/events", headers=sse)
        bad = await http.get("/v1/runs/done-2/events", headers={**sse, "Last-Event-ID": "nope"})

    assert problem(unknown, 404, "run_not_found")["run_id"] == "ghost"
    assert "cursor" in problem(bad, 422, "invalid_argument")["detail"]
