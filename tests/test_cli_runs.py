"""``steadyflow runs list|show|timeline|events``, export, queues, and the exit codes,
driven in-process with click's runner on memory:// and on real Redis.

`CliEnv` is the store a test's setup code and its command lines share: on
memory:// the commands get it through the CLI's test seam (``obj=opener``:
each memory:// URL is a new empty server), on Redis through ``--store`` and
``--prefix`` like an operator's.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import fakeredis
import pytest
from click.testing import CliRunner, Result

from sdk import Client, Registry, RetryPolicy, Worker, flow, run_child, step, wait_for
from sdk.cli import cli
from sdk.cli._options import ExitCode
from sdk.client._follow import follow_run
from stores.redis import RedisStore
from tests.conftest import need_real_redis

T = TypeVar("T")

attempts: dict[str, int] = {}


@step(retry=RetryPolicy(max_attempts=3, initial_interval=0.01))
async def flaky(key: str) -> str:
    attempts[key] = attempts.get(key, 0) + 1
    if attempts[key] < 2:
        raise ConnectionError(f"first try of {key} fails")
    return key


@step
async def explode(what: str) -> None:
    raise ValueError(f"cannot {what}")


@flow(queue="cli-q")
async def approval(key: str) -> str:
    await flaky(key)
    decision = await wait_for("ok", human=True)
    await wait_for("go")
    return f"{key}:{decision.approved}"


@flow
async def broken(what: str) -> None:
    await explode(what)


@flow
async def quick(n: int) -> int:
    return n


@flow
async def parent(n: int) -> int:
    return sum(await asyncio.gather(run_child(quick, n), run_child(quick, n + 1)))


FLOWS: list[Callable[..., Any]] = [approval, broken, quick, parent]


class CliEnv:
    """A store shared by setup code (`run`) and the command lines (`cli`)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.server = fakeredis.FakeServer()
        self.url = need_real_redis() if kind == "redis" else "memory://"
        self.prefix = f"sftest-{uuid.uuid4().hex[:12]}"

    def opener(self) -> RedisStore:
        if self.kind == "redis":
            return RedisStore.from_url(self.url, prefix=self.prefix)
        client = fakeredis.FakeAsyncRedis(server=self.server, decode_responses=True)
        return RedisStore(client, prefix=self.prefix)

    def run(self, work: Callable[[Client], Awaitable[T]]) -> T:
        async def main() -> T:
            store = self.opener()
            try:
                return await work(Client(store))
            finally:
                await store.close()

        return asyncio.run(main())

    def drive(
        self, flows: list[Callable[..., Any]] | None = None, registry: Registry | None = None
    ) -> None:
        """Execute every ready run (a worker until idle) of `flows` (default `FLOWS`),
        or of every flow of `registry`."""

        async def main() -> None:
            store = self.opener()
            served = None if registry is not None else (flows or FLOWS)
            try:
                await Worker(store, served, lease_ttl=5.0, registry=registry).run_until_idle()
            finally:
                await store.close()

        asyncio.run(main())

    def cli(self, *argv: str, env: dict[str, str] | None = None) -> Result:
        """Run ``steadyflow ARGV`` in-process against this store."""
        args = list(argv)
        obj: Any = None
        if self.kind == "redis":
            args += ["--store", self.url, "--prefix", self.prefix]
        else:
            obj = self.opener
        return CliRunner().invoke(cli, args, obj=obj, env=env, catch_exceptions=False)

    def json(self, *argv: str) -> Any:
        done = self.cli(*argv, "--json")
        assert done.exit_code == 0, done.output
        return json.loads(done.stdout)

    def cleanup(self) -> None:
        if self.kind != "redis":
            return

        async def main() -> None:
            store = self.opener()
            keys = [k async for k in store.client.scan_iter(match=f"{self.prefix}:*")]
            if keys:
                await store.client.delete(*keys)
            await store.close()

        asyncio.run(main())


