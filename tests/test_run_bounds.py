"""What one caller can do to one run is bounded (issue 30): a flood of traffic does
not erase the run's audit events, and its mailboxes hold a bounded number of bytes."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sdk import Client, RunRecord, Serializer, flow, start_child, wait_for
from sdk.errors import Forbidden, MailboxFull, PayloadTooLarge, SerializationError
from sdk.http import BearerTokens
from sdk.store import StoreLimits
from stores import open_store
from stores.redis import RedisStore
from testing import FlowTestEnv
from tests.conftest import need_real_redis, redis_store
from tests.test_http import HEADERS, TOKEN, api, problem
from tests.test_http_serve import serving

FLOOD = 300  # small signals; the log of the stores below keeps about 100 events


class SignalOnly:
    """An Authorizer that grants one action: signal (a support token)."""

    def can(self, actor: str, action: str, run: RunRecord) -> bool:
        return action == "signal"


@flow(name="tests.bounds.waits")
async def waits() -> Any:
    return await wait_for("go")


@flow(name="tests.bounds.parent")
async def parent() -> Any:
    child = await start_child(waits)
    return await child.result()


@contextlib.asynccontextmanager
async def bounded_env(kind: str, key_prefix: str, **options: Any) -> AsyncIterator[FlowTestEnv]:
    """A FlowTestEnv on memory:// or the real Redis, its store given `options`."""
    async with contextlib.AsyncExitStack() as stack:
        if kind == "memory":
            store = open_store("memory://", **options)
            stack.push_async_callback(store.close)
        else:
            store = await stack.enter_async_context(
                redis_store(need_real_redis(), key_prefix, **options)
            )
        yield await stack.enter_async_context(FlowTestEnv(store=store))


STORES = ["memory", pytest.param("redis", marks=pytest.mark.redis)]


# -- the audit trail --------------------------------------------------------------


@pytest.mark.parametrize("kind", STORES)
async def test_a_flood_of_signals_over_http_does_not_erase_the_callers_own_refusal(
    kind: str, key_prefix: str
) -> None:
    async with bounded_env(kind, key_prefix, max_events_per_run=100) as env:
        await env.start(waits, run_id="w-1")
        await env.run_until_idle()
        guarded = Client(env.store, SignalOnly(), clock=env.clock)
        began = time.monotonic()
        async with api(guarded, authenticate=BearerTokens({TOKEN: "sam"})) as http:
            refused = await http.post("/v1/runs/w-1/cancel", json={"reason": "mine now"})
            for n in range(FLOOD):
                sent = await http.post("/v1/runs/w-1/signals/noise", json={"payload": n})
                assert sent.status_code == 200, sent.text
            answer = await http.get("/v1/runs/w-1/events", params={"limit": 1000})
        assert time.monotonic() - began < 60

    problem(refused, 403, "forbidden")
    events = answer.json()["events"]
    signals = [e for e in events if e["type"] == "signal.received"]
    assert len(signals) < FLOOD  # the flood trimmed the log...
    denied = [e["data"] for e in events if e["type"] == "auth.denied"]
    assert denied == [{"actor": "sam", "action": "cancel"}]  # ...not the refusal
    assert [e["type"] for e in events[:2]] == ["run.created", "auth.denied"]


@pytest.mark.parametrize("kind", STORES)
async def test_changes_stay_in_the_log_of_a_run_flooded_with_refusals(
    kind: str, key_prefix: str
) -> None:
    async with bounded_env(kind, key_prefix, max_events_per_run=100,
                           max_refusals_per_run=10) as env:  # fmt: skip
        await env.start(waits, run_id="w-1")
        await env.run_until_idle()
        guarded = Client(env.store, SignalOnly(), clock=env.clock)
        for _ in range(FLOOD):
            with pytest.raises(Forbidden):
                await guarded.cancel("w-1", reason="let me", actor="sam")
        await env.client.cancel("w-1", reason="by ops", actor="ops", grace=0)
        for _ in range(FLOOD):
            with pytest.raises(Forbidden):
                await guarded.resume("w-1", actor="sam")
        events = await env.client.events("w-1", limit=1000)

    kinds = [e.type for e in events]
    assert kinds[0] == "run.created"
    assert ("run.canceled", {"reason": "by ops", "actor": "ops"}) in [
        (e.type, e.data) for e in events
    ]
    # the first refusals stay; the trail takes no more than its bound past the log's
    assert kinds.count("auth.denied") <= 10 + 100 + 100
    assert events[1].data == {"actor": "sam", "action": "cancel"}


