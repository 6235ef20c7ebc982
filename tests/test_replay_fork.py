"""Replay and fork: new runs from a run's checkpoint, the side-effect ledger,
replay policies, lineage, fork options, authorization; and one canonical
status through every Python API.

Step bodies count their real executions (`CALLS`) and return values that
carry the execution count, so a reused result and a re-executed one differ.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import subprocess
import sys
from collections import Counter, defaultdict
from typing import Any, cast

import pytest

from sdk import (
    Client,
    Decision,
    RetryPolicy,
    RunRecord,
    RunStatus,
    Worker,
    current_run,
    current_step,
    flow,
    now,
    sleep,
    step,
    uuid4,
    wait_for,
)
from sdk._core._types import RunOptions, Versions
from sdk.errors import (
    Forbidden,
    IdempotencyConflict,
    InvalidTransition,
    NotWaiting,
    RunFailed,
    RunNotFound,
    WaitTimeout,
)
from sdk.model._registry import Registry, flow_def_of
from stores._keys import RUN_SUFFIXES, SUFFIX
from stores.redis import RedisStore
from testing import FlowTestEnv
from tests.redis_layout._support import key_content

CALLS: Counter[str] = Counter()
IDEM_KEYS: defaultdict[str, list[str]] = defaultdict(list)  # step name -> keys it saw
KNOBS: dict[str, Any] = {}
ASKED: list[tuple[str | None, str, str]] = []
PROBES: list[dict[str, Any]] = []
PROBE_CLIENT: list[Client] = []


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> None:
    CALLS.clear()
    IDEM_KEYS.clear()
    KNOBS.clear()
    KNOBS.update(surcharge=0, flaky_failures=0)
    ASKED.clear()
    PROBES.clear()
    PROBE_CLIENT.clear()


def executed(name: str) -> int:
    """Count a real execution of step `name`; return how many there have been."""
    CALLS[name] += 1
    IDEM_KEYS[name].append(current_step().idempotency_key)
    return CALLS[name]


# -- flows ------------------------------------------------------------------------


@step(name="tests.replay.reserve")
async def reserve(item: str) -> str:
    return f"R-{item}-{executed('reserve')}"


@step(name="tests.replay.charge")  # replay="use_recorded_result", the default
async def charge(amount: int) -> str:
    return f"C-{amount}-{executed('charge')}"


@step(name="tests.replay.notify", replay="reexecute")
async def notify(text: str) -> str:
    return f"N-{text}-{executed('notify')}"


@step(name="tests.replay.refund", replay="require_human")
async def refund(amount: int) -> str:
    return f"F-{amount}-{executed('refund')}"


@flow(name="tests.replay.order")
async def order(item: str, amount: int) -> list[str]:
    r = await reserve(item)
    # KNOBS["surcharge"] stands for a code change between source and replay
    c = await charge(amount + KNOBS["surcharge"])
    n = await notify(c)
    return [r, c, n]


@flow(name="tests.replay.gate")
async def gate(item: str) -> list[str]:
    r = await reserve(item)
    go = await wait_for("go", timeout=600)
    c = await charge(int(go))
    return [r, c, await notify(c)]


@flow(name="tests.replay.refunding")
async def refunding(amount: int) -> list[str]:
    f = await refund(amount)
    await wait_for("close")  # a later activation must not ask or re-run again
    return [f, await charge(amount)]


@flow(name="tests.replay.stamp")
async def stamp() -> list[str]:
    t = await now()
    u = await uuid4()
    await reserve("stamp")
    return [t.isoformat(), str(u)]


@flow(name="tests.replay.nap")
async def nap() -> list[str]:
    r = await reserve("nap")
    await sleep(60)
    return [r, await charge(1)]


@flow(name="tests.replay.patient")
async def patient() -> str:
    try:
        return f"got {await wait_for('go', timeout=100)}"
    except WaitTimeout:
        return "timed out"


@step(name="tests.replay.flaky")  # no policy of its own
async def flaky() -> str:
    executed("flaky")
    if KNOBS["flaky_failures"] > 0:
        KNOBS["flaky_failures"] -= 1
        raise ConnectionError("service down")
    return "up"


@step(name="tests.replay.picky", retry=RetryPolicy(max_attempts=1))
async def picky() -> str:
    executed("picky")
    raise ValueError("never")


@flow(name="tests.replay.fragile")
async def fragile() -> str:
    await reserve("fragile")
    return await flaky()


@flow(name="tests.replay.choosy")
async def choosy() -> str:
    await reserve("choosy")
    return await picky()


# -- helpers -----------------------------------------------------------------------


async def run_to_end(env: FlowTestEnv, run_id: str) -> Any:
    await env.run_until_idle()
    return await env.client.handle(run_id).result(timeout=5)


async def checkpoint_after(client: Client, run_id: str, step_key: str) -> str:
    """The id of the checkpoint taken when `step_key` completed."""
    (cp,) = [c for c in await client.checkpoints(run_id) if c.step_key == step_key]
    return cp.checkpoint_id


async def events_of(client: Client, run_id: str) -> list[tuple[str, str | None, Any]]:
    return [(e.type, e.step_key, e.data) for e in await client.events(run_id, limit=1000)]


async def raw_redis_state(store: RedisStore, run_id: str) -> dict[str, Any]:
    """Everything Redis holds about one run: each of its keys (type-aware, raw
    strings) and its membership and score in every shared index."""
    c = store.client
    base = store.keys.base_of(run_id)
    state: dict[str, Any] = {}
    keys = {s: base + SUFFIX[s] + run_id for s in RUN_SUFFIXES}
    for name in cast("set[str]", await c.smembers(keys["mailboxes"])):
        keys[f"mailbox {name}"] = f"{base}{SUFFIX['mailbox']}{len(run_id)}:{run_id}:{name}"
    for what, key in keys.items():
        content = await key_content(store, key)
        if content is not None:
            state[what] = content
    indexes = [SUFFIX[s] for s in ("runs", "timers", "leases", "expiry")]
    indexes += [SUFFIX["status"] + s.value for s in RunStatus]
    indexes += [
        SUFFIX["queue"] + q for q in cast("set[str]", await c.smembers(base + SUFFIX["queues"]))
    ]
    for index in indexes:
        score = await c.zscore(base + index, run_id)
        if score is not None:
            state[f"index {index}"] = score
    return state


class Policy:
    """An authorizer: allows what `rule(actor, action)` says, remembers every
    question; its optional `can_fork` (the environment's policy) refuses forks
    that change any option in `forbidden_options`."""

    def __init__(self, rule: Any = None, forbidden_options: frozenset[str] = frozenset()) -> None:
        self.rule = rule or (lambda actor, action: True)
        self.forbidden_options = forbidden_options
        self.fork_asked: list[tuple[str | None, str, dict[str, Any]]] = []

    def can(self, actor: str, action: str, run: RunRecord) -> bool:
        ASKED.append((actor, action, run.run_id))
        return bool(self.rule(actor, action))

    def can_fork(self, actor: str | None, run: RunRecord, options: dict[str, Any]) -> bool:
        self.fork_asked.append((actor, run.run_id, options))
        return not (set(options) & self.forbidden_options)


# -- replay from a step boundary: the side effect does not happen twice ---------------


async def test_replay_from_a_step_boundary_reuses_recorded_side_effects(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store) as env:
        source = await env.start(order, "book", 10)
        assert await run_to_end(env, source.run_id) == ["R-book-1", "C-10-1", "N-C-10-1-1"]
        boundary = await checkpoint_after(env.client, source.run_id, "tests.replay.reserve#1")

        replay = await env.client.replay(source.run_id, checkpoint_id=boundary)

        assert await run_to_end(env, replay.run_id) == ["R-book-1", "C-10-1", "N-C-10-1-2"]
        # reserve: before the checkpoint; charge: reused; notify: replay="reexecute"
        assert CALLS == {"reserve": 1, "charge": 1, "notify": 2}
        events = await events_of(env.client, replay.run_id)
    assert events[0] == (
        "run.replayed", None,
        {"source_run_id": source.run_id, "source_checkpoint_id": boundary, "actor": None,
         "options": []},
    )  # fmt: skip
    assert [(t, k) for t, k, _ in events[1:]] == [
        ("run.started", None),
        ("side_effect.reused", "tests.replay.charge#1"),
        ("step.completed", "tests.replay.notify#1"),
        ("run.completed", None),
    ]
    assert events[2][2] == {
        "idempotency_key": f"{source.run_id}:tests.replay.charge#1",
        "source_run_id": source.run_id,
    }


async def test_replay_of_a_run_that_failed_runs_the_failed_step_again() -> None:
    async with FlowTestEnv() as env:
        KNOBS["flaky_failures"] = 1
        source = await env.start(fragile)
        await env.run_until_idle()
        assert await source.status() == "failed"

        replay = await env.client.replay(source.run_id)

        # a recorded failure after the checkpoint is not a result to reuse
        assert await run_to_end(env, replay.run_id) == "up"
        assert CALLS == {"reserve": 1, "flaky": 2}


# -- the source is never changed ------------------------------------------------------


@pytest.mark.parametrize("source_state", ["completed", "waiting"])
async def test_replay_and_fork_never_change_the_source(
    store: RedisStore, source_state: str
) -> None:
    async with FlowTestEnv(store=store) as env:
        source = await env.start(gate, "pen", run_id="source")
        await env.run_until_idle()
        await env.client.signal("source", "note", 1, dedup_id="n-1")  # kept, never consumed
        if source_state == "completed":
            await env.client.signal("source", "go", 3, dedup_id="go-1")
            await env.run_until_idle()
        assert await source.status() == (
            "completed" if source_state == "completed" else "waiting_for_signal"
        )
        before = await raw_redis_state(store, "source")
        assert before["journal"] and before["events"] and before["checkpoints"]
        assert before["mailbox s:note"] and before["dedup"]

        replay = await env.client.replay("source")
        fork = await env.client.fork("source", queue="other", environment="staging")
        assert await raw_redis_state(store, "source") == before

        # Run the new runs to their end. The replay (from the run's start) waits
        # for "go" again; the fork (from the head) replays a consumed signal as
        # recorded, so it waits only if the source was still waiting.
        await env.run_until_idle()
        waiting = [replay] if source_state == "completed" else [replay, fork]
        for derived in waiting:
            assert await derived.status() == "waiting_for_signal"
            await env.client.signal(derived.run_id, "go", 3)
        await env.run_until_idle()
        assert await replay.status() == "completed"
        assert await fork.status() == "completed"
        assert await raw_redis_state(store, "source") == before


# -- defaults, unknown ids ----------------------------------------------------------


async def test_replay_defaults_to_the_first_checkpoint_and_fork_to_the_head() -> None:
    async with FlowTestEnv() as env:
        source = await env.start(order, "ink", 2)
        await run_to_end(env, source.run_id)
        cps = await env.client.checkpoints(source.run_id)
        head = (await env.client.get(source.run_id)).checkpoint_head
        assert head == cps[-1].checkpoint_id and cps[0].kind == "run_started"

        replay = await env.client.replay(source.run_id)
        fork = await env.client.fork(source.run_id)

        assert (await env.client.get(replay.run_id)).source_checkpoint_id == cps[0].checkpoint_id
        assert (await env.client.get(fork.run_id)).source_checkpoint_id == head
        await env.run_until_idle()
        # from the head of a completed run everything is replayed as recorded;
        # from the first checkpoint the reexecute step runs again
        assert await fork.result() == ["R-ink-1", "C-2-1", "N-C-2-1-1"]
        assert await replay.result() == ["R-ink-1", "C-2-1", "N-C-2-1-2"]
        assert CALLS == {"reserve": 1, "charge": 1, "notify": 2}


@pytest.mark.parametrize("kind", ["replay", "fork"])
async def test_an_unknown_checkpoint_is_a_value_error_and_creates_nothing(kind: str) -> None:
    async with FlowTestEnv() as env:
        source = await env.start(order, "cap", 1)
        await run_to_end(env, source.run_id)
        derive = getattr(env.client, kind)

        with pytest.raises(ValueError, match="no checkpoint '99'"):
            await derive(source.run_id, checkpoint_id="99", new_run_id="never")

        with pytest.raises(RunNotFound):
            await env.client.get("never")
        assert [r.run_id for r in await env.client.list_runs()] == [source.run_id]


@pytest.mark.parametrize("kind", ["replay", "fork"])
async def test_replay_or_fork_of_an_unknown_run_raises_run_not_found(kind: str) -> None:
    async with FlowTestEnv() as env:
        with pytest.raises(RunNotFound):
            await getattr(env.client, kind)("no-such-run")
        assert await env.client.list_runs() == []


async def test_a_run_without_a_checkpoint_yet_cannot_be_replayed() -> None:
    async with FlowTestEnv() as env:
        pending = await env.start(order, "cap", 1)  # not claimed: no run_started checkpoint

        with pytest.raises(InvalidTransition):
            await env.client.replay(pending.run_id)
        assert [r.run_id for r in await env.client.list_runs()] == [pending.run_id]


# -- lineage and idempotency keys ------------------------------------------------------


async def test_a_replay_records_its_lineage() -> None:
    async with FlowTestEnv() as env:
        source = await env.start(order, "mug", 4, run_id="first")
        await run_to_end(env, "first")

        replay = await env.client.replay("first", checkpoint_id="2", new_run_id="second")

        rec = await env.client.get("second")
        assert replay.run_id == "second"
        assert (rec.source_run_id, rec.source_checkpoint_id, rec.root_run_id) == (
            "first", "2", "first",
        )  # fmt: skip
        assert rec.status == "pending" and rec.flow == "tests.replay.order"
        src = await env.client.get(source.run_id)
        assert (src.source_run_id, src.source_checkpoint_id, src.root_run_id) == (
            None, None, "first",
        )  # fmt: skip


async def test_a_replay_of_a_replay_keeps_the_first_root_and_still_reuses_results() -> None:
    async with FlowTestEnv() as env:
        await env.start(order, "mug", 4, run_id="first")
        await run_to_end(env, "first")
        await env.client.replay("first", new_run_id="second")
        assert await run_to_end(env, "second") == ["R-mug-1", "C-4-1", "N-C-4-1-2"]

        await env.client.replay("second", new_run_id="third")

        assert await run_to_end(env, "third") == ["R-mug-1", "C-4-1", "N-C-4-1-3"]
        rec = await env.client.get("third")
        assert (rec.source_run_id, rec.root_run_id) == ("second", "first")
        assert CALLS == {"reserve": 1, "charge": 1, "notify": 3}
        reused = [
            (k, d) for t, k, d in await events_of(env.client, "third") if t == "side_effect.reused"
        ]
    assert reused == [
        (f"tests.replay.{name}#1",
         {"idempotency_key": f"first:tests.replay.{name}#1", "source_run_id": "second"})
        for name in ("reserve", "charge")
    ]  # fmt: skip


async def test_idempotency_keys_in_replays_and_forks_are_the_sources() -> None:
    async with FlowTestEnv() as env:
        await env.start(order, "cup", 5, run_id="origin")
        await run_to_end(env, "origin")
        await env.client.replay("origin", new_run_id="replayed")
        await env.client.fork("origin", checkpoint_id="1", new_run_id="forked", priority=3)
        await env.run_until_idle()
        await env.client.replay("forked", new_run_id="grandchild")
        await env.run_until_idle()

        assert await env.client.handle("grandchild").result() == ["R-cup-1", "C-5-1", "N-C-5-1-4"]
    # notify re-executed in every run, always under the key of the lineage's first run
    assert IDEM_KEYS["notify"] == ["origin:tests.replay.notify#1"] * 4
    assert IDEM_KEYS["reserve"] == ["origin:tests.replay.reserve#1"]


# -- the side-effect ledger --------------------------------------------------------------


async def test_a_reused_step_called_with_other_arguments_fails_with_idempotency_conflict() -> None:
    async with FlowTestEnv() as env:
        await env.start(order, "lamp", 10, run_id="paid")
        await run_to_end(env, "paid")
        KNOBS["surcharge"] = 5  # the code changed: charge(15) where charge(10) was recorded

        await env.client.replay("paid", new_run_id="conflicted")
        with pytest.raises(RunFailed) as failed:
            await run_to_end(env, "conflicted")

        error = failed.value.error
        assert error.type == "sdk.errors:IdempotencyConflict"
        assert (error.step_key, error.reason) == ("tests.replay.charge#1", "idempotency_conflict")
        assert "paid:tests.replay.charge#1" in error.message
        assert (await env.client.get("conflicted")).reason == "idempotency_conflict"
        assert CALLS == {"reserve": 1, "charge": 1, "notify": 1}  # nothing was charged again
        step_failed = [
            (k, d) for t, k, d in await events_of(env.client, "conflicted") if t == "step.failed"
        ]
        assert step_failed == [
            ("tests.replay.charge#1",
             {"type": "sdk.errors:IdempotencyConflict", "message": error.message,
              "reason": "idempotency_conflict"}),
        ]  # fmt: skip

        # deterministic: a replay of the failure, and a resume of it, fail the same way
        await env.client.replay("conflicted", new_run_id="again")
        with pytest.raises(RunFailed) as again:
            await run_to_end(env, "again")
        await env.client.resume("conflicted")
        with pytest.raises(RunFailed) as resumed:
            await run_to_end(env, "conflicted")
        for err in (again.value.error, resumed.value.error):
            assert (err.type, err.step_key, err.reason) == (
                error.type, error.step_key, error.reason,
            )  # fmt: skip
        assert CALLS == {"reserve": 1, "charge": 1, "notify": 1}

        # with the code fixed, a resume reuses the recorded charge
        KNOBS["surcharge"] = 0
        await env.client.resume("conflicted")
        assert await run_to_end(env, "conflicted") == ["R-lamp-1", "C-10-1", "N-C-10-1-2"]
        assert CALLS == {"reserve": 1, "charge": 1, "notify": 2}


async def test_a_reused_step_called_with_equal_arguments_is_no_conflict() -> None:
    # the request hash is of the step's arguments, not of how the flow got them
    async with FlowTestEnv() as env:
        await env.start(gate, "pad", run_id="src")
        await env.run_until_idle()
        await env.client.signal("src", "go", "7")
        assert (await run_to_end(env, "src"))[1] == "C-7-1"

        await env.client.replay("src", new_run_id="copy")
        await env.run_until_idle()
        await env.client.signal("copy", "go", 7)  # int(go) is 7 either way

        assert (await run_to_end(env, "copy"))[1] == "C-7-1"
        assert CALLS["charge"] == 1


class Mailer:
    """Not data: a client object. Its repr holds a memory address, which differs
    between processes (and here, between activations)."""


@step(name="tests.replay.send")
async def send(mailer: Mailer, to: frozenset[str]) -> str:
    return f"S-{len(to)}-{executed('send')}"


@flow(name="tests.replay.mailing")
async def mailing() -> str:
    # a new client each activation, as a worker in another process would have
    return await send(Mailer(), frozenset({"ann", "bob", "cy", "dee", "eve"}))


@flow(name="tests.replay.keyword_charge")
async def keyword_charge(amount: int) -> str:
    if KNOBS.get("by_keyword"):
        return await charge(amount=amount)  # the same call, written another way
    return await charge(amount)


async def test_a_step_taking_a_client_object_is_reused_without_conflict() -> None:
    async with FlowTestEnv() as env:
        source = await env.start(mailing)
        assert await run_to_end(env, source.run_id) == "S-5-1"

        replay = await env.client.replay(source.run_id)

        assert await run_to_end(env, replay.run_id) == "S-5-1"
        assert CALLS == {"send": 1}


_HASH_IN_A_PROCESS = """
import attrs
from sdk import Serializer

request_hash = Serializer().request_hash

@attrs.frozen
class Tagged:
    tags: frozenset[str]
    more: set[str] | None = None

class Mailer:
    pass

args = (
    {"ann", "bob", "cy", "dee", "eve"},
    Tagged(frozenset({"x", "y", "z", "w"}), {"k", "l", "m", "n"}),
    Mailer(),
)
print(request_hash(args, {"also": [{"in": {"p", "q", "r", "s"}}]}))
"""


def test_the_request_hash_of_a_call_is_the_same_in_every_process() -> None:
    # set order follows str hashes, randomized per process; addresses differ too
    hashes = {
        subprocess.run(
            [sys.executable, "-c", _HASH_IN_A_PROCESS], capture_output=True, text=True,
            check=True, env={**os.environ, "PYTHONHASHSEED": str(seed)}, timeout=30,
        ).stdout.strip()
        for seed in range(8)
    }  # fmt: skip
    assert len(hashes) == 1, hashes


async def test_a_reused_step_called_with_keyword_arguments_instead_is_no_conflict() -> None:
    async with FlowTestEnv() as env:
        source = await env.start(keyword_charge, 10)
        await run_to_end(env, source.run_id)
        KNOBS["by_keyword"] = True

        replay = await env.client.replay(source.run_id)

        assert await run_to_end(env, replay.run_id) == "C-10-1"


# -- replay policies -----------------------------------------------------------------------


async def test_require_human_waits_for_approval_then_reexecutes_the_step_once() -> None:
    async with FlowTestEnv() as env:
        await env.start(refunding, 30, run_id="src")
        await env.run_until_idle()
        await env.client.signal("src", "close")
        assert await run_to_end(env, "src") == ["F-30-1", "C-30-1"]

        await env.client.replay("src", new_run_id="copy")
        await env.run_until_idle()
        assert await env.client.handle("copy").status() == "waiting_for_human"
        assert CALLS["refund"] == 1
        with pytest.raises(NotWaiting):
            await env.client.approve("copy", "refund", actor="ops")  # not the approval's name

        await env.client.approve("copy", "replay:tests.replay.refund#1", actor="ops")
        await env.run_until_idle()
        assert await env.client.handle("copy").status() == "waiting_for_signal"
        await env.client.signal("copy", "close")  # the next activation replays the refund

        assert await run_to_end(env, "copy") == ["F-30-2", "C-30-1"]
        assert CALLS == {"refund": 2, "charge": 1}
        assert IDEM_KEYS["refund"] == ["src:tests.replay.refund#1"] * 2
        types = [t for t, _, _ in await events_of(env.client, "copy")]
        assert types.count("run.waiting_for_human") == 1


async def test_require_human_denied_reuses_the_recorded_result() -> None:
    async with FlowTestEnv() as env:
        await env.start(refunding, 30, run_id="src")
        await env.run_until_idle()
        await env.client.signal("src", "close")
        await run_to_end(env, "src")
        await env.client.replay("src", new_run_id="copy")
        await env.run_until_idle()

        await env.client.deny("copy", "replay:tests.replay.refund#1", actor="ops", reason="once")
        await env.run_until_idle()
        await env.client.signal("copy", "close")

        assert await run_to_end(env, "copy") == ["F-30-1", "C-30-1"]
        assert CALLS == {"refund": 1, "charge": 1}
        reused = [k for t, k, _ in await events_of(env.client, "copy") if t == "side_effect.reused"]
        assert reused == ["tests.replay.refund#1", "tests.replay.charge#1"]


async def test_now_and_uuid4_values_are_reused_by_a_replay() -> None:
    async with FlowTestEnv() as env:
        source = await env.start(stamp)
        recorded = await run_to_end(env, source.run_id)
        env.clock.advance(3600)

        replay = await env.client.replay(source.run_id)

        assert await run_to_end(env, replay.run_id) == recorded


async def test_a_signal_consumed_by_the_source_must_be_sent_again_to_the_replay() -> None:
    async with FlowTestEnv() as env:
        await env.start(gate, "box", run_id="src")
        await env.run_until_idle()
        await env.client.signal("src", "go", 2)
        await run_to_end(env, "src")

        await env.client.replay("src", new_run_id="copy")
        await env.run_until_idle()
        assert await env.client.handle("copy").status() == "waiting_for_signal"
        with pytest.raises(InvalidTransition):
            await env.client.signal("src", "go", 2)  # the source has finished

        await env.client.signal("copy", "go", 2)
        assert await run_to_end(env, "copy") == ["R-box-1", "C-2-1", "N-C-2-1-2"]
        assert CALLS == {"reserve": 1, "charge": 1, "notify": 2}


async def test_a_sleep_sleeps_again_in_a_replay() -> None:
    async with FlowTestEnv() as env:
        source = await env.start(nap)
        await env.run_until_idle()
        await env.advance(60)
        recorded = await env.client.handle(source.run_id).result()

        replay = await env.client.replay(source.run_id)
        await env.run_until_idle()
        assert await replay.status() == "waiting_for_signal"
        await env.advance(59)
        assert await replay.status() == "waiting_for_signal"
        await env.advance(1)

        assert await replay.result() == recorded
        assert CALLS == {"reserve": 1, "charge": 1}


async def test_records_before_the_checkpoint_replay_as_recorded_even_for_reexecute() -> None:
    async with FlowTestEnv() as env:
        source = await env.start(order, "tin", 3)
        recorded = await run_to_end(env, source.run_id)
        after_notify = await checkpoint_after(env.client, source.run_id, "tests.replay.notify#1")

        replay = await env.client.replay(source.run_id, checkpoint_id=after_notify)

        assert await run_to_end(env, replay.run_id) == recorded
        assert CALLS == {"reserve": 1, "charge": 1, "notify": 1}
        types = [t for t, _, _ in await events_of(env.client, replay.run_id)]
        assert types == ["run.replayed", "run.started", "run.completed"]


async def test_a_wait_pending_at_the_checkpoint_waits_again_with_a_fresh_deadline() -> None:
    async with FlowTestEnv() as env:
        source = await env.start(patient)  # waits for "go", 100 s timeout
        await env.run_until_idle()
        await env.advance(50)
        head = (await env.client.get(source.run_id)).checkpoint_head
        assert (await env.client.checkpoints(source.run_id))[-1].kind == "waiting_for_signal"

        replay = await env.client.replay(source.run_id, checkpoint_id=head)
        await env.run_until_idle()

        await env.advance(60)  # the source's deadline passes
        assert await source.result() == "timed out"
        assert await replay.status() == "waiting_for_signal"
        await env.advance(39)  # 1 s before the replay's own deadline
        assert await replay.status() == "waiting_for_signal"
        await env.advance(1)
        assert await replay.result() == "timed out"


@flow(name="tests.replay.kept", retention=60)
async def kept() -> str:
    return str(await wait_for("go"))


async def test_a_replay_keeps_working_after_its_source_is_deleted() -> None:
    async with FlowTestEnv() as env:
        await env.start(order, "jar", 8, run_id="src")
        await run_to_end(env, "src")
        await env.client.replay("src", new_run_id="copy")

        await env.client.delete("src")

        # the replay holds its own copy of the results it may reuse
        assert await run_to_end(env, "copy") == ["R-jar-1", "C-8-1", "N-C-8-1-2"]
        assert CALLS == {"reserve": 1, "charge": 1, "notify": 2}


async def test_a_replay_of_a_flow_with_retention_is_deleted_when_its_time_is_up() -> None:
    async with FlowTestEnv() as env:
        await env.start(kept, run_id="src")
        await env.run_until_idle()
        await env.client.replay("src", new_run_id="copy")
        await env.run_until_idle()

        await env.client.cancel("copy", reason="not needed", grace=0)
        await env.advance(59)
        assert (await env.client.get("copy")).status == "canceled"
        await env.advance(1)

        with pytest.raises(RunNotFound):
            await env.client.get("copy")


# -- fork options ------------------------------------------------------------------------------


async def test_fork_takes_the_new_options_and_records_them() -> None:
    # the fork moves onto version "2" of the flow: a worker must serve it there
    registry = Registry(order)
    definition = flow_def_of(order)
    assert definition is not None

    @functools.wraps(definition.fn)
    async def order_v2(*args: Any, **kwargs: Any) -> Any:
        return await definition.fn(*args, **kwargs)

    order_v2.__qualname__ = "order_v2"  # another definition, not `order` reloaded
    flow(name=definition.name, version="2", registry=registry)(order_v2)
    async with FlowTestEnv(registry=registry) as env:
        opts = RunOptions(
            thread_id="case-1", environment="production",
            versions=Versions(capabilities=("pay",)), policy_snapshot_id="p-1",
        )  # fmt: skip
        await env.start(order, "kit", 1, run_id="src", tenant_id="acme", options=opts)
        await run_to_end(env, "src")
        source_before = await env.client.get("src")
        versions = Versions(capabilities=("pay", "ship"), bindings={"model": "v2"},
                            registry_ref="deploy-7")  # fmt: skip

        await env.client.fork(
            "src", checkpoint_id="1", new_run_id="fork", queue="vip", priority=-5,
            tenant_id="globex", flow_version="2", environment="staging", thread_id="case-2",
            trace_id="trace-9", versions=versions, policy_snapshot_id="p-2",
        )  # fmt: skip

        rec = await env.client.get("fork")
        assert (rec.queue, rec.priority, rec.tenant_id, rec.flow_version) == (
            "vip", -5, "globex", "2",
        )  # fmt: skip
        assert (rec.environment, rec.thread_id, rec.trace_id, rec.policy_snapshot_id) == (
            "staging", "case-2", "trace-9", "p-2",
        )  # fmt: skip
        assert rec.versions == versions
        assert (rec.source_run_id, rec.source_checkpoint_id, rec.root_run_id) == ("src", "1", "src")
        assert await env.client.get("src") == source_before
        (forked,) = await env.client.events("fork", limit=1)
        assert forked.type == "run.forked"
        assert forked.data["options"] == sorted(
            ["queue", "priority", "tenant_id", "flow_version", "environment", "thread_id",
             "trace_id", "versions", "policy_snapshot_id"]
        )  # fmt: skip
        assert forked.correlation["tenant_id"] == "globex"
        assert forked.correlation["trace_id"] == "trace-9"

        # the new queue governs who runs it
        await Worker(env.store, queues=["default"], clock=env.clock).run_until_idle()
        assert await env.client.handle("fork").status() == "pending"
        assert await run_to_end(env, "fork") == ["R-kit-1", "C-1-1", "N-C-1-1-2"]


async def test_fork_without_options_keeps_the_sources_options_but_not_its_trace() -> None:
    async with FlowTestEnv() as env:
        opts = RunOptions(
            thread_id="case-1", environment="production",
            versions=Versions(bindings={"model": "v1"}), policy_snapshot_id="p-1",
        )  # fmt: skip
        await env.start(order, "kit", 1, run_id="src", tenant_id="acme", queue="slow",
                        priority=7, options=opts)  # fmt: skip
        await run_to_end(env, "src")

        await env.client.fork("src", new_run_id="fork")

        src, rec = await env.client.get("src"), await env.client.get("fork")
        keep = ("queue", "priority", "tenant_id", "flow_version", "thread_id", "environment",
                "versions", "policy_snapshot_id")  # fmt: skip
        assert [getattr(rec, f) for f in keep] == [getattr(src, f) for f in keep]
        assert rec.trace_id == "fork"  # a new run is a new trace (default: its run id)


async def test_a_forks_retry_policy_governs_steps_without_their_own() -> None:
    async with FlowTestEnv() as env:
        KNOBS["flaky_failures"] = 3
        source = await env.start(fragile)
        with pytest.raises(RunFailed) as failed:
            await run_to_end(env, source.run_id)
        assert failed.value.error.reason == "step_failed"  # no policy: ran once
        before_failure = await checkpoint_after(env.client, source.run_id, "tests.replay.reserve#1")

        fork = await env.client.fork(
            source.run_id, checkpoint_id=before_failure,
            retry=RetryPolicy(max_attempts=3, initial_interval=1.0, backoff=1.0),
        )  # fmt: skip
        await env.run_until_idle()
        assert await fork.status() == "waiting_for_signal"  # backoff timer
        await env.advance(1)
        await env.advance(1)

        assert await fork.result() == "up"
        assert CALLS == {"reserve": 1, "flaky": 4}  # 1 in the source, 3 attempts in the fork
        assert [(t, k) for t, k, _ in await events_of(env.client, fork.run_id)].count(
            ("step.retry_scheduled", "tests.replay.flaky#1")
        ) == 2


async def test_a_forks_retry_policy_does_not_replace_a_steps_own_policy() -> None:
    async with FlowTestEnv() as env:
        source = await env.start(choosy)
        await env.run_until_idle()
        before_failure = await checkpoint_after(env.client, source.run_id, "tests.replay.reserve#1")

        fork = await env.client.fork(
            source.run_id, checkpoint_id=before_failure, retry=RetryPolicy(max_attempts=5)
        )
        with pytest.raises(RunFailed) as failed:
            await run_to_end(env, fork.run_id)

        assert failed.value.error.reason == "retries_exhausted"  # picky's max_attempts=1
        assert CALLS == {"reserve": 1, "picky": 2}


async def test_a_fork_from_the_head_of_a_failed_run_runs_the_failed_step_again() -> None:
    async with FlowTestEnv() as env:
        KNOBS["flaky_failures"] = 2
        source = await env.start(fragile)
        with pytest.raises(RunFailed):
            await run_to_end(env, source.run_id)

        # the head is the failed finish: the failure is not copied (as resume
        # discards it), so the step runs again, under the fork's retry policy
        fork = await env.client.fork(
            source.run_id, retry=RetryPolicy(max_attempts=3, initial_interval=1.0)
        )
        await env.run_until_idle()
        await env.advance(1)

        assert await fork.result() == "up"
        assert CALLS == {"reserve": 1, "flaky": 3}  # 1 in the source, 2 in the fork
        assert (await env.client.get(source.run_id)).status == "failed"  # untouched


async def test_a_fork_from_the_failed_steps_own_checkpoint_copies_its_failure() -> None:
    async with FlowTestEnv() as env:
        KNOBS["flaky_failures"] = 1
        source = await env.start(fragile)
        with pytest.raises(RunFailed) as original:
            await run_to_end(env, source.run_id)
        at_failure = await checkpoint_after(env.client, source.run_id, "tests.replay.flaky#1")

        fork = await env.client.fork(
            source.run_id, checkpoint_id=at_failure, retry=RetryPolicy(max_attempts=3)
        )
        with pytest.raises(RunFailed) as again:
            await run_to_end(env, fork.run_id)

        assert again.value.error == original.value.error  # the recorded outcome, as it was
        assert CALLS == {"reserve": 1, "flaky": 1}


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"colour": "red"}, TypeError),
        ({"retry": {"max_attempts": 3}}, TypeError),
        ({"priority": 5000}, ValueError),
        ({"queue": ""}, ValueError),
    ],
)
async def test_a_fork_with_an_invalid_option_is_refused_and_creates_nothing(
    options: dict[str, Any], error: type[Exception]
) -> None:
    async with FlowTestEnv() as env:
        await env.start(order, "kit", 1, run_id="src")
        await run_to_end(env, "src")

        with pytest.raises(error):
            await env.client.fork("src", **options)

        assert [r.run_id for r in await env.client.list_runs()] == ["src"]


# -- authorization ------------------------------------------------------------------------------


async def test_replay_and_fork_ask_the_authorizer_and_record_the_actor() -> None:
    async with FlowTestEnv() as env:
        await env.start(order, "kit", 1, run_id="src")
        await run_to_end(env, "src")
        policy = Policy()
        client = Client(env.store, policy, clock=env.clock)

        replay = await client.replay("src", actor="ops")
        fork = await client.fork("src", actor="ops", environment="staging")

        assert ASKED == [("ops", "replay", "src"), ("ops", "fork", "src")]
        assert policy.fork_asked == [("ops", "src", {"environment": "staging"})]
        assert (await env.client.events(replay.run_id, limit=1))[0].data["actor"] == "ops"
        assert (await env.client.events(fork.run_id, limit=1))[0].data["actor"] == "ops"


@pytest.mark.parametrize(
    ("kind", "policy", "actor", "denied"),
    [
        ("replay", Policy(lambda actor, action: action != "replay"), "mallory",
         {"actor": "mallory", "action": "replay"}),
        ("fork", Policy(lambda actor, action: action != "fork"), "mallory",
         {"actor": "mallory", "action": "fork"}),
        ("replay", Policy(), None, {"actor": None, "action": "replay"}),
        ("fork", Policy(forbidden_options=frozenset({"environment"})), "ops",
         {"actor": "ops", "action": "fork", "options": ["environment"]}),
    ],
    ids=["replay-refused", "fork-refused", "no-actor", "environment-policy-refuses-options"],
)  # fmt: skip
async def test_a_refused_replay_or_fork_creates_nothing_and_is_audited(
    kind: str, policy: Policy, actor: str | None, denied: dict[str, Any]
) -> None:
    async with FlowTestEnv() as env:
        await env.start(order, "kit", 1, run_id="src")
        await run_to_end(env, "src")
        client = Client(env.store, policy, clock=env.clock)
        events_before = await events_of(env.client, "src")
        options = {"environment": "production"} if kind == "fork" else {}

        with pytest.raises(Forbidden):
            await getattr(client, kind)("src", actor=actor, new_run_id="copy", **options)

        with pytest.raises(RunNotFound):
            await env.client.get("copy")
        assert [r.run_id for r in await env.client.list_runs()] == ["src"]
        assert await events_of(env.client, "src") == [*events_before, ("auth.denied", None, denied)]


async def test_reusing_a_new_run_id_raises_idempotency_conflict_and_changes_nothing(
    store: RedisStore,
) -> None:
    async with FlowTestEnv(store=store) as env:
        await env.start(order, "kit", 1, run_id="src")
        await run_to_end(env, "src")
        await env.client.replay("src", new_run_id="copy")
        copy_before = await raw_redis_state(store, "copy")
        src_before = await raw_redis_state(store, "src")

        with pytest.raises(IdempotencyConflict):
            await env.client.replay("src", new_run_id="copy")
        with pytest.raises(IdempotencyConflict):
            await env.client.fork("src", new_run_id="copy", priority=1)
        with pytest.raises(IdempotencyConflict):
            await env.client.replay("src", new_run_id="src")

        assert await raw_redis_state(store, "copy") == copy_before
        assert await raw_redis_state(store, "src") == src_before


# -- one canonical status through every Python API -----------------------------------------

# The status a run's newest run.* event implies.
_EVENT_STATUS = {
    "run.created": "pending", "run.replayed": "pending", "run.forked": "pending",
    "run.started": "running", "run.resumed": "running", "run.lease_expired": "replaying",
    "run.waiting_for_signal": "waiting_for_signal", "run.waiting_for_human": "waiting_for_human",
    "run.completed": "completed", "run.failed": "failed", "run.canceled": "canceled",
}  # fmt: skip


async def status_views(client: Client, run_id: str) -> dict[str, Any]:
    """The run's status as every Python API reports it."""
    listed = {s.value for s in RunStatus if run_id in {r.run_id for r in await client.list_runs(s)}}
    (in_all,) = [r for r in await client.list_runs(limit=1000) if r.run_id == run_id]
    run_events = [
        e.type for e in await client.events(run_id, limit=1000) if e.type in _EVENT_STATUS
    ]
    cps = await client.checkpoints(run_id)
    return {
        "get": (await client.get(run_id)).status,
        "handle": await client.handle(run_id).status(),
        "list_runs(status=)": listed,
        "list_runs()": in_all.status,
        "newest run.* event": _EVENT_STATUS[run_events[-1]],
        "newest checkpoint": cps[-1].status if cps else None,
    }


def agreeing(status: str, checkpoint: str | None) -> dict[str, Any]:
    return {
        "get": status, "handle": status, "list_runs(status=)": {status}, "list_runs()": status,
        "newest run.* event": status, "newest checkpoint": checkpoint,
    }  # fmt: skip


@step(name="tests.replay.observe")
async def observe() -> None:
    PROBES.append(await status_views(PROBE_CLIENT[0], current_run().run_id))


@flow(name="tests.replay.lifecycle")
async def lifecycle(fail: bool) -> str:
    await observe()
    decision: Decision = await wait_for("ok", human=True)
    await wait_for("go")
    if fail:
        raise RuntimeError(f"boom after {decision.actor}")
    return "done"


@pytest.mark.parametrize("end", ["completed", "failed", "canceled"])
async def test_status_is_the_same_through_every_python_api_at_every_stage(end: str) -> None:
    async with FlowTestEnv() as env:
        PROBE_CLIENT.append(env.client)
        run = (await env.start(lifecycle, end == "failed")).run_id
        # pending: no checkpoint before the run is claimed
        assert await status_views(env.client, run) == agreeing("pending", None)

        await env.run_until_idle()
        # running: seen from inside a step
        assert [agreeing("running", "running")] == PROBES
        assert await status_views(env.client, run) == agreeing(
            "waiting_for_human", "waiting_for_human"
        )
        await env.client.approve(run, "ok", actor="ops")
        await env.run_until_idle()
        assert await status_views(env.client, run) == agreeing(
            "waiting_for_signal", "waiting_for_signal"
        )
        if end == "canceled":
            await env.client.cancel(run, reason="no longer needed")
        else:
            await env.client.signal(run, "go")
        await env.run_until_idle()

        assert await status_views(env.client, run) == agreeing(end, end)


async def test_status_is_the_same_through_every_python_api_while_replaying() -> None:
    async with FlowTestEnv() as env:
        PROBE_CLIENT.append(env.client)
        run = (await env.start(lifecycle, False)).run_id
        env.crash_at("tests.replay.observe#1", "before")
        await env.run_until_idle()
        env.clock.advance(31)  # past the lease
        await env.store.tick(env.clock.time(), 10, "{}")

        # no checkpoint is taken on recovery: the newest is still the run's start
        assert await status_views(env.client, run) == agreeing("replaying", "running")


async def test_status_of_a_replay_is_the_same_through_every_python_api() -> None:
    async with FlowTestEnv() as env:
        PROBE_CLIENT.append(env.client)
        source = (await env.start(lifecycle, False)).run_id
        await env.run_until_idle()
        await env.client.approve(source, "ok", actor="ops")
        await env.run_until_idle()
        await env.client.signal(source, "go")
        await env.run_until_idle()

        replay = (await env.client.replay(source)).run_id
        assert await status_views(env.client, replay) == agreeing("pending", None)
        await env.run_until_idle()
        # the recorded observation is reused: the probe does not run again
        assert len(PROBES) == 1
        assert await status_views(env.client, replay) == agreeing(
            "waiting_for_human", "waiting_for_human"
        )


def test_the_request_hash_fast_paths_agree_with_the_general_one() -> None:
    from sdk import Serializer
    from sdk._core._hashing import canonical as _canonical
    from sdk.model._stepspec import StepSpec

    async def charge(amount: int, currency: str = "EUR", note: object = None) -> str:
        return ""

    spec = StepSpec("charge", None, "use_recorded_result", charge)
    serializer = Serializer()
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((10,), {}),
        ((10, "USD"), {}),
        ((), {"amount": 10}),
        ((10,), {"currency": "USD"}),
        ((1.5, "x", None), {}),
        ((10, "USD", {"k": [1, 2]}), {}),
    ]
    for args, kwargs in calls:
        named = dict(inspect.signature(charge).bind(*args, **kwargs).arguments)
        slow = hashlib.blake2b(
            _canonical(serializer._hasher().unstructure(named)).encode(), digest_size=12
        ).hexdigest()
        assert spec.request_hash(charge, args, kwargs, serializer) == slow, (args, kwargs)
        assert serializer.request_hash(args, kwargs, named) == slow
    assert spec.request_hash(charge, (10,), {}, serializer) == spec.request_hash(
        charge, (), {"amount": 10}, serializer
    )


