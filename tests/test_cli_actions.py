"""The privileged commands (signal, approve, deny, cancel, resume, replay, fork,
send-event, delete) and ``schedules``: their effects through `Client`, their exit codes, and
the authorizer (``--authorizer`` / ``$STEADYFLOW_AUTHORIZER``, ``--actor`` /
``$STEADYFLOW_ACTOR``) refusing and auditing exactly as in Python."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest

from sdk import Decision, RunRecord, flow, wait_for_event
from sdk.cli._options import ExitCode
from tests.test_cli_runs import (  # noqa: F401 (the env fixture)
    CliEnv,
    broken,
    cli_env_fixture,
    quick,
    start,
    waiting_run,
)


class OnlyAlice:
    """Alice may do anything; anyone else nothing."""

    def can(self, actor: str, action: str, run: RunRecord) -> bool:
        return actor == "alice"


only_alice = OnlyAlice()


def make_only_alice() -> OnlyAlice:
    return OnlyAlice()


not_an_authorizer = 42


@flow(name="tests.cli.versioned", version="1")
async def versioned_v1(n: int) -> int:
    return n


@flow
async def ticking(tick: datetime, region: str) -> str:
    return f"{region}@{tick.isoformat()}"


def status_of(env: CliEnv, run_id: str) -> str:
    return str(env.json("runs", "show", run_id)["run"]["status"])


def event_types(env: CliEnv, run_id: str) -> list[tuple[str, Any]]:
    return [(e["type"], e["data"]) for e in env.json("runs", "events", run_id)["events"]]


# -- signal, approve, deny -------------------------------------------------------------


def test_approve_then_signal_completes_a_waiting_run(env: CliEnv) -> None:
    run_id = waiting_run(env)

    approved = env.cli(
        "approve", run_id, "ok", "--actor", "alice", "--reason", "looks fine",
        "--payload", '{"limit": 5}',
    )  # fmt: skip
    assert approved.exit_code == 0, approved.output
    assert "approved 'ok' of run 'order-1' as 'alice'" in approved.stdout
    sent = env.cli("signal", run_id, "go", "--payload", "[1, 2]", "--dedup-id", "go-1")
    assert sent.exit_code == 0, sent.output
    again = env.cli("signal", run_id, "go", "--dedup-id", "go-1")
    assert again.exit_code == 0
    assert "was already delivered" in again.stdout
    env.drive()

    assert status_of(env, run_id) == "completed"
    assert env.json("runs", "show", run_id)["run"]["result"] == "order-1:True"
    received = [d for t, d in event_types(env, run_id) if t == "signal.received"]
    assert received[0] == {"name": "ok", "decision": "approve", "actor": "alice",
                           "reason": "looks fine"}  # fmt: skip


def test_deny_delivers_a_denial(env: CliEnv) -> None:
    run_id = waiting_run(env)

    done = env.cli("deny", run_id, "ok", "--reason", "no budget", env={"STEADYFLOW_ACTOR": "bob"})

    assert done.exit_code == 0, done.output
    env.drive()
    exported = json.loads(env.cli("export", run_id).stdout)
    wait = next(r for r in exported["journal"] if r["key"] == "~wait:ok#1")
    assert wait["value"]["approved"] is False
    assert Decision(**wait["value"]).actor == "bob"


def test_approve_needs_an_actor(env: CliEnv) -> None:
    run_id = waiting_run(env)

    done = env.cli("approve", run_id, "ok")

    assert done.exit_code == ExitCode.USAGE
    assert "approve needs an actor: --actor NAME or $STEADYFLOW_ACTOR" in done.stderr


def test_approving_what_a_run_does_not_wait_for_exits_4(env: CliEnv) -> None:
    start(env, quick, 1, run_id="quick-1")
    env.drive()

    approve = env.cli("approve", "quick-1", "ok", "--actor", "alice")
    assert approve.exit_code == ExitCode.REFUSED
    assert "run 'quick-1'" in approve.stderr
    signal = env.cli("signal", "quick-1", "go")
    assert signal.exit_code == ExitCode.REFUSED
    assert "run 'quick-1'" in signal.stderr


def test_a_payload_that_is_not_json_is_a_usage_error(env: CliEnv) -> None:
    done = env.cli("signal", "order-1", "go", "--payload", "{oops")

    assert done.exit_code == ExitCode.USAGE
    assert "is not JSON" in done.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ("signal", "nope", "go"),
        ("approve", "nope", "ok", "--actor", "alice"),
        ("cancel", "nope", "--reason", "x"),
        ("resume", "nope"),
        ("replay", "nope"),
        ("fork", "nope"),
        ("delete", "nope"),
    ],
    ids=lambda argv: argv[0],
)
def test_acting_on_an_unknown_run_exits_3(env: CliEnv, argv: tuple[str, ...]) -> None:
    done = env.cli(*argv)

    assert done.exit_code == ExitCode.NOT_FOUND, done.output
    assert "'nope'" in done.stderr
    assert "Traceback" not in done.output


# -- send-event -------------------------------------------------------------------------


@flow(name="tests.cli.pickup")
async def pickup(order_id: str) -> Any:
    return await wait_for_event("carrier.pickup", match={"order_id": order_id})


def test_send_event_reaches_the_run_whose_wait_it_matches(env: CliEnv) -> None:
    start(env, pickup, "o-1", run_id="pickup-1")
    start(env, pickup, "o-2", run_id="pickup-2")
    env.drive([pickup])

    sent = env.cli(
        "send-event", "carrier.pickup", '{"order_id": "o-1", "carrier": "dhl"}',
        "--event-id", "hook-1", "--actor", "webhook",
    )  # fmt: skip
    assert sent.exit_code == 0, sent.output
    assert sent.stdout.split() == ["pickup-1"]
    again = env.json("send-event", "carrier.pickup", '{"order_id": "o-1"}', "--event-id", "hook-1")
    assert again == {"run_ids": []}  # the same event id: delivered once
    none = env.cli("send-event", "carrier.pickup", '{"order_id": "o-9"}')
    assert none.exit_code == 0 and "no run waits for it" in none.stderr
    env.drive([pickup])

    assert env.json("runs", "show", "pickup-1")["run"]["result"] == {
        "order_id": "o-1", "carrier": "dhl",
    }  # fmt: skip
    assert status_of(env, "pickup-2") == "waiting_for_signal"
    delivered = [d for t, d in event_types(env, "pickup-1") if t == "event.delivered"]
    assert [(d["name"], d["event_id"], d["actor"]) for d in delivered] == [
        ("carrier.pickup", "hook-1", "webhook")
    ]


def test_send_event_refuses_data_no_wait_could_match(env: CliEnv) -> None:
    for data in ('"notadict"', "[1, 2]", "3"):
        done = env.cli("send-event", "carrier.pickup", data)
        assert done.exit_code == ExitCode.USAGE, (data, done.output)
        assert "must be a JSON object (field -> value) or null" in done.stderr
    bad = env.cli("send-event", "carrier.pickup", "{not json")
    assert bad.exit_code == ExitCode.USAGE and "is not JSON" in bad.output


# -- cancel, resume, replay, fork, delete -----------------------------------------


def test_cancel_a_waiting_run_then_resume_it(env: CliEnv) -> None:
    run_id = waiting_run(env)

    done = env.cli("cancel", run_id, "--reason", "customer left", "--grace", "0")
    assert done.exit_code == 0, done.output
    assert f"run {run_id!r} canceled" in done.stdout
    assert status_of(env, run_id) == "canceled"
    assert env.json("runs", "show", run_id)["run"]["reason"] == "customer left"

    again = env.cli("cancel", run_id, "--reason", "twice")
    assert again.exit_code == ExitCode.REFUSED
    assert "canceled" in again.stderr

    resumed = env.cli("resume", run_id, "--actor", "alice")
    assert resumed.exit_code == 0, resumed.output
    env.drive()
    assert status_of(env, run_id) == "waiting_for_human"
    resumed_events = [d for t, d in event_types(env, run_id) if t == "run.resumed"]
    assert resumed_events[-1]["actor"] == "alice"


def test_cancel_needs_a_reason(env: CliEnv) -> None:
    done = env.cli("cancel", "order-1")

    assert done.exit_code == ExitCode.USAGE
    assert "--reason" in done.stderr


def test_resume_force_is_recorded(env: CliEnv) -> None:
    start(env, broken, "pay", run_id="broken-1")
    env.drive()

    done = env.cli("resume", "broken-1", "--force")

    assert done.exit_code == 0, done.output
    resumed = [d for t, d in event_types(env, "broken-1") if t == "run.resumed"]
    assert resumed[-1]["force"] is True


def test_resume_version_moves_a_run_stuck_on_an_unserved_version(env: CliEnv) -> None:
    start(env, versioned_v1, 1, run_id="stuck-1")  # no worker serves version 1

    shown = env.cli("runs", "show", "stuck-1")
    assert "served by: no live worker serves this flow on this queue" in shown.stdout
    done = env.cli("resume", "stuck-1", "--version", "2", "--actor", "ops")

    assert done.exit_code == 0, done.output
    assert "run 'stuck-1' resumed on version '2'" in done.stdout
    run = env.json("runs", "show", "stuck-1")["run"]
    assert (run["status"], run["flow_version"]) == ("pending", "2")
    resumed = [d for t, d in event_types(env, "stuck-1") if t == "run.resumed"]
    assert (resumed[-1]["from_version"], resumed[-1]["version"]) == ("1", "2")
    bad = env.cli("resume", "stuck-1", "--version", "")
    assert bad.exit_code == ExitCode.USAGE
    assert "version" in bad.stderr


def test_replay_and_fork_print_the_new_run_id(env: CliEnv) -> None:
    start(env, quick, 7, run_id="quick-7")
    env.drive()

    replay = env.cli("replay", "quick-7", "--new-run-id", "quick-7-replay")
    assert replay.exit_code == 0, replay.output
    assert replay.stdout.strip() == "quick-7-replay"
    fork = env.json("fork", "quick-7", "--checkpoint", "1", "--new-run-id", "quick-7-fork")
    assert fork == {"run_id": "quick-7-fork", "source_run_id": "quick-7"}
    env.drive()

    for run_id in ("quick-7-replay", "quick-7-fork"):
        run = env.json("runs", "show", run_id)["run"]
        assert run["status"] == "completed"
        assert run["source_run_id"] == "quick-7"
    bad = env.cli("fork", "quick-7", "--checkpoint", "99")
    assert bad.exit_code == ExitCode.USAGE
    assert "run 'quick-7' has no checkpoint '99'" in bad.stderr


def test_delete_removes_a_finished_run_and_refuses_a_live_one(env: CliEnv) -> None:
    start(env, quick, 1, run_id="quick-1")
    live = waiting_run(env)
    env.drive()

    refused = env.cli("delete", live)
    assert refused.exit_code == ExitCode.REFUSED
    assert "cancel it first" in refused.stderr
    done = env.cli("delete", "quick-1")
    assert done.exit_code == 0, done.output
    assert env.cli("runs", "show", "quick-1").exit_code == ExitCode.NOT_FOUND


# -- the authorizer --------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec", ["tests.test_cli_actions:only_alice", "tests.test_cli_actions:OnlyAlice",
             "tests.test_cli_actions:make_only_alice"],
    ids=["instance", "class", "factory"],
)  # fmt: skip
def test_the_authorizer_refuses_and_audits_like_the_client(env: CliEnv, spec: str) -> None:
    run_id = waiting_run(env)

    refused = env.cli("approve", run_id, "ok", "--actor", "bob", "--authorizer", spec)
    assert refused.exit_code == ExitCode.FORBIDDEN
    assert "'bob' may not approve run 'order-1'" in refused.stderr
    assert status_of(env, run_id) == "waiting_for_human"
    denied = [d for t, d in event_types(env, run_id) if t == "auth.denied"]
    assert denied == [{"actor": "bob", "action": "approve"}]

    nobody = env.cli("cancel", run_id, "--reason", "x", env={"STEADYFLOW_AUTHORIZER": spec})
    assert nobody.exit_code == ExitCode.FORBIDDEN
    assert "needs an actor" in nobody.stderr

    allowed = env.cli(
        "cancel", run_id, "--reason", "x", "--grace", "0",
        env={"STEADYFLOW_AUTHORIZER": spec, "STEADYFLOW_ACTOR": "alice"},
    )  # fmt: skip
    assert allowed.exit_code == 0, allowed.output
    assert status_of(env, run_id) == "canceled"


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("nocolon", "'nocolon' is not module:attr"),
        ("no_such_module_xyz:a", "cannot import 'no_such_module_xyz'"),
        ("tests.test_cli_actions:missing", "has no attribute 'missing'"),
        ("tests.test_cli_actions:not_an_authorizer", "is not an Authorizer"),
    ],
    ids=["form", "module", "attribute", "type"],
)
def test_a_bad_authorizer_is_a_usage_error(env: CliEnv, spec: str, error: str) -> None:
    done = env.cli("delete", "x", "--authorizer", spec)

    assert done.exit_code == ExitCode.USAGE
    assert error in done.stderr
    assert "--authorizer" in done.stderr


# -- schedules --------------------------------------------------------------------------


def test_schedules_create_list_pause_resume_trigger_delete(env: CliEnv) -> None:
    name = "tests.test_cli_actions.ticking"

    created = env.json(
        "schedules", "create", "nightly", name, "--cron", "30 2 * * *", "--tz", "Europe/Paris",
        "--args", '["eu"]',
    )  # fmt: skip
    assert created["schedule_id"] == "nightly"
    assert created["paused"] is False
    listed = env.json("schedules", "list")["schedules"]
    assert [s["schedule_id"] for s in listed] == ["nightly"]
    assert env.json("schedules", "show", "nightly")["cron"] == "30 2 * * *"

    assert env.cli("schedules", "pause", "nightly").exit_code == 0
    assert env.json("schedules", "show", "nightly")["paused"] is True
    resumed = env.cli("schedules", "resume", "nightly")
    assert resumed.exit_code == 0
    assert "next tick" in resumed.stdout
    triggered = env.cli("schedules", "trigger", "nightly")
    assert triggered.exit_code == 0
    assert triggered.stdout.startswith("nightly@")
    assert env.cli("schedules", "delete", "nightly").exit_code == 0

    for verb in ("show", "pause", "resume", "trigger", "delete"):
        gone = env.cli("schedules", verb, "nightly")
        assert gone.exit_code == ExitCode.NOT_FOUND, verb
        assert "nightly" in gone.stderr


def test_schedules_create_refuses_a_bad_cron(env: CliEnv) -> None:
    done = env.cli("schedules", "create", "s", "some.flow", "--cron", "every day")

    assert done.exit_code == ExitCode.USAGE
    assert "schedule 's'" in done.stderr