@pytest.mark.slow
@pytest.mark.redis
async def test_a_served_api_bounds_a_signal_flood_and_keeps_the_refusal(
    redis_url: str, key_prefix: str, tmp_path: Path, real_store: RedisStore
) -> None:
    """Through a real `steadyflow serve` process, its store's bounds set by
    ``STEADYFLOW_STORE_OPTIONS``: a token that may only signal floods a run."""
    await Client(real_store).start("tests.http.signalled", run_id="served-bounds")
    settings = {
        "STEADYFLOW_API_TOKENS": f"{TOKEN}=sam",
        "STEADYFLOW_STORE_OPTIONS": "max_events_per_run=100,max_pending_messages=250",
    }
    store = ["--store", redis_url, "--prefix", key_prefix]
    authorizer = ["--authorizer", "tests.test_run_bounds:SignalOnly"]
    began = time.monotonic()
    with serving(store, tmp_path, *authorizer, env=settings) as base:
        async with httpx.AsyncClient(base_url=base, headers=HEADERS, timeout=20) as http:
            refused = await http.post("/v1/runs/served-bounds/cancel", json={"reason": "x"})
            codes = [
                (await http.post("/v1/runs/served-bounds/signals/noise", json={"payload": n}))
                for n in range(FLOOD)
            ]
            events = (await http.get("/v1/runs/served-bounds/events",
                                     params={"limit": 1000})).json()["events"]  # fmt: skip
    assert time.monotonic() - began < 120

    problem(refused, 403, "forbidden")
    assert [c.status_code for c in codes] == [200] * 250 + [429] * (FLOOD - 250)
    full = problem(codes[-1], 429, "mailbox_full")
    assert full["run_id"] == "served-bounds" and "max_pending_messages" in full["detail"]
    assert "retry-after" not in codes[-1].headers
    assert len([e for e in events if e["type"] == "signal.received"]) < 250
    denied = [e["data"] for e in events if e["type"] == "auth.denied"]
    assert denied == [{"actor": "sam", "action": "cancel"}]


# -- mailboxes --------------------------------------------------------------------


@pytest.mark.parametrize("kind", STORES)
async def test_forty_big_signals_to_a_name_never_waited_for_stop_at_the_byte_bound(
    kind: str, key_prefix: str
) -> None:
    # The case: forty 900 KB signals added 37 MB to one run.
    async with bounded_env(kind, key_prefix) as env:
        await env.start(waits, run_id="w-1")
        await env.run_until_idle()
        body = "x" * 900_000
        accepted = 0
        with pytest.raises(MailboxFull) as full:
            for _ in range(40):
                await env.client.signal("w-1", "never", body)
                accepted += 1
        # the bound holds for every name of the run: what waits is what counts
        with pytest.raises(MailboxFull):
            await env.client.signal("w-1", "go", body)

    limit = StoreLimits().max_pending_bytes
    assert accepted == limit // 900_002
    assert (full.value.run_id, full.value.bound, full.value.limit) == ("w-1", "bytes", limit)
    assert full.value.pending == (accepted + 1) * 900_002
    assert "'w-1'" in str(full.value) and "max_pending_bytes" in str(full.value)


@pytest.mark.parametrize("kind", STORES)
async def test_a_message_over_the_stores_bound_is_payload_too_large(
    kind: str, key_prefix: str
) -> None:
    async with bounded_env(kind, key_prefix, max_message_bytes=1000) as env:
        await env.start(waits, run_id="w-1")
        await env.run_until_idle()
        with pytest.raises(PayloadTooLarge) as refused:
            await env.client.signal("w-1", "go", "x" * 1000)
        async with api(env.client) as http:
            answer = await http.post("/v1/runs/w-1/signals/go", json={"payload": "y" * 1000})
            fits = await http.post("/v1/runs/w-1/signals/go", json={"payload": "y" * 998})
        await env.run_until_idle()
        result = await env.client.handle("w-1").result(timeout=5)

    assert isinstance(refused.value, SerializationError)  # what callers caught before
    assert (refused.value.run_id, refused.value.size, refused.value.limit) == ("w-1", 1002, 1000)
    assert "max_message_bytes" in str(refused.value) and "'go'" in str(refused.value)
    body = problem(answer, 413, "payload_too_large")
    assert body["run_id"] == "w-1" and "1,000 bytes" in body["detail"]
    assert fits.status_code == 200 and result == "y" * 998


