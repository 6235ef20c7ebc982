"""Live streams share one subscription to the store's feed and are bounded (issue 30).

The shared feed (`sdk.client._feed.SharedFeed`) and the limits (`create_app(
max_streams=, max_streams_per_actor=)`) in process; then a real ``steadyflow
serve`` on a private redis-server with 200 streams: the server holds one
subscription and a few more connections, a token over its limit and a server
over its own answer 429 with ``Retry-After``, ``/healthz`` stays quick, and
every stream gets every event of its run, in order, also across a reconnect
with ``Last-Event-ID``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from sdk import Client
from sdk.client._feed import SharedFeed
from sdk.errors import InvalidArgument
from sdk.http import BearerTokens, create_app
from stores.redis import RedisStore
from testing import FlowTestEnv
from tests.conftest import PrivateRedis
from tests.test_http import PROBLEM, TOKEN, problem
from tests.test_http_serve import serving
from tests.test_http_sse import NO_IDLE_CHECK, Stream

OTHER = "other-token-0123456789abcdef"


class Spy:
    """Counts the subscriptions `store.follow` makes and `store.unfollow` closes;
    `broken` makes every read of a subscription fail."""

    def __init__(self, store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made = self.closed = 0
        self.broken = False
        follow, unfollow = store.follow, store.unfollow

        async def counted_follow(subscription: Any, timeout: float, count: int) -> Any:
            if subscription is None:
                self.made += 1
            elif self.broken:
                raise ConnectionError("the feed's connection broke")
            return await follow(subscription, timeout, count)

        async def counted_unfollow(subscription: Any) -> None:
            self.closed += 1
            await unfollow(subscription)

        monkeypatch.setattr(store, "follow", counted_follow)
        monkeypatch.setattr(store, "unfollow", counted_unfollow)


@pytest.fixture(name="env")
async def env_fixture(memory_store: RedisStore) -> AsyncIterator[FlowTestEnv]:
    async with FlowTestEnv(store=memory_store) as env:
        yield env


async def waiting_runs(env: FlowTestEnv, *run_ids: str) -> None:
    for run_id in run_ids:
        await env.start("tests.http.signalled", run_id=run_id)
    await env.run_until_idle()


async def test_followers_of_many_runs_share_one_subscription(
    env: FlowTestEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    await waiting_runs(env, "a", "b")
    spy = Spy(env.store, monkeypatch)  # type: ignore[arg-type]
    feed = SharedFeed(env.store)

    async with contextlib.AsyncExitStack() as stack:
        of_a = [await stack.enter_async_context(feed.watch("a")) for _ in range(50)]
        of_b = [await stack.enter_async_context(feed.watch("b")) for _ in range(50)]
        of_all = await stack.enter_async_context(feed.watch(None))
        assert (spy.made, feed.followers, feed.subscribed) == (1, 101, True)

        await env.client.signal("a", "go", 1)  # appends signal.received to a's log
        assert all([await bell.wait(5) for bell in of_a])
        assert await of_all.wait(5)
        assert not any([await bell.wait(0.05) for bell in of_b])

    assert (spy.made, spy.closed, feed.followers, feed.subscribed) == (1, 1, 0, False)
    async with feed.watch("a"):  # the next follower subscribes again
        assert (spy.made, feed.subscribed) == (2, True)


async def test_a_broken_feed_fails_every_follower_and_the_next_one_subscribes_again(
    env: FlowTestEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    await waiting_runs(env, "a")
    spy = Spy(env.store, monkeypatch)  # type: ignore[arg-type]
    feed = SharedFeed(env.store)

    async with feed.watch("a") as first, feed.watch(None) as second:
        spy.broken = True
        await env.client.signal("a", "go", 1)
        for bell in (first, second):
            with pytest.raises(ConnectionError, match="broke"):
                await bell.wait(10)
        spy.broken = False
        async with feed.watch("a") as third:  # a new subscription, while they are still open
            assert spy.made == 2
            await env.client.signal("a", "go", 2)
            assert await third.wait(5)

    assert (spy.closed, feed.subscribed) == (2, False)


def app_of(client: Client, **options: Any) -> Any:
    tokens = BearerTokens({TOKEN: "ops", OTHER: "other"})
    return create_app(client, authenticate=tokens, sse_idle=NO_IDLE_CHECK, **options)


def stream_of(app: Any, path: str, token: str = TOKEN, **headers: str) -> Stream:
    return Stream(
        app, path, {"Authorization": f"Bearer {token}", "Accept": "text/event-stream", **headers}
    )


async def test_streams_over_the_actors_or_the_servers_limit_are_429_with_retry_after(
    env: FlowTestEnv,
) -> None:
    await waiting_runs(env, "w")
    app = app_of(env.client, max_streams=3, max_streams_per_actor=2)
    path = "/v1/runs/w/events"

    async with contextlib.AsyncExitStack() as stack:
        first = await stack.enter_async_context(stream_of(app, path).open())
        await first.read_until("event: run.waiting_for_signal")
        console = await stack.enter_async_context(stream_of(app, "/ui/live").open())
        await console.read_until("retry:")  # the console's streams count too
        async with stream_of(app, path).open() as third:
            text = await third.read_until(None)
        other = await stack.enter_async_context(stream_of(app, path, OTHER).open())
        await other.read_until("event: run.created")
        async with stream_of(app, "/ui/runs/w/live", OTHER).open() as full:
            await full.read_until(None)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://sf"
        ) as http:
            answer = await http.get(
                path, headers={"Authorization": f"Bearer {OTHER}", "Accept": "text/event-stream"}
            )

    assert third.status == 429
    assert full.status == 429
    assert "'ops' holds 2 live streams open" in text
    body = problem(answer, 429, "too_many_streams")
    assert answer.headers["retry-after"] == "10"
    assert "the server holds 3 live streams open" in body["detail"]
    assert first.status == other.status == console.status == 200
    assert app.state.steadyflow.streams.open == 0


async def test_a_stream_gives_its_place_back_when_its_client_leaves(env: FlowTestEnv) -> None:
    await waiting_runs(env, "w")
    app = app_of(env.client, max_streams_per_actor=1)
    path = "/v1/runs/w/events"

    for n in range(3):  # one at a time: each leaves before the next comes
        async with stream_of(app, path).open() as stream:
            await stream.read_until("event: run.waiting_for_signal")
            assert stream.status == 200, n
    async with stream_of(app, "/v1/runs/ghost/events").open() as unknown:  # refused: no place
        await unknown.read_until(None)
    async with stream_of(app, path).open() as stream:
        await stream.read_until("event: run.created")
        assert app.state.steadyflow.streams.open == 1

    assert unknown.status == 404
    assert stream.status == 200
    assert app.state.steadyflow.streams.open == 0


async def test_the_consoles_refused_stream_says_when_to_retry(env: FlowTestEnv) -> None:
    await waiting_runs(env, "w")
    app = app_of(env.client, max_streams_per_actor=1)

    async with stream_of(app, "/ui/runs/w/live").open() as live:
        await live.read_until("retry:")
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://sf"
        ) as http:
            answer = await http.get(
                "/ui/live",
                headers={"Authorization": f"Bearer {TOKEN}", "Accept": "text/event-stream"},
            )

    assert answer.status_code == 429
    assert answer.headers["retry-after"] == "10"
    assert "max_streams_per_actor" in answer.text


@pytest.mark.parametrize(
    "options",
    [
        {"max_streams": 0},
        {"max_streams_per_actor": -1},
        {"max_streams": True},
        {"max_streams": "9"},
    ],
)
def test_create_app_refuses_a_bad_stream_limit(memory_store: RedisStore, options: Any) -> None:
    with pytest.raises(InvalidArgument, match=f"{next(iter(options))} must be a positive int"):
        app_of(Client(memory_store), **options)


# -- a real server ------------------------------------------------------------------------

RUNS = 10
#: Tokens and the streams each opens: 60 + 60 + 60 + 20 = --max-streams.
OPENERS = [(f"streams-token-{n}-0123456789ab", f"user{n}", count)
           for n, count in enumerate((60, 60, 60, 20))]  # fmt: skip
#: The connections the server may hold besides its one subscription: the reads its
#: streams make at once (16) and a few for the test's other requests.
AT_MOST = 24


class Follower:
    """One SSE stream over HTTP; the ids of the events it received."""

    def __init__(self, http: httpx.AsyncClient, run_id: str, token: str, after: str = "") -> None:
        self.http, self.run_id = http, run_id
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
        if after:
            self.headers["Last-Event-ID"] = after
        self.ids: list[str] = []
        self.first = asyncio.Event()
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            for _ in range(100):
                async with self.http.stream(
                    "GET", f"/v1/runs/{self.run_id}/events", headers=self.headers
                ) as answer:
                    if answer.status_code == 429 and self.headers.get("Last-Event-ID"):
                        # a reconnect: the server has not yet seen the last one leave
                        await asyncio.sleep(0.1)
                        continue
                    assert answer.status_code == 200, await answer.aread()
                    async for line in answer.aiter_lines():
                        if line.startswith("id: "):
                            self.ids.append(line[4:])
                            self.first.set()
                    return
        finally:
            self.first.set()

    async def has(self, ids: list[str]) -> None:
        while self.ids != ids:
            assert self.ids == ids[: len(self.ids)], (self.ids, ids)  # in order, no repeat
            assert not self.task.done(), self.task
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def server_connections(admin: aioredis.Redis) -> tuple[int, int]:
    """(connections, subscribed connections) of the private Redis, less `admin`'s."""
    clients = await admin.client_list()
    subscribed = [c for c in clients if any(int(c.get(k, 0)) for k in ("sub", "psub", "ssub"))]
    return len(clients) - 1, len(subscribed)


