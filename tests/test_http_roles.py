"""``steadyflow serve`` with roles in its tokens file, or ``--authorizer module:object``:
the real server process (issue 30). Every mutating endpoint is authorized and
audited; a deletion's audit entry outlives the run."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from sdk import Client, RunRecord, Worker
from sdk.cli import cli
from stores.redis import RedisStore
from tests.test_http import gated  # noqa: F401 (its flows: this process's worker runs them)
from tests.test_http_serve import serving as serve_process

#: The tests that run a real server on the real Redis.
process = [pytest.mark.slow, pytest.mark.redis]

VIEWER, OPERATOR, APPROVER, ADMIN, ROLELESS = (
    f"{who}-token-0123456789abcdef" for who in ("val", "olga", "abe", "ada", "rex")
)
TOKENS_FILE = f"""# tokens with roles (docs/security.md)
{VIEWER}=val:viewer
{OPERATOR}=olga:operator
{APPROVER}=abe:approver
{ADMIN}=urn:staff:ada:admin
{ROLELESS}=rex
"""


class OnlyOlga:
    """A custom authorizer: olga may do anything, nobody else anything."""

    def can(self, actor: str, action: str, run: RunRecord) -> bool:
        return actor == "olga"


def make_only_olga() -> OnlyOlga:
    return OnlyOlga()


@contextlib.contextmanager
def serving(redis_url: str, prefix: str, workdir: Path, *argv: str) -> Iterator[str]:
    """``steadyflow serve tests.test_http ARGV`` on `prefix`, with no tokens in the
    environment (they come from ARGV); its base URL while it runs."""
    store = ["--store", redis_url, "--prefix", prefix]
    with serve_process(store, workdir, *argv, env={"STEADYFLOW_API_TOKENS": ""}) as base:
        yield base


@pytest.fixture(name="server")
def server_fixture(redis_url: str, key_prefix: str, tmp_path: Path) -> Iterator[str]:
    """The server with `TOKENS_FILE`; its base URL."""
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKENS_FILE)
    with serving(redis_url, key_prefix, tmp_path, "--tokens-file", str(tokens)) as base:
        yield base


@contextlib.asynccontextmanager
async def as_(server: str, token: str) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=server, headers=headers, timeout=20) as http:
        yield http


def forbidden(answer: httpx.Response, text: str) -> None:
    assert answer.status_code == 403, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = answer.json()
    assert body["code"] == "forbidden" and text in body["detail"], body


async def start(server: str, run_id: str, flow: str = "tests.http.gated") -> None:
    async with as_(server, OPERATOR) as http:
        answer = await http.post("/v1/runs", json={"flow": flow, "run_id": run_id})
        assert answer.status_code == 201, answer.text


@process[0]
@process[1]
async def test_a_viewer_reads_but_may_not_start_cancel_or_delete(
    server: str, real_store: RedisStore
) -> None:
    await start(server, "v-1")
    async with as_(server, VIEWER) as http:
        forbidden(await http.post("/v1/runs", json={"flow": "tests.http.gated", "run_id": "v-2"}),
                  "'val' may not start run 'v-2'")  # fmt: skip
        forbidden(await http.post("/v1/runs/v-1/cancel", json={"reason": "mine"}),
                  "'val' may not cancel run 'v-1'")  # fmt: skip
        forbidden(await http.delete("/v1/runs/v-1"), "'val' may not delete run 'v-1'")
        # reads are fine
        assert (await http.get("/v1/runs/v-1")).json()["status"] == "pending"
        assert [r["run_id"] for r in (await http.get("/v1/runs")).json()["runs"]] == ["v-1"]
        events = (await http.get("/v1/runs/v-1/events")).json()["events"]
        assert (await http.get("/v1/runs/v-2")).status_code == 404  # the start wrote nothing
        refusals = (await http.get("/v1/audit", params={"refusals": "true"})).json()
    assert [(e["type"], e["data"]) for e in events] == [
        ("run.created", {"flow": "tests.http.gated", "queue": "default", "priority": 0,
                         "actor": "olga"}),
        ("auth.denied", {"actor": "val", "action": "cancel"}),
        ("auth.denied", {"actor": "val", "action": "delete"}),
    ]  # fmt: skip
    [denied] = refusals["entries"]
    assert (denied["type"], denied["actor"], denied["run_id"], denied["data"]["action"]) == (
        "auth.denied", "val", "v-2", "start",
    )  # fmt: skip
    # a token without roles may read, and nothing more
    async with as_(server, ROLELESS) as http:
        assert (await http.get("/v1/runs/v-1")).status_code == 200
        forbidden(await http.post("/v1/runs/v-1/signals/go"), "'rex' may not signal run 'v-1'")


@process[0]
@process[1]
async def test_an_approver_approves_but_may_not_delete(server: str, real_store: RedisStore) -> None:
    await start(server, "a-1")
    await Worker(real_store).run_until_idle()
    async with as_(server, APPROVER) as http:
        forbidden(await http.post("/v1/runs/a-1/cancel", json={"reason": "x"}), "may not cancel")
        approved = await http.post("/v1/runs/a-1/approve/ok", json={"reason": "fine"})
        assert approved.status_code == 200, approved.text
        await Worker(real_store).run_until_idle()
        assert (await http.get("/v1/runs/a-1")).json()["status"] == "completed"
        forbidden(await http.delete("/v1/runs/a-1"), "'abe' may not delete run 'a-1'")
        assert (await http.get("/v1/runs/a-1")).status_code == 200


@process[0]
@process[1]
async def test_an_admin_deletes_and_the_deletion_outlives_the_run(
    server: str, real_store: RedisStore
) -> None:
    await start(server, "d-1")
    await Worker(real_store).run_until_idle()
    async with as_(server, APPROVER) as http:
        await http.post("/v1/runs/d-1/deny/ok", json={"reason": "no"})
    await Worker(real_store).run_until_idle()
    async with as_(server, OPERATOR) as http:  # operators do not delete either
        forbidden(await http.delete("/v1/runs/d-1"), "'olga' may not delete run 'd-1'")
    async with as_(server, ADMIN) as http:
        assert (await http.delete("/v1/runs/d-1")).status_code == 204
        assert (await http.get("/v1/runs/d-1")).status_code == 404
        audit = (await http.get("/v1/audit")).json()
    [entry] = audit["entries"]
    assert (entry["type"], entry["actor"], entry["run_id"]) == (
        "run.deleted", "urn:staff:ada", "d-1",
    )  # fmt: skip
    assert (entry["data"]["flow"], entry["data"]["status"]) == ("tests.http.gated", "completed")
    assert audit["next_cursor"] == entry["entry_id"]
    # any reader sees it, also through the client
    async with as_(server, VIEWER) as http:
        assert (await http.get("/v1/audit")).json()["entries"] == [entry]
    [kept] = await Client(real_store).audit_log()
    assert (kept.type, kept.actor, kept.run_id) == ("run.deleted", "urn:staff:ada", "d-1")


@process[0]
@process[1]
async def test_schedule_operations_are_authorized_and_logged(
    server: str, real_store: RedisStore
) -> None:
    await Client(real_store).create_schedule("nightly", "tests.roles.report", cron="0 2 * * *",
                                             actor="setup")  # fmt: skip
    async with as_(server, VIEWER) as http:
        forbidden(await http.post("/v1/schedules/nightly/pause"),
                  "'val' may not pause_schedule schedule 'nightly'")  # fmt: skip
        forbidden(await http.delete("/v1/schedules/nightly"), "may not delete_schedule")
        assert [s["schedule_id"] for s in (await http.get("/v1/schedules")).json()["schedules"]
                ] == ["nightly"]  # fmt: skip
    async with as_(server, OPERATOR) as http:
        assert (await http.post("/v1/schedules/nightly/pause")).json()["paused"] is True
        assert (await http.post("/v1/schedules/nightly/resume")).json()["paused"] is False
        triggered = (await http.post("/v1/schedules/nightly/trigger")).json()
        assert (await http.delete("/v1/schedules/nightly")).status_code == 204
        audit = (await http.get("/v1/audit")).json()["entries"]
        refusals = (await http.get("/v1/audit?refusals=1")).json()["entries"]
    assert [(e["type"], e["actor"], e["schedule_id"]) for e in audit] == [
        ("schedule.created", "setup", "nightly"),
        ("schedule.paused", "olga", "nightly"),
        ("schedule.resumed", "olga", "nightly"),
        ("schedule.triggered", "olga", "nightly"),
        ("schedule.deleted", "olga", "nightly"),
    ]
    assert audit[3]["data"]["run_id"] == triggered["run_id"]
    assert [(e["actor"], e["data"]["action"]) for e in refusals] == [
        ("val", "pause_schedule"), ("val", "delete_schedule"),
    ]  # fmt: skip


@process[0]
@process[1]
async def test_serve_loads_a_custom_authorizer_from_module_object(
    redis_url: str, key_prefix: str, tmp_path: Path, real_store: RedisStore
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{OPERATOR}=olga\n{ADMIN}=ada\n")
    spec = "tests.test_http_roles:make_only_olga"  # a factory, called once
    with serving(redis_url, key_prefix, tmp_path, "--tokens-file", str(tokens),
                 "--authorizer", spec) as base:  # fmt: skip
        async with as_(base, ADMIN) as http:  # no roles here: the authorizer decides
            forbidden(await http.post("/v1/runs", json={"flow": "tests.http.gated"}),
                      "'ada' may not start run")  # fmt: skip
        async with as_(base, OPERATOR) as http:
            started = await http.post("/v1/runs", json={"flow": "tests.http.gated",
                                                        "run_id": "c-1"})  # fmt: skip
            assert started.status_code == 201, started.text
            assert (
                await http.post("/v1/runs/c-1/cancel", json={"reason": "x", "grace": 0})
            ).status_code == 200
            assert (await http.delete("/v1/runs/c-1")).status_code == 204


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("tests.no_such_module:authorizer", "'tests.no_such_module:authorizer': cannot import"),
        ("tests.test_http_roles:missing", "'tests.test_http_roles:missing': module"),
        ("tests.test_http_roles:TOKENS_FILE", "'tests.test_http_roles:TOKENS_FILE' is not an"),
        ("no-colon", "'no-colon' is not module:attr"),
    ],
)  # fmt: skip
def test_serve_refuses_an_authorizer_that_does_not_load_naming_it(spec: str, error: str) -> None:
    done = CliRunner().invoke(
        cli, ["serve", "--store", "memory://", "--authorizer", spec],
        env={"STEADYFLOW_API_TOKENS": f"{OPERATOR}=olga"},
    )  # fmt: skip
    assert done.exit_code == 2, done.output
    assert error in done.output and "--authorizer" in done.output


@pytest.mark.parametrize(
    ("argv", "tokens", "error"),
    [
        (["--authorizer", "tests.test_http_roles:OnlyOlga"], f"{OPERATOR}=olga:operator",
         "and the tokens carry roles too"),
        ([], f"{OPERATOR}=olga:root", "'root' is not a role"),
        ([], f"{OPERATOR}=olga:operator,{ADMIN}=olga:admin", "carry different roles"),
        (["--insecure-local"], f"{OPERATOR}=olga:operator", "roles the tokens carry would be"),
    ],
)  # fmt: skip
def test_serve_refuses_tokens_whose_roles_do_not_hold(
    argv: list[str], tokens: str, error: str
) -> None:
    done = CliRunner().invoke(
        cli, ["serve", "--store", "memory://", *argv], env={"STEADYFLOW_API_TOKENS": tokens}
    )
    assert done.exit_code == 2, done.output
    assert error in done.output
    assert OPERATOR not in done.output and ADMIN not in done.output