def test_the_positional_scalar_hash_writes_the_canonical_text_of_every_scalar() -> None:
    import enum

    from sdk import Serializer
    from sdk._core._hashing import canonical as _canonical
    from sdk.model._stepspec import StepSpec

    class Level(enum.IntEnum):
        HIGH = 1

    async def pay(zeta: object, alpha: object = None, mid: object = None) -> None:
        return None  # parameters out of alphabetical order: the text sorts them

    spec = StepSpec("pay", None, "use_recorded_result", pay)
    serializer = Serializer()
    values: list[Any] = [
        0, -7, 2**63 - 1, 2**70, True, False, None, 0.1, -0.0, 1e300, float("nan"),
        float("inf"), float("-inf"), "", "plain", 'quote " and \\ back', "é ✓ 🚀",
        "\x00\n\t", "\udcff", Level.HIGH, ["a"],
    ]  # fmt: skip
    calls = [(v,) for v in values] + [(1, "b", None), ("z", 2.5), (True, None, "é")]
    for args in calls:
        named = dict(inspect.signature(pay).bind(*args).arguments)
        text = _canonical(serializer._hasher().unstructure(named))
        slow = hashlib.blake2b(text.encode(), digest_size=12).hexdigest()
        assert spec.request_hash(pay, args, {}, serializer) == slow, args
        assert serializer.request_hash(args, {}, named) == slow, args