async def eventually(check: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not await check():
        assert time.monotonic() < deadline, "not within the time"
        await asyncio.sleep(0.1)


@pytest.mark.slow
async def test_a_real_server_serves_200_streams_over_one_subscription_within_its_limits(
    private_redis: PrivateRedis, tmp_path: Path
) -> None:
    tokens = ",".join(f"{token}={actor}:operator" for token, actor, _ in OPENERS)
    store = ["--store", private_redis.url, "--prefix", "sfstreams"]
    limits = ["--max-streams", "200", "--max-streams-per-actor", "60"]
    admin = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    pool = httpx.Limits(max_connections=300)
    with serving(store, tmp_path, *limits, env={"STEADYFLOW_API_TOKENS": tokens}) as base:
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(admin.aclose)
            http = await stack.enter_async_context(
                httpx.AsyncClient(base_url=base, limits=pool, timeout=30)
            )
            as_first = {"Authorization": f"Bearer {OPENERS[0][0]}"}
            run_ids = [f"followed-{n}" for n in range(RUNS)]
            for run_id in run_ids:
                started = await http.post(
                    "/v1/runs", json={"flow": "tests.http.signalled", "run_id": run_id},
                    headers=as_first,
                )  # fmt: skip
                assert started.status_code == 201, started.text
            followers = [
                Follower(http, run_ids[n % RUNS], token)
                for token, _, count in OPENERS
                for n in range(count)
            ]
            for follower in followers:
                stack.push_async_callback(follower.close)
            await asyncio.wait_for(asyncio.gather(*(f.first.wait() for f in followers)), 60)
            held, subscribed = await server_connections(admin)

            sse = {"Accept": "text/event-stream"}
            mine = await http.get(
                "/v1/runs/followed-0/events",
                headers={**sse, "Authorization": f"Bearer {OPENERS[0][0]}"},
            )
            everyone = await http.get(
                "/v1/runs/followed-0/events",
                headers={**sse, "Authorization": f"Bearer {OPENERS[3][0]}"},
            )
            probes = []
            for _ in range(20):
                began = time.monotonic()
                assert (await http.get("/healthz")).status_code == 200
                probes.append(time.monotonic() - began)

            for n in range(2 * RUNS):  # two events a run, each to its 20 streams
                sent = await http.post(
                    f"/v1/runs/{run_ids[n % RUNS]}/signals/go", json={"payload": n},
                    headers=as_first,
                )  # fmt: skip
                assert sent.json()["delivered"] is True
            logs = {}
            for run_id in run_ids:
                page = await http.get(f"/v1/runs/{run_id}/events", headers=as_first)
                logs[run_id] = [e["event_id"] for e in page.json()["events"]]
            await asyncio.wait_for(asyncio.gather(*(f.has(logs[f.run_id]) for f in followers)), 60)
            busy, _ = await server_connections(admin)

            # one leaves; its token's next stream resumes after the event it names
            await followers[0].close()
            log = logs[followers[0].run_id]
            back = Follower(http, followers[0].run_id, OPENERS[0][0], after=log[0])
            stack.push_async_callback(back.close)
            await asyncio.wait_for(back.has(log[1:]), 30)

            for follower in [*followers, back]:
                await follower.close()

            async def unsubscribed() -> bool:
                return (await server_connections(admin))[1] == 0

            await eventually(unsubscribed)

    assert len(logs["followed-0"]) == 3  # run.created, 2 x signal.received
    assert subscribed == 1, subscribed
    assert held <= 1 + AT_MOST and busy <= 1 + AT_MOST, (held, busy)
    assert "'user0' holds 60 live streams open" in problem(mine, 429, "too_many_streams")["detail"]
    assert "the server holds 200" in problem(everyone, 429, "too_many_streams")["detail"]
    assert mine.headers["retry-after"] == everyone.headers["retry-after"] == "10"
    assert mine.headers["content-type"] == PROBLEM
    assert max(probes) < 1.0, probes


def test_serve_has_the_apps_default_stream_limits() -> None:
    import sdk.http
    from sdk.cli import _serve

    assert _serve.DEFAULT_MAX_STREAMS == sdk.http.DEFAULT_MAX_STREAMS
    assert _serve.DEFAULT_MAX_STREAMS_PER_ACTOR == sdk.http.DEFAULT_MAX_STREAMS_PER_ACTOR
