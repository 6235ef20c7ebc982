"""Authorizer, audit events, approver restrictions, and resume(force=...)."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import pytest

from sdk import Client, Decision, RunRecord, RunStatus, flow, step, wait_for
from sdk.errors import Forbidden
from testing import FlowTestEnv

ASKED: list[tuple[str, str, str]] = []


class Policy:
    """Allows what `rule(actor, action)` says; remembers every question."""

    def __init__(self, rule: Callable[[str, str], bool]) -> None:
        self.rule = rule

    def can(self, actor: str, action: str, run: RunRecord) -> bool:
        ASKED.append((actor, action, run.run_id))
        return self.rule(actor, action)


@step(name="tests.auth.work")
async def work() -> str:
    return "done"


@flow(name="tests.auth.gated")
async def gated() -> Decision:
    await work()
    return cast(Decision, await wait_for("refund", human=True, approvers=["alice", "carol"]))


@flow(name="tests.auth.signalled")
async def signalled() -> str:
    return str(await wait_for("go"))


async def events_of(client: Client, run_id: str) -> list[tuple[str, object]]:
    return [(e.type, e.data) for e in await client.events(run_id, limit=1000)]


@pytest.fixture(autouse=True)
def _forget() -> None:
    ASKED.clear()


async def test_the_approvers_a_human_wait_names_can_be_read_while_it_waits() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(gated)
        assert await env.client.approvers(handle.run_id) == {}  # not parked yet
        await env.run_until_idle()
        assert await env.client.approvers(handle.run_id) == {"refund": ("alice", "carol")}
        await env.client.approve(handle.run_id, "refund", actor="carol")
        await env.run_until_idle()
        assert (await handle.result()).actor == "carol"
        assert await env.client.approvers(handle.run_id) == {}  # no longer waiting


@pytest.mark.parametrize(
    ("action", "call"),
    [
        ("signal", lambda c, r: c.signal(r, "go", 1, actor="mallory")),
        ("approve", lambda c, r: c.approve(r, "go", actor="mallory")),
        ("deny", lambda c, r: c.deny(r, "go", actor="mallory")),
        ("cancel", lambda c, r: c.cancel(r, reason="no", actor="mallory")),
        ("resume", lambda c, r: c.resume(r, actor="mallory")),
        ("force_resume", lambda c, r: c.resume(r, force=True, actor="mallory")),
    ],
)
async def test_a_refused_action_changes_nothing_and_is_audited(
    action: str, call: Callable[[Client, str], object]
) -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(signalled)
        await env.run_until_idle()
        client = Client(env.store, Policy(lambda actor, act: False), clock=env.clock)
        before = await env.client.get(handle.run_id)
        journal_before = await env.store.client.hgetall(env.store.keys.journal(handle.run_id))  # type: ignore[attr-defined]

        with pytest.raises(Forbidden, match="mallory"):
            await call(client, handle.run_id)  # type: ignore[misc]

        assert await env.client.get(handle.run_id) == before
        assert await env.store.client.hgetall(env.store.keys.journal(handle.run_id)) == (  # type: ignore[attr-defined]
            journal_before
        )
        assert [("mallory", action, handle.run_id)] == ASKED
        last_type, last_data = (await events_of(env.client, handle.run_id))[-1]
        assert last_type == "auth.denied"
        assert last_data == {"actor": "mallory", "action": action}


async def test_with_an_authorizer_an_action_without_actor_is_refused_and_audited() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(signalled)
        client = Client(env.store, Policy(lambda actor, act: True), clock=env.clock)
        with pytest.raises(Forbidden, match="needs an actor"):
            await client.cancel(handle.run_id, reason="x")
        assert await handle.status() == "pending"
        assert (await events_of(env.client, handle.run_id))[-1] == (
            "auth.denied",
            {"actor": None, "action": "cancel"},
        )


async def test_allowed_actions_record_their_actor_in_the_event_log() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(signalled)
        await env.run_until_idle()
        client = Client(env.store, Policy(lambda actor, act: actor == "ops"), clock=env.clock)
        await client.cancel(handle.run_id, reason="wrong order", actor="ops", grace=0)
        await client.resume(handle.run_id, actor="ops")
        await client.signal(handle.run_id, "go", 7, dedup_id="d1", actor="ops")
        await env.run_until_idle()
        assert await handle.result() == "7"
        logged = {t: d for t, d in await events_of(env.client, handle.run_id)}
    assert logged["run.canceled"] == {"reason": "wrong order", "actor": "ops"}
    assert logged["run.resumed"] == {"actor": "ops", "from": "canceled", "force": False}
    assert logged["signal.received"] == {"name": "go", "dedup_id": "d1", "actor": "ops"}


async def test_only_the_named_approvers_may_decide_a_wait() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(gated)
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_human"

        with pytest.raises(Forbidden, match="bob"):
            await env.client.approve(handle.run_id, "refund", actor="bob")
        assert await handle.status() == "waiting_for_human"
        denied = [d for t, d in await events_of(env.client, handle.run_id) if t == "auth.denied"]
        assert denied == [{"name": "refund", "decision": "approve", "actor": "bob", "reason": None}]

        await env.client.deny(handle.run_id, "refund", actor="carol", reason="duplicate")
        await env.run_until_idle()
        assert await handle.result() == Decision(False, "carol", "duplicate")


async def test_force_resume_asks_for_force_resume_and_is_recorded() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(signalled)
        await env.run_until_idle()
        await env.client.cancel(handle.run_id, reason="paused", grace=0)
        client = Client(
            env.store, Policy(lambda actor, act: act == "force_resume"), clock=env.clock
        )
        with pytest.raises(Forbidden):
            await client.resume(handle.run_id, actor="ops")
        await client.resume(handle.run_id, force=True, actor="ops")
        assert await handle.status() == RunStatus.RUNNING
        resumed = [d for t, d in await events_of(env.client, handle.run_id) if t == "run.resumed"]
    assert resumed == [{"actor": "ops", "from": "canceled", "force": True}]


async def test_a_run_canceled_before_it_started_resumes_from_the_beginning() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(signalled)
        await env.client.cancel(handle.run_id, reason="never mind")
        await env.client.resume(handle.run_id)
        await env.client.signal(handle.run_id, "go", "after all")
        await env.run_until_idle()
        assert await handle.result() == "after all"


def test_approvers_need_a_human_wait_and_real_names() -> None:
    with pytest.raises(ValueError, match="human=True"):
        wait_for("x", approvers=["alice"]).close()
