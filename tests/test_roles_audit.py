"""Authorization on every action and the deployment's audit log, in process (issue 30):
the role model, roles in tokens, starts and schedule operations put to the
authorizer, and deletions recorded outside the run. The real `steadyflow serve`
is in test_http_roles.py."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from sdk import (
    AuditEntry,
    Client,
    Role,
    RoleAuthorizer,
    RunRecord,
    RunStatus,
    flow,
    wait_for,
)
from sdk.errors import Forbidden, InvalidArgument, RunNotFound
from sdk.http import BearerTokens, create_app
from stores import open_store
from testing import FlowTestEnv
from tests.test_cli_actions import ticking
from tests.test_cli_runs import CliEnv, cli_env_fixture, quick  # noqa: F401 (the env fixture)

ROLES = {"val": ["viewer"], "olga": ["operator"], "abe": ["approver"], "ada": ["admin"],
         "sam": ["operator", "approver"]}  # fmt: skip
ALL_ACTIONS = (
    "start", "signal", "send_event", "cancel", "resume", "force_resume", "replay", "fork",
    "delete", "approve", "deny", "create_schedule", "pause_schedule", "resume_schedule",
    "delete_schedule", "trigger_schedule",
)  # fmt: skip


@flow(name="tests.roles.gate")
async def gate(order: str) -> str:
    decision = await wait_for("ok", human=True)
    return f"{order}: {'shipped' if decision.approved else 'kept'}"


@contextlib.asynccontextmanager
async def roles_env(
    authorizer: Any = None, *, partitions: int = 1
) -> AsyncIterator[tuple[FlowTestEnv, Client]]:
    """A FlowTestEnv, and a client on its store with `authorizer` (default: `ROLES`)."""
    store = open_store("memory://", partitions=partitions)
    try:
        async with FlowTestEnv(store=store) as env:
            client = Client(env.store, authorizer or RoleAuthorizer(ROLES), clock=env.clock)
            yield env, client
    finally:
        await store.close()


async def audit(client: Client, *, refusals: bool = False) -> list[AuditEntry]:
    return await client.audit_log(limit=1000, refusals=refusals)


# -- the role model --------------------------------------------------------------------


def _record() -> RunRecord:
    from datetime import UTC, datetime

    return RunRecord("r1", "f", RunStatus.FAILED, datetime(2026, 1, 1, tzinfo=UTC))


@pytest.mark.parametrize(
    ("actor", "granted"),
    [
        ("val", set()),
        ("olga", {"start", "signal", "send_event", "cancel", "resume", "replay", "fork",
                  "create_schedule", "pause_schedule", "resume_schedule", "delete_schedule",
                  "trigger_schedule"}),
        ("abe", {"approve", "deny"}),
        ("ada", set(ALL_ACTIONS)),
        ("sam", {"start", "signal", "send_event", "cancel", "resume", "replay", "fork",
                 "create_schedule", "pause_schedule", "resume_schedule", "delete_schedule",
                 "trigger_schedule", "approve", "deny"}),
        ("nobody", set()),
    ],
)  # fmt: skip
def test_each_role_grants_its_actions_and_admin_everything(actor: str, granted: set[str]) -> None:
    roles = RoleAuthorizer(ROLES)
    assert {a for a in ALL_ACTIONS if roles.can(actor, a, _record())} == granted
    assert roles.can("ada", "an_action_of_a_later_version", _record())
    assert not roles.can("sam", "an_action_of_a_later_version", _record())


def test_a_role_authorizer_refuses_unknown_roles_and_a_string_of_roles() -> None:
    with pytest.raises(InvalidArgument, match=r"unknown role 'root'.*viewer, operator"):
        RoleAuthorizer({"ada": ["root"]})
    with pytest.raises(InvalidArgument, match="collection of roles"):
        RoleAuthorizer({"ada": "admin"})
    assert RoleAuthorizer({"ada": [Role.ADMIN, "viewer"]}).roles_of("ada") == {
        Role.ADMIN, Role.VIEWER,
    }  # fmt: skip


# -- roles in tokens -------------------------------------------------------------------

T1, T2, T3, T4 = (f"token-{n}-0123456789abcdef" for n in range(4))


def test_tokens_carry_roles_after_the_actors_last_colon() -> None:
    text = f"""
    # operators and approvers
    {T1}=ops:operator,approver
    {T2}=urn:team:ada:admin
    {T3}=grafana
    {T4}=urn:team:bo:
    """
    tokens = BearerTokens.parse(text, "tokens file")
    assert tokens.actors == {"ops", "urn:team:ada", "grafana", "urn:team:bo"}
    assert tokens.roles == {
        "ops": {Role.OPERATOR, Role.APPROVER}, "urn:team:ada": {Role.ADMIN},
        "urn:team:bo": frozenset(),
    }  # fmt: skip
    assert tokens.actor_of(T2) == "urn:team:ada"
    roles = tokens.authorizer()
    assert roles.can("ops", "approve", _record()) and not roles.can("ops", "delete", _record())
    assert not roles.can("grafana", "start", _record())  # no roles: reads only
    assert not roles.can("urn:team:bo", "signal", _record())


def test_the_environment_variable_takes_roles_between_its_commas() -> None:
    env = {"STEADYFLOW_API_TOKENS": f"{T1}=ops:operator,approver,{T2}=ada:admin,{T3}=ro"}
    tokens = BearerTokens.from_env(env)
    assert tokens is not None
    assert tokens.roles == {"ops": {Role.OPERATOR, Role.APPROVER}, "ada": {Role.ADMIN}}
    assert tokens.actors == {"ops", "ada", "ro"}


def test_old_tokens_files_still_read_and_hold_no_roles() -> None:
    tokens = BearerTokens.parse(f"{T1}=ops,{T2}=alice@example.com", "old")
    assert tokens.roles == {}
    assert tokens.actors == {"ops", "alice@example.com"}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (f"{T1}=ops:root", "the roles of 'ops': 'root' is not a role"),
        (f"{T1}=urn:ada", "the roles of 'urn': 'ada' is not a role"),
        (f"{T1}=ops:operator,{T2}=ops:admin", "the tokens of 'ops' carry different roles"),
        (f"{T1}=ops:operator,{T2}=ops", "the tokens of 'ops' carry different roles"),
        (f"{T1}=:admin", "entry #1 has roles but no actor"),
    ],
)
def test_a_tokens_text_with_bad_roles_is_refused(text: str, error: str) -> None:
    with pytest.raises(InvalidArgument, match=error):
        BearerTokens.parse(text, "tokens file")


def test_a_refused_tokens_text_never_shows_a_token() -> None:
    # a token mistyped without its '=' after an entry with roles reads as a role
    with pytest.raises(InvalidArgument) as refused:
        BearerTokens.parse(f"{T1}=ops:operator,{T2}", "tokens file")
    assert T2 not in str(refused.value) and T1 not in str(refused.value)
    assert "a value of" in str(refused.value)


async def test_an_app_refuses_tokens_with_roles_over_a_client_without_authorizer() -> None:
    store = open_store("memory://")
    try:
        tokens = BearerTokens({T1: "ops"}, roles={"ops": ["operator"]})
        with pytest.raises(InvalidArgument, match="carry roles, but the client has no authorizer"):
            create_app(Client(store), authenticate=tokens)
        create_app(Client(store, tokens.authorizer()), authenticate=tokens)
        create_app(Client(store), authenticate=BearerTokens({T1: "ops"}))  # no roles: as before
    finally:
        await store.close()


# -- starts ----------------------------------------------------------------------------


async def test_a_start_that_names_an_actor_is_authorized_and_its_refusal_audited() -> None:
    async with roles_env() as (_, client):
        with pytest.raises(Forbidden, match="'val' may not start run 'g-1'"):
            await client.start(gate, "A-1", run_id="g-1", actor="val")
        with pytest.raises(RunNotFound):
            await client.get("g-1")  # nothing written
        [denied] = await audit(client, refusals=True)
        assert (denied.type, denied.actor, denied.run_id, denied.data) == (
            "auth.denied", "val", "g-1", {"actor": "val", "action": "start",
                                          "flow": "tests.roles.gate"},
        )  # fmt: skip
        assert await audit(client) == []  # refusals never land among the changes

        await client.start(gate, "A-1", run_id="g-1", actor="olga")
        [created] = [e for e in await client.events("g-1") if e.type == "run.created"]
        assert created.data == {"flow": "tests.roles.gate", "queue": "default",
                                "priority": 0, "actor": "olga"}  # fmt: skip


async def test_an_authorizer_with_three_arguments_is_asked_about_the_run_to_be_created() -> None:
    asked: list[tuple[str, str, RunRecord]] = []

    class Recording:
        def can(self, actor: str, action: str, run: RunRecord) -> bool:
            asked.append((actor, action, run))
            return True

    async with roles_env(Recording()) as (_, client):
        await client.start(gate, "A-1", run_id="g-2", tenant_id="acme", actor="olga")
        await client.start(gate, "A-2", run_id="g-3")  # no actor: the application's own start
    [(actor, action, run)] = asked
    assert (actor, action) == ("olga", "start")
    assert (run.run_id, run.flow, run.status, run.tenant_id) == (
        "g-2", "tests.roles.gate", RunStatus.PENDING, "acme",
    )  # fmt: skip


def test_a_flow_cannot_name_a_parameter_actor() -> None:
    with pytest.raises(InvalidArgument, match=r"\['actor'\] are reserved"):

        @flow(name="tests.roles.clash")
        async def clash(actor: str) -> None: ...


# -- deletions -------------------------------------------------------------------------


@pytest.mark.parametrize("partitions", [1, 4])
async def test_a_deletion_is_its_own_permission_and_outlives_the_run(partitions: int) -> None:
    async with roles_env(partitions=partitions) as (env, client):
        await client.start(gate, "A-1", run_id="g-del", actor="olga", tenant_id="acme")
        await env.run_until_idle()
        await client.approve("g-del", "ok", actor="abe", reason="fine")
        await env.run_until_idle()
        for actor in ("olga", "abe"):
            with pytest.raises(Forbidden, match=f"'{actor}' may not delete run 'g-del'"):
                await client.delete("g-del", actor=actor)

        await client.delete("g-del", actor="ada")

        with pytest.raises(RunNotFound):
            await client.events("g-del")
        [deleted] = await audit(client)
        assert (deleted.type, deleted.actor, deleted.run_id, deleted.schedule_id) == (
            "run.deleted", "ada", "g-del", None,
        )  # fmt: skip
        assert deleted.data["flow"] == "tests.roles.gate"
        assert (deleted.data["status"], deleted.data["tenant_id"]) == ("completed", "acme")
        assert deleted.at == env.clock.now()


async def test_the_audit_log_pages_by_its_cursor() -> None:
    async with roles_env(partitions=4) as (_, client):
        for n in range(5):
            await client.start(gate, "A", run_id=f"p-{n}", actor="olga")
        for n in range(5):
            await client.cancel(f"p-{n}", reason="test", actor="olga", grace=0)
            await client.delete(f"p-{n}", actor="ada")
        everything = await audit(client)
        assert sorted(e.run_id or "" for e in everything) == [f"p-{n}" for n in range(5)]
        pages, cursor = [], None
        while page := await client.audit_log(cursor=cursor, limit=2):
            pages += page
            cursor = page[-1].entry_id
        assert pages == everything
        with pytest.raises(InvalidArgument, match="is not an entry id"):
            await client.audit_log(cursor="not-a-cursor")


# -- schedules -------------------------------------------------------------------------


async def test_schedule_operations_are_authorized_and_audited() -> None:
    async with roles_env() as (_, client):
        with pytest.raises(Forbidden, match="'val' may not create_schedule schedule 'nightly'"):
            await client.create_schedule("nightly", ticking, cron="0 2 * * *", args=("eu",),
                                         actor="val")  # fmt: skip
        await client.create_schedule("nightly", ticking, cron="0 2 * * *", args=("eu",),
                                     actor="olga")  # fmt: skip
        for op in ("pause", "resume", "trigger", "delete"):
            with pytest.raises(Forbidden, match=f"'abe' may not {op}_schedule"):
                await getattr(client, f"{op}_schedule")("nightly", actor="abe")
        await client.pause_schedule("nightly", actor="olga")
        await client.resume_schedule("nightly", actor="sam")
        handle = await client.trigger_schedule("nightly", actor="olga")
        await client.delete_schedule("nightly", actor="ada")

        changes = [(e.type, e.actor, e.schedule_id) for e in await audit(client)]
        assert changes == [
            ("schedule.created", "olga", "nightly"),
            ("schedule.paused", "olga", "nightly"),
            ("schedule.resumed", "sam", "nightly"),
            ("schedule.triggered", "olga", "nightly"),
            ("schedule.deleted", "ada", "nightly"),
        ]
        assert (await audit(client))[3].data == {"actor": "olga", "run_id": handle.run_id}
        refused = [(e.actor, e.data["action"]) for e in await audit(client, refusals=True)]
        assert refused == [("val", "create_schedule"), ("abe", "pause_schedule"),
                           ("abe", "resume_schedule"), ("abe", "trigger_schedule"),
                           ("abe", "delete_schedule")]  # fmt: skip


async def test_a_schedule_operation_without_an_actor_is_the_applications_own() -> None:
    async with roles_env() as (_, client):
        await client.create_schedule("hourly", ticking, cron="0 * * * *", args=("us",))
        await client.pause_schedule("hourly")
        assert [(e.type, e.actor) for e in await audit(client)] == [
            ("schedule.created", None), ("schedule.paused", None),
        ]  # fmt: skip


# -- the command line ------------------------------------------------------------------


def test_the_audit_command_prints_deletions_and_refusals(env: CliEnv) -> None:
    env.run(lambda c: c.start(quick, 1, run_id="q-1"))
    env.drive()
    assert env.cli("delete", "q-1", "--actor", "ada").exit_code == 0
    created = env.cli("schedules", "create", "s1", "tests.test_cli_actions.ticking",
                      "--cron", "0 * * * *", "--args", '["eu"]', "--actor", "olga")  # fmt: skip
    assert created.exit_code == 0, created.output

    listed = env.json("audit")
    assert [(e["type"], e["actor"], e["run_id"], e["schedule_id"])
            for e in listed["entries"]] == [
        ("run.deleted", "ada", "q-1", None), ("schedule.created", "olga", None, "s1"),
    ]  # fmt: skip
    assert listed["next_cursor"] == listed["entries"][-1]["entry_id"]
    table = env.cli("audit")
    assert "run.deleted" in table.stdout and "ada" in table.stdout
    assert env.json("audit", "--cursor", listed["next_cursor"])["entries"] == []
    assert env.json("audit", "--refusals")["entries"] == []


def test_schedule_commands_are_authorized_and_need_an_actor_with_an_authorizer(
    env: CliEnv,
) -> None:
    env.run(lambda c: c.create_schedule("s2", ticking, cron="0 * * * *", args=("eu",)))
    spec = "tests.test_cli_actions:only_alice"
    bare = env.cli("schedules", "pause", "s2", "--authorizer", spec)
    assert bare.exit_code == 2 and "--actor" in bare.output
    refused = env.cli("schedules", "pause", "s2", "--authorizer", spec, "--actor", "bob")
    assert refused.exit_code == 5, refused.output
    assert "'bob' may not pause_schedule schedule 's2'" in refused.output
    paused = env.cli("schedules", "pause", "s2", "--authorizer", spec, "--actor", "alice")
    assert paused.exit_code == 0, paused.output
    assert [(e["type"], e["actor"]) for e in env.json("audit")["entries"]] == [
        ("schedule.created", None), ("schedule.paused", "alice"),
    ]  # fmt: skip
    [denied] = env.json("audit", "--refusals")["entries"]
    assert (denied["actor"], denied["data"]["action"]) == ("bob", "pause_schedule")


# -- the console -----------------------------------------------------------------------


async def test_the_console_shows_a_refused_cancel_at_403() -> None:
    async with roles_env() as (env, client):
        await client.start(gate, "A-1", run_id="g-ui", actor="olga")
        await env.run_until_idle()
        tokens = BearerTokens({T1: "val"}, roles={"val": ["viewer"]})
        app = create_app(client, authenticate=tokens)
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {T1}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://sf",
                                     headers=headers) as http:  # fmt: skip
            page = await http.get("/ui/runs/g-ui")
            assert page.status_code == 200
            csrf = page.text.split('name="csrf" value="')[1].split('"')[0]
            answer = await http.post(
                "/ui/runs/g-ui/cancel", data={"csrf": csrf, "reason": "no", "confirm": "yes"},
                headers={"Origin": "http://sf"},
            )  # fmt: skip
        assert answer.status_code == 403, answer.text
        assert "Cancel refused" in answer.text and "&#39;val&#39; may not cancel" in answer.text
        assert (await client.get("g-ui")).status is RunStatus.WAITING_FOR_HUMAN
