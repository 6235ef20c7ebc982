"""The runbook of docs/operations.md, walked through with the commands it names:
a run stuck pending (no worker, a queue limit, a version no worker serves),
stuck waiting, failing repeatedly, a poisoned journal after a deploy,
deleting what is not needed any more, and a damaged index."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import textwrap
import threading
from collections.abc import Iterator

import pytest

from sdk import Client, Queue, Registry, Worker, flow, step, wait_for
from sdk.cli._options import ExitCode
from stores.redis import RedisStore
from testing import replay
from tests.docsnippets import DOCS
from tests.test_cli_runs import (  # noqa: F401 (the env fixture)
    CliEnv,
    cli_env_fixture,
    start,
)

dependency = {"up": False}
released = threading.Event()
holding = threading.Event()


@step
async def call_dependency(order: str) -> str:
    if not dependency["up"]:
        raise ConnectionError(f"payments API down while charging {order}")
    return f"charged {order}"


@flow
async def charge(order: str) -> str:
    return await call_dependency(order)


@step
async def hold() -> None:
    holding.set()
    await asyncio.to_thread(released.wait, 30)


@flow(queue=Queue("runbook-one-at-a-time", concurrency=1))
async def exclusive(n: int) -> int:
    await hold()
    return n


# The same flow name before and after a deploy that inserted a step in front
# (its old runs' journals no longer fit), and the fix that restores the order.
POISONED = "tests.runbook.shipping"


@step
async def pack(order: str) -> str:
    return f"packed {order}"


@step
async def weigh(order: str) -> int:
    return 3


async def _before(order: str) -> str:
    packed = await pack(order)
    await wait_for("pickup")
    return packed


async def _after(order: str) -> str:
    await weigh(order)  # inserted before pack: a run recorded pack here
    return await _before(order)


async def _fixed(order: str) -> str:
    packed = await _before(order)
    await weigh(order)  # the new step goes after what old runs recorded
    return packed


OLD, DEPLOYED, FIXED = Registry(), Registry(), Registry()
flow(name=POISONED, registry=OLD)(_before)
flow(name=POISONED, registry=DEPLOYED)(_after)
shipping_fixed = flow(name=POISONED, registry=FIXED)(_fixed)


@pytest.fixture(name="dependency_down")
def dependency_down_fixture() -> Iterator[None]:
    dependency["up"] = False
    yield
    dependency["up"] = False


def test_stuck_pending_with_no_worker_then_served(env: CliEnv) -> None:
    start(env, charge, "A-1", run_id="charge-A-1")
    dependency["up"] = True
    try:
        shown = env.cli("runs", "show", "charge-A-1")
        assert "served by: no live worker serves this flow on this queue" in shown.stdout
        assert env.json("workers") == {"workers": []}

        env.drive([charge])  # a worker that serves the flow

        assert env.json("runs", "show", "charge-A-1")["run"]["status"] == "completed"
    finally:
        dependency["up"] = False


def test_stuck_pending_behind_a_queue_limit(env: CliEnv) -> None:
    released.clear()
    holding.clear()
    start(env, exclusive, 1, run_id="first")
    start(env, exclusive, 2, run_id="second")

    def serve() -> None:  # a worker in a thread of its own, holding the queue's one slot
        async def main() -> None:
            store = env.opener()
            worker = Worker(store, [exclusive])
            task = asyncio.create_task(worker.run())
            await asyncio.to_thread(released.wait, 30)
            await worker.stop()
            await task
            await store.close()

        asyncio.run(main())

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        assert holding.wait(30)  # the first run executes, the second is ready
        queue = next(
            q
            for q in env.json("queues", "--import", "tests.test_cli_runbook")["queues"]
            if q["name"] == "runbook-one-at-a-time"
        )
        assert (queue["pending"], queue["executing"]) == (1, 1)
        assert queue["limited_by"] == "concurrency"
        assert queue["queue"]["concurrency"] == 1
        shown = env.json("runs", "show", "second")
        assert shown["queue"]["limited_by"] == "concurrency"
    finally:
        released.set()
        thread.join(60)
    assert not thread.is_alive()


def test_stuck_waiting_is_named_and_decided(env: CliEnv) -> None:
    from tests.test_cli_runs import waiting_run

    run_id = waiting_run(env)

    shown = env.cli("runs", "show", run_id)
    assert "waiting for: human approval 'ok'" in shown.stdout
    assert env.cli("approve", run_id, "ok", "--actor", "alice").exit_code == 0
    assert env.cli("signal", run_id, "go").exit_code == 0
    env.drive()
    assert env.json("runs", "show", run_id)["run"]["status"] == "completed"


@pytest.mark.usefixtures("dependency_down")
def test_failing_repeatedly_then_resumed_once_fixed(env: CliEnv) -> None:
    start(env, charge, "A-1", run_id="charge-A-1")
    env.drive([charge])

    failed = env.json("runs", "list", "--status", "failed")["runs"]
    assert [r["run_id"] for r in failed] == ["charge-A-1"]
    shown = env.cli("runs", "show", "charge-A-1")
    assert "payments API down while charging A-1" in shown.stdout
    assert "reason step_failed, step call_dependency#1" in shown.stdout

    dependency["up"] = True  # the cause is fixed
    assert env.cli("resume", "charge-A-1", "--actor", "alice").exit_code == 0
    env.drive([charge])

    run = env.json("runs", "show", "charge-A-1")["run"]
    assert (run["status"], run["result"]) == ("completed", "charged A-1")


def test_a_poisoned_journal_is_exported_checked_and_resumed_on_the_fix(env: CliEnv) -> None:
    env.run(lambda c: c.start(POISONED, "A-1", run_id="ship-A-1"))
    env.drive(registry=OLD)
    assert env.cli("signal", "ship-A-1", "pickup").exit_code == 0
    env.drive(registry=DEPLOYED)  # the deploy: the run's journal no longer fits

    shown = env.cli("runs", "show", "ship-A-1")
    assert "reason non_determinism" in shown.stdout
    exported = json.loads(env.cli("export", "ship-A-1").stdout)
    report = asyncio.run(replay(shipping_fixed, exported, registry=FIXED))  # the fix fits
    assert "pack#1" in report.replayed

    assert env.cli("resume", "ship-A-1", "--actor", "alice").exit_code == 0
    env.drive(registry=FIXED)

    run = env.json("runs", "show", "ship-A-1")["run"]
    assert (run["status"], run["result"]) == ("completed", "packed A-1")


@pytest.mark.usefixtures("dependency_down")
def test_memory_growth_deleting_failed_runs(env: CliEnv) -> None:
    for n in range(3):
        start(env, charge, f"B-{n}", run_id=f"charge-B-{n}")
    env.drive([charge])

    failed = [r["run_id"] for r in env.json("runs", "list", "--status", "failed")["runs"]]
    assert len(failed) == 3
    for run_id in failed:
        assert env.cli("delete", run_id, "--actor", "alice").exit_code == 0

    assert env.json("runs", "list", "--status", "failed")["runs"] == []
    assert env.cli("runs", "show", failed[0]).exit_code == ExitCode.NOT_FOUND


# -- a damaged index ------------------------------------------------------------------


def _damage(env: CliEnv, suffix: str) -> str:
    """Make the shared key `suffix` of partition 0 a string; its name."""

    async def work(client: Client) -> str:
        store = client.store
        assert isinstance(store, RedisStore)
        name = store.keys.base(0) + suffix
        await store.client.delete(name)
        await store.client.set(name, "garbage")
        return name

    return env.run(work)


def test_a_damaged_queue_is_named_then_rebuilt_by_a_worker(env: CliEnv) -> None:
    dependency["up"] = True
    try:
        for n in range(3):
            start(env, charge, f"C-{n}", run_id=f"charge-C-{n}")
        queue = _damage(env, "q:default")

        listed = env.cli("queues")
        assert listed.exit_code == ExitCode.FAILED
        assert f"a key that runs share is damaged: {queue}: holds a string" in listed.output

        env.drive([charge])  # its first poll sets the queue aside and rebuilds it

        for n in range(3):
            run = env.json("runs", "show", f"charge-C-{n}")["run"]
            assert (run["status"], run["result"]) == ("completed", f"charged C-{n}")
        assert env.cli("queues").exit_code == 0
    finally:
        dependency["up"] = False


def _runbook_shell(url: str, prefix: str) -> str:
    """The runbook's commands that rebuild a status and the all-runs index, for
    the Redis at `url` and the deployment under `prefix`."""
    text = (DOCS / "operations.md").read_text(encoding="utf-8")
    section = text[text.index("\n### A damaged index\n") :]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None
    code = textwrap.dedent(block.group(1))
    return code.replace("redis-cli", f"redis-cli -u {url}").replace("sf:{p0}", f"{prefix}:{{p0}}")


@pytest.mark.redis
def test_a_damaged_status_index_and_the_all_runs_index_are_rebuilt_by_hand() -> None:
    if shutil.which("redis-cli") is None:
        pytest.skip("redis-cli is not on PATH")
    env = CliEnv("redis")
    try:
        for n in range(3):
            start(env, charge, f"D-{n}", run_id=f"charge-D-{n}")
        pending = _damage(env, "idx:pending")
        listed = env.cli("runs", "list", "--status", "pending")
        assert listed.exit_code == ExitCode.FAILED
        assert pending in listed.output

        subprocess.run(["bash", "-c", _runbook_shell(env.url, env.prefix)], check=True)

        runs = env.json("runs", "list", "--status", "pending")["runs"]
        assert sorted(r["run_id"] for r in runs) == [f"charge-D-{n}" for n in range(3)]
        assert len(env.json("runs", "list")["runs"]) == 3
    finally:
        env.cleanup()