async def test_the_serializers_own_bound_is_payload_too_large_over_http_too() -> None:
    serializer = Serializer(max_payload_bytes=100)
    with pytest.raises(PayloadTooLarge) as refused:
        serializer.encode("x" * 200, None, "payload of signal 'go'")
    assert (refused.value.size, refused.value.limit, refused.value.run_id) == (202, 100, None)
    assert isinstance(refused.value, SerializationError)

    async with FlowTestEnv() as env:
        await env.start(waits, run_id="w-1")
        await env.run_until_idle()
        client = Client(env.store, clock=env.clock, converter=serializer)
        async with api(client) as http:
            answer = await http.post("/v1/runs/w-1/signals/go", json={"payload": "x" * 200})
    assert "Serializer(max_payload_bytes" in problem(answer, 413, "payload_too_large")["detail"]


@pytest.mark.parametrize("kind", STORES)
async def test_a_full_run_is_a_429_naming_the_run_and_the_bound(kind: str, key_prefix: str) -> None:
    async with bounded_env(kind, key_prefix, max_pending_messages=3) as env:
        await env.start(waits, run_id="w-1")
        await env.run_until_idle()
        for n in range(3):
            await env.client.signal("w-1", "noise", n)
        with pytest.raises(MailboxFull) as full:
            await env.client.signal("w-1", "noise", 3)
        async with api(env.client) as http:
            answer = await http.post("/v1/runs/w-1/signals/go", json={"payload": 1})

    assert (full.value.bound, full.value.pending, full.value.limit) == ("messages", 4, 3)
    body = problem(answer, 429, "mailbox_full")
    assert body["run_id"] == "w-1"
    assert "'w-1'" in body["detail"] and "max_pending_messages" in body["detail"]


async def test_room_comes_back_as_the_flow_takes_its_messages() -> None:
    async with FlowTestEnv(store=open_store("memory://", max_pending_messages=2)) as env:
        try:
            handle = await env.start(waits, run_id="w-1")
            await env.client.signal("w-1", "go", "first")
            await env.client.signal("w-1", "go", "second")
            with pytest.raises(MailboxFull):
                await env.client.signal("w-1", "go", "third")
            await env.run_until_idle()
            assert await handle.result(timeout=5) == "first"
            # the finished run no longer takes signals at all; a new one has room
            await env.start(waits, run_id="w-2")
            await env.client.signal("w-2", "go", "one")
            await env.client.signal("w-2", "go", "two")
        finally:
            await env.store.close()


async def test_a_child_reaches_a_parent_that_holds_its_bound_of_messages() -> None:
    store = open_store("memory://", max_pending_messages=2)
    try:
        async with FlowTestEnv(store=store) as env:
            handle = await env.start(parent, run_id="p")
            await env.run_until_idle()
            for n in range(2):
                await env.client.signal("p", "noise", n)
            with pytest.raises(MailboxFull):
                await env.client.signal("p", "noise", 2)

            await env.client.signal("p~child:tests.bounds.waits#1", "go", "from the child")
            await env.run_until_idle()

            assert await handle.result(timeout=5) == "from the child"
    finally:
        await store.close()


async def test_send_event_skips_a_full_run_and_refuses_an_event_too_large() -> None:
    store = open_store("memory://", max_pending_messages=1, max_message_bytes=200)
    try:
        async with FlowTestEnv(store=store) as env:
            for run_id in ("full", "free"):
                await env.client.start("tests.http.payment", "o-1", run_id=run_id)
            await env.run_until_idle()
            await env.client.signal("full", "noise", 1)

            reached = await env.client.send_event("paid", {"order": "o-1"})
            with pytest.raises(PayloadTooLarge):
                await env.client.send_event("paid", {"order": "o-1", "note": "x" * 300})

            assert reached == ["free"]
    finally:
        await store.close()


# -- configuration ----------------------------------------------------------------


async def test_store_options_come_from_the_environment_unless_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STEADYFLOW_STORE_OPTIONS", "max_pending_messages=7, max_events_per_run=500")
    store = open_store("memory://", max_events_per_run=200)
    try:
        assert store.limits == StoreLimits(max_pending_messages=7, max_events_per_run=200)
    finally:
        await store.close()
    for bad in ("max_pending_messages", "nope=1", "max_pending_messages=x",
                "max_pending_messages=0"):  # fmt: skip
        monkeypatch.setenv("STEADYFLOW_STORE_OPTIONS", bad)
        with pytest.raises(ValueError, match="max_pending_messages"):
            open_store("memory://")
    assert os.environ["STEADYFLOW_STORE_OPTIONS"]
