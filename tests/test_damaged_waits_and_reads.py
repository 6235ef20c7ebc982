"""Bad data still not contained (issue 30): waiting runs and the client's reads.

- A waiting run whose mailbox, dedup ids or event log is of the wrong type
  refused every signal (CorruptRecord to the sender) and so waited forever: the
  repair pass now fails it with reason ``corrupt_record`` naming the key, with
  ten healthy waiting runs beside it going on.
- Every read a `Client` offers, of a run each of whose keys is damaged in
  turn (every key of a run, each made another type): it reads, or raises
  `CorruptRecord` naming that key; never a raw Redis error. Two used to:
  `RunHandle.result()` on a damaged done notice, and `list_runs(parent_run_id=)`
  (and the timeline under it) on a damaged index of a run's children.

Both on memory:// (fakeredis's Lua) and on the real Redis.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from sdk import Client, RunStatus, emit, flow, start_child, step, wait_for
from sdk.client._runpages import page_runs
from sdk.client._timeline import timeline
from sdk.errors import CorruptRecord, RunFailed, SteadyflowError
from stores._keys import RUN_SUFFIXES, SUFFIX
from stores.redis import RedisStore
from testing import FakeClock, FlowTestEnv

HEALTHY = 10


@flow(name="tests.damaged.waits")
async def waits(x: int) -> int:
    got: int = await wait_for("go")  # no timeout: only a signal ends the wait
    return x + got


def key(store: RedisStore, part: str, run_id: str) -> str:
    return store.keys.base_of(run_id) + SUFFIX[part] + run_id


def mailbox(store: RedisStore, run_id: str, box: str) -> str:
    return f"{store.keys.base_of(run_id)}{SUFFIX['mailbox']}{len(run_id)}:{run_id}:{box}"


async def replace(store: RedisStore, name: str, kind: str = "string") -> None:
    """Make `name` hold a value of type `kind` (whatever it held before)."""
    makers: dict[str, Callable[[], Awaitable[Any]]] = {
        "string": lambda: store.client.set(name, "garbage"),
        "list": lambda: store.client.rpush(name, "garbage"),
        "hash": lambda: store.client.hset(name, "garbage", "1"),
    }
    await store.client.delete(name)
    await makers[kind]()


# -- a waiting run whose wake-up keys are damaged ------------------------------------

WAKE_UP_KEYS: dict[str, Callable[[RedisStore, str], str]] = {
    "mailbox": lambda s, r: mailbox(s, r, "s:go"),
    "dedup set": lambda s, r: key(s, "dedup", r),
    "event stream": lambda s, r: key(s, "events", r),
}


@pytest.mark.parametrize("case", sorted(WAKE_UP_KEYS))
async def test_a_waiting_run_whose_wake_up_keys_are_damaged_fails_instead_of_waiting_forever(
    store: RedisStore, case: str
) -> None:
    async with FlowTestEnv(FakeClock(), store=store) as env:
        healthy = [await env.start(waits, i, run_id=f"healthy-{i}") for i in range(HEALTHY)]
        damaged = await env.start(waits, 100, run_id="damaged")
        await env.run_until_idle()
        assert await damaged.status() is RunStatus.WAITING_FOR_SIGNAL
        named = WAKE_UP_KEYS[case](store, "damaged")
        await replace(store, named)

        with pytest.raises(CorruptRecord) as info:  # the signal it waits for is refused
            await env.client.signal("damaged", "go", 1, dedup_id="d1")
        assert info.value.key == named
        for i in range(HEALTHY):
            await env.client.signal(f"healthy-{i}", "go", 1)
        await env.run_until_idle()
        await env.advance(1)  # the next repair pass finds it

        for i, handle in enumerate(healthy):
            assert await handle.result(timeout=5) == i + 1
        rec = await env.client.get("damaged")
        assert (rec.status, rec.reason) == (RunStatus.FAILED, "corrupt_record")
        assert rec.error is not None and rec.error.type == "sdk.errors:CorruptRecord"
        assert rec.error.message.startswith(named + ": holds a string")
        with pytest.raises(RunFailed):
            await damaged.result(timeout=5)
        assert await store.client.get(named) == "garbage"  # left as found


# -- every read of a run with a damaged key ------------------------------------------------


@step
async def notify(x: int) -> int:
    emit("tests.damaged.mail", {"x": x})
    return x


@flow(name="tests.damaged.child")
async def child(x: int) -> int:
    got: int = await wait_for("go")
    return x + got


@flow(name="tests.damaged.parent")
async def parent(x: int) -> int:
    await notify(x)
    await start_child(child, x, run_id="kid")
    await wait_for("ok", human=True, approvers=["alice"])
    return x


#: Every key of the parent run (with a signal in a mailbox it does not wait on),
#: and the index of its children; each becomes a string, then (for the keys
#: that are strings or missing there) a list.
PARTS = [*RUN_SUFFIXES, "mailbox", "children"]


def reads(client: Client) -> dict[str, Callable[[], Awaitable[Any]]]:
    return {
        "get": lambda: client.get("p"),
        "list_runs": lambda: client.list_runs(),
        "list_runs by status": lambda: client.list_runs(status="waiting_for_human"),
        "list_runs by flow": lambda: client.list_runs(flow=parent),
        "list_runs by wait": lambda: client.list_runs(waiting_on="human"),
        "list_runs of a parent": lambda: client.list_runs(parent_run_id="p"),
        "page_runs": lambda: page_runs(client),
        "events": lambda: client.events("p"),
        "checkpoints": lambda: client.checkpoints("p"),
        "approvers": lambda: client.approvers("p"),
        "intents": lambda: client.intents("p"),
        "export": lambda: client.export("p"),
        "timeline": lambda: timeline(client, "p", depth=2),
        "status": lambda: client.handle("p").status(),
        "result": lambda: client.handle("p").result(timeout=0.05),
        "queues": lambda: client.queues(),
        "child": lambda: client.get("kid"),
    }


async def damaged_key(store: RedisStore, part: str) -> str:
    if part == "mailbox":
        return mailbox(store, "p", "s:other")
    if part == "children":
        return store.keys.children(store.keys.partition("kid"), "p")
    return key(store, part, "p")


@pytest.mark.parametrize("part", PARTS)
async def test_every_client_read_of_a_run_with_a_damaged_key_reads_or_names_the_key(
    store: RedisStore, part: str
) -> None:
    async with FlowTestEnv(FakeClock(), store=store, channels=[]) as env:
        await env.start(parent, 1, run_id="p")
        await env.run_until_idle()
        await env.client.signal("p", "other", 5)
        named = await damaged_key(store, part)
        was = await store.client.type(named)

        for kind in ("string", "list") if was in ("none", "string") else ("string",):
            await replace(store, named, kind)
            for what, read in reads(env.client).items():
                try:
                    await read()
                except CorruptRecord as e:
                    assert e.key == named, (kind, what, e)
                except RunFailed as e:  # a record that is not a hash reads as failed
                    assert e.error.reason == "corrupt_record", (kind, what, e)
                    assert e.error.message.startswith(named), (kind, what, e)
                except TimeoutError:
                    assert what == "result", (kind, what)  # still waiting: as it is
                except SteadyflowError as e:
                    pytest.fail(f"{kind} {what}: {type(e).__name__}: {e}")
                # anything else (a raw redis.exceptions.ResponseError) fails the test


async def test_result_of_a_run_whose_done_notice_is_damaged_names_the_key(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(FakeClock(), store=store) as env:
        handle = await env.start(waits, 1, run_id="r1")
        await env.run_until_idle()
        await replace(store, key(store, "done", "r1"), "hash")

        with pytest.raises(CorruptRecord) as info:
            await handle.result(timeout=1)
        assert (info.value.run_id, info.value.key) == ("r1", key(store, "done", "r1"))
        assert "holds a hash, not a list" in str(info.value)

        await env.client.signal("r1", "go", 2)  # the run's end writes the notice anew
        await env.run_until_idle()
        assert await handle.result(timeout=5) == 3


async def test_the_children_of_a_run_whose_index_of_them_is_damaged_name_the_key(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(FakeClock(), store=store, channels=[]) as env:
        await env.start(parent, 1, run_id="p")
        await env.run_until_idle()
        kids = store.keys.children(store.keys.partition("kid"), "p")
        assert [r.run_id for r in await env.client.list_runs(parent_run_id="p")] == ["kid"]
        await replace(store, kids)

        with pytest.raises(CorruptRecord) as info:
            await env.client.list_runs(parent_run_id="p")
        assert (info.value.run_id, info.value.key) == ("p", kids)
        with pytest.raises(CorruptRecord):
            await timeline(env.client, "p", depth=1)
        assert len(await env.client.list_runs()) == 2  # every other listing reads