@pytest.fixture(name="env", params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def cli_env_fixture(request: pytest.FixtureRequest) -> Iterator[CliEnv]:
    env = CliEnv(request.param)
    try:
        yield env
    finally:
        env.cleanup()


def start(env: CliEnv, fn: Any, *args: Any, run_id: str, **kw: Any) -> str:
    env.run(lambda c: c.start(fn, *args, run_id=run_id, **kw))
    return run_id


def waiting_run(env: CliEnv, run_id: str = "order-1", **kw: Any) -> str:
    """A run of `approval` parked on its human wait ``ok``, after one retried step."""
    attempts.pop(run_id, None)
    start(env, approval, run_id, run_id=run_id, **kw)
    env.drive()
    return run_id


# -- runs list -----------------------------------------------------------------------


def test_runs_list_json_is_a_page_of_full_run_records(env: CliEnv) -> None:
    waiting_run(env, "order-1", tenant_id="acme")
    start(env, quick, 1, run_id="quick-1")
    env.drive()

    page = env.json("runs", "list")

    assert page["next_cursor"] is None
    assert [r["run_id"] for r in page["runs"]] == ["quick-1", "order-1"]
    order = page["runs"][1]
    assert order["status"] == "waiting_for_human"
    assert order["queue"] == "cli-q"
    assert order["tenant_id"] == "acme"
    assert order["parent_run_id"] is None  # every field is present, also at its default
    assert datetime.fromisoformat(order["created_at"]).tzinfo is not None
    assert page["runs"][0]["result"] == 1


def test_runs_list_filters_by_status_flow_queue_tenant_and_since(env: CliEnv) -> None:
    waiting_run(env, "order-1", tenant_id="acme")
    waiting_run(env, "order-2", tenant_id="other")
    start(env, broken, "pay", run_id="broken-1")
    env.drive()

    def ids(*argv: str) -> list[str]:
        return [r["run_id"] for r in env.json("runs", "list", *argv)["runs"]]

    assert ids("--status", "failed") == ["broken-1"]
    assert ids("--flow", "tests.test_cli_runs.broken") == ["broken-1"]
    assert ids("--queue", "cli-q") == ["order-2", "order-1"]
    assert ids("--tenant", "acme") == ["order-1"]
    assert ids("--queue", "cli-q", "--status", "waiting_for_human", "--tenant", "other") == [
        "order-2"
    ]
    assert ids("--since", "1h") == ["broken-1", "order-2", "order-1"]
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert ids("--since", future) == []


def test_runs_list_shows_and_filters_what_waiting_runs_wait_on(env: CliEnv) -> None:
    waiting_run(env, "order-1")
    start(env, broken, "pay", run_id="broken-1")
    env.drive()

    def ids(*argv: str) -> list[str]:
        return [r["run_id"] for r in env.json("runs", "list", *argv)["runs"]]

    assert ids("--waiting-on", "human") == ["order-1"]
    assert ids("--waiting-on", "signal") == []
    assert ids("--waiting-on", "human", "--status", "failed") == []
    listed = env.json("runs", "list")["runs"]
    assert {r["run_id"]: r["waiting_on"] for r in listed} == {
        "order-1": [{"kind": "human", "name": "ok", "deadline": None, "match": None}],
        "broken-1": [],
    }
    human = env.cli("runs", "list")
    assert "WAITING ON" in human.stdout and "DURATION" in human.stdout
    assert "approval ok" in human.stdout
    bad = env.cli("runs", "list", "--waiting-on", "approval")
    assert bad.exit_code == 2 and "'approval' is not one of 'human'" in bad.output


def test_runs_list_pages_with_the_cursor_it_prints(env: CliEnv) -> None:
    for n in range(7):
        start(env, quick, n, run_id=f"quick-{n}")

    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        argv = ["runs", "list", "--limit", "3"] + (["--cursor", cursor] if cursor else [])
        page = env.json(*argv)
        seen += [r["run_id"] for r in page["runs"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break

    assert pages == 3
    assert sorted(seen) == [f"quick-{n}" for n in range(7)]
    assert len(set(seen)) == 7
    human = env.cli("runs", "list", "--limit", "3")
    assert human.exit_code == 0
    assert "next page: --cursor " in human.stdout


def test_a_bad_cursor_or_since_is_a_usage_error(env: CliEnv) -> None:
    bad = env.cli("runs", "list", "--cursor", "nope")
    assert bad.exit_code == ExitCode.USAGE
    assert "cursor: 'nope' is not a cursor of a run listing" in bad.stderr
    assert "Traceback" not in bad.output

    tenant = env.cli("runs", "list", "--tenant", "a\x01b")
    assert tenant.exit_code == ExitCode.USAGE
    assert "run filter: tenant_id" in tenant.stderr

    since = env.cli("runs", "list", "--since", "yesterday")
    assert since.exit_code == ExitCode.USAGE
    assert "'yesterday' is neither a duration ago" in since.stderr


# -- runs show ------------------------------------------------------------------------


def test_runs_show_says_what_a_waiting_run_waits_for(env: CliEnv) -> None:
    run_id = waiting_run(env)

    shown = env.json("runs", "show", run_id)
    assert shown["run"]["run_id"] == run_id
    assert shown["run"]["status"] == "waiting_for_human"
    # the human approval the flow asked for, as it wrote it: no journal key
    assert shown["waits"] == [{"kind": "human", "name": "ok", "deadline": None, "match": None}]
    assert shown["run"]["waiting_on"] == shown["waits"]
    assert shown["queue"]["name"] == "cli-q"
    assert shown["approvers"] == {}  # the wait names none: the authorizer alone decides
    assert shown["serving_workers"] == []  # the test's worker has stopped

    human = env.cli("runs", "show", run_id)
    assert human.exit_code == 0
    assert "waiting for: human approval 'ok'" in human.stdout
    assert "waiting_for_human" in human.stdout
    assert "~" not in human.stdout


def test_runs_show_prints_the_error_of_a_failed_run(env: CliEnv) -> None:
    start(env, broken, "pay", run_id="broken-1")
    env.drive()

    shown = env.json("runs", "show", "broken-1")
    error = shown["run"]["error"]
    traceback = error.pop("traceback")
    assert error == {
        "type": "builtins:ValueError", "message": "cannot pay", "step_key": "explode#1",
        "reason": "step_failed",
    }  # fmt: skip
    assert "in explode" in traceback and traceback.rstrip().endswith("ValueError: cannot pay")
    human = env.cli("runs", "show", "broken-1")
    assert "error: builtins:ValueError (reason step_failed, step explode#1)" in human.stdout
    assert "cannot pay" in human.stdout
    assert "Traceback (most recent call last):" in human.stdout  # the step's, as recorded


def test_reading_an_unknown_run_exits_3_naming_it(env: CliEnv) -> None:
    for argv in (("runs", "show"), ("runs", "timeline"), ("runs", "events"), ("export",)):
        done = env.cli(*argv, "no-such-run")
        assert done.exit_code == ExitCode.NOT_FOUND, argv
        assert "Error: no run with id 'no-such-run'" in done.stderr
        assert "Traceback" not in done.output


# -- runs timeline -----------------------------------------------------------------


def test_runs_timeline_shows_retries_waits_and_durations(env: CliEnv) -> None:
    run_id = waiting_run(env)
    env.run(lambda c: c.approve(run_id, "ok", actor="alice"))
    env.run(lambda c: c.signal(run_id, "go"))
    env.drive()

    root = env.json("runs", "timeline", run_id)
    assert root["kind"] == "run"
    assert root["status"] == "completed"
    assert root["duration"] is None or root["duration"] >= 0
    steps = {e["label"]: e for e in root["entries"] if e["kind"] in ("step", "wait")}
    assert steps["flaky#1"]["status"] == "completed"
    retry = steps["flaky#1"]["entries"][0]
    assert retry["kind"] == "retry"
    assert "first try of order-1 fails" in retry["detail"]
    assert steps["approval ok"]["status"] == "completed"
    assert steps["signal go"]["status"] == "completed"
    starts = [e["started_at"] for e in root["entries"]]
    assert starts == sorted(starts)  # time-ordered
    assert any(e["label"] == "run.completed" for e in root["entries"])

    human = env.cli("runs", "timeline", run_id)
    assert human.exit_code == 0
    for text in (
        "run order-1", "step flaky#1", "attempt 1 failed", "wait approval ok", "wait signal go"
    ):  # fmt: skip
        assert text in human.stdout, text
    assert "~" not in human.stdout


def test_runs_timeline_nests_child_flows(env: CliEnv) -> None:
    start(env, parent, 1, run_id="parent-1")
    env.drive()

    root = env.json("runs", "timeline", "parent-1")
    children = [e for e in root["entries"] if e["kind"] == "child"]
    assert len(children) == 2
    assert {c["status"] for c in children} == {"completed"}
    assert all(any(e["label"] == "run.completed" for e in c["entries"]) for c in children)
    flat = env.json("runs", "timeline", "parent-1", "--depth", "0")
    assert [e["entries"] for e in flat["entries"] if e["kind"] == "child"] == [[], []]
    kids = env.json("runs", "list", "--parent", "parent-1")["runs"]
    assert {k["parent_run_id"] for k in kids} == {"parent-1"}
    assert len(kids) == 2


# -- runs events ------------------------------------------------------------------


def test_runs_events_prints_the_log_with_cursors(env: CliEnv) -> None:
    run_id = waiting_run(env)

    log = env.json("runs", "events", run_id)
    types = [e["type"] for e in log["events"]]
    assert types[:2] == ["run.created", "run.started"]
    assert "step.retry_scheduled" in types
    assert log["next_cursor"] is None
    first = env.json("runs", "events", run_id, "--limit", "2")
    assert [e["type"] for e in first["events"]] == types[:2]
    rest = env.json("runs", "events", run_id, "--cursor", first["next_cursor"])
    assert [e["type"] for e in rest["events"]] == types[2:]
    assert set(log["events"][0]) == {
        "event_id", "run_id", "type", "at", "step_key", "data", "correlation"
    }  # fmt: skip


def test_runs_events_follow_of_an_ended_run_prints_its_log_and_ends(env: CliEnv) -> None:
    start(env, quick, 3, run_id="quick-3")
    env.drive()

    done = env.cli("runs", "events", "quick-3", "--follow", "--json")

    assert done.exit_code == 0
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [e["type"] for e in lines][-1] == "run.completed"


def test_follow_run_delivers_events_appended_while_it_follows(env: CliEnv) -> None:
    run_id = waiting_run(env)

    async def main() -> list[str]:
        store = env.opener()
        client = Client(store)
        seen: list[str] = []
        try:
            async for event in follow_run(client, run_id, idle=30.0):
                seen.append(event.type)
                if event.type == "run.waiting_for_human" and "signal.received" not in seen:
                    # appended after the follower read the log: it must come live
                    await client.approve(run_id, "ok", actor="alice")
                    await client.signal(run_id, "go")
                    await Worker(store, FLOWS).run_until_idle()
            return seen
        finally:
            await store.close()

    seen = asyncio.run(asyncio.wait_for(main(), 60))

    assert seen.count("signal.received") == 2
    assert seen[-1] == "run.completed"  # and then it stopped by itself


def test_runs_events_limit_does_not_go_with_follow(env: CliEnv) -> None:
    done = env.cli("runs", "events", "x", "--follow", "--limit", "3")
    assert done.exit_code == ExitCode.USAGE
    assert "--limit does not go with --follow" in done.stderr


# -- export, queues --------------------------------------------------------------


def test_export_prints_the_client_export_as_json(env: CliEnv) -> None:
    run_id = waiting_run(env)

    done = env.cli("export", run_id)

    assert done.exit_code == 0
    exported = json.loads(done.stdout)
    assert exported["steadyflow_export"] == "run"
    assert exported["run_id"] == run_id
    assert [r["key"] for r in exported["journal"]] == ["flaky#1", "~wait:ok#1"]


def test_queues_reports_pending_runs(env: CliEnv) -> None:
    start(env, quick, 1, run_id="quick-1")
    start(env, quick, 2, run_id="quick-2")

    found = env.json("queues")["queues"]

    default = next(q for q in found if q["name"] == "default")
    assert default["pending"] == 2
    assert default["executing"] == 0
    assert set(default) >= {"name", "pending", "executing", "queue", "limited_by",
                            "oldest_pending_age"}  # fmt: skip
    human = env.cli("queues")
    assert human.exit_code == 0
    assert "default" in human.stdout


def test_workers_with_none_alive_is_an_empty_list(env: CliEnv) -> None:
    assert env.json("workers") == {"workers": []}
    done = env.cli("workers")
    assert done.exit_code == 0
    assert "no live worker" in done.stderr


def test_a_store_that_does_not_answer_exits_6() -> None:
    done = CliRunner().invoke(cli, ["runs", "list", "--store", "redis://127.0.0.1:1/0"])

    assert done.exit_code == ExitCode.UNAVAILABLE
    assert "redis://127.0.0.1:1/0" in done.stderr
    assert "Traceback" not in done.output


def test_every_command_shows_the_exit_codes_in_its_help() -> None:
    for argv in (("runs", "list"), ("signal",), ("cancel",), ("schedules", "list"), ("workers",)):
        done = CliRunner().invoke(cli, [*argv, "--help"])
        assert done.exit_code == 0
        assert "3 not found" in done.stdout, argv
        assert "5 forbidden" in done.stdout, argv


def test_tables_print_ids_as_they_are_not_as_markup(env: CliEnv) -> None:
    start(env, quick, 1, run_id="order[red]-1")
    env.drive()

    for argv in (("runs", "list"), ("runs", "show", "order[red]-1"),
                 ("runs", "timeline", "order[red]-1")):  # fmt: skip
        done = env.cli(*argv)
        assert done.exit_code == 0, done.output
        assert "order[red]-1" in done.stdout, argv
