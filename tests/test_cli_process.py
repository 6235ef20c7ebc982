"""The installed ``steadyflow`` console script as an operator runs it, against real
Redis: a ``steadyflow worker`` process serves this module's flows while
``runs list``, ``runs show``, ``workers``, ``runs events --follow`` and
``signal`` run as processes of their own."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sdk import Client, RunStatus, flow, step, wait_for, wait_for_event
from stores.redis import RedisStore
from tests.crashflows import ROOT, STEADYFLOW, until

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@flow
async def greet(name: str) -> str:
    return f"hello {name}"


@flow
async def gate() -> str:
    opened = await wait_for("open")
    return f"opened {opened}"


@step
async def bill(amount: int) -> None:
    raise ValueError(f"card declined for {amount}")


@flow(queue="tests.cli_process.billing")  # declared nowhere: the worker says so
async def billing(amount: int) -> None:
    await bill(amount)


@flow
async def pickup(order_id: str) -> Any:
    return await wait_for_event("carrier.pickup", match={"order_id": order_id})


async def steadyflow(*argv: str, url: str, prefix: str) -> subprocess.CompletedProcess[str]:
    """``steadyflow ARGV --store URL --prefix P``, run to its end."""
    return await asyncio.to_thread(
        subprocess.run,
        [STEADYFLOW, *argv, "--store", url, "--prefix", prefix],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


async def read_json(*argv: str, url: str, prefix: str) -> Any:
    done = await steadyflow(*argv, "--json", url=url, prefix=prefix)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_an_operator_session_against_a_worker_process(
    redis_url: str, key_prefix: str, real_store: RedisStore, tmp_path: Path
) -> None:
    client = Client(real_store)
    log = (tmp_path / "worker.log").open("w")
    worker = await asyncio.create_subprocess_exec(
        STEADYFLOW, "worker", "tests.test_cli_process", "--store", redis_url,
        "--prefix", key_prefix, "--lease-ttl", "2",
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    follower: asyncio.subprocess.Process | None = None
    try:
        done = await client.start(greet, "ada", run_id="greet-1")
        assert await done.result(timeout=30) == "hello ada"
        await client.start(gate, run_id="gate-1")
        await until(lambda: _is_waiting(client), 30, "gate-1 to wait for its signal")

        listed = await read_json("runs", "list", url=redis_url, prefix=key_prefix)
        assert [(r["run_id"], r["status"]) for r in listed["runs"]] == [
            ("gate-1", "waiting_for_signal"), ("greet-1", "completed"),
        ]  # fmt: skip
        shown = await read_json("runs", "show", "gate-1", url=redis_url, prefix=key_prefix)
        assert [w["name"] for w in shown["waits"]] == ["open"]
        workers = (await read_json("workers", url=redis_url, prefix=key_prefix))["workers"]
        assert [w["pid"] for w in workers] == [worker.pid]
        assert "tests.test_cli_process.gate" in workers[0]["flows"]
        human = await steadyflow("runs", "show", "greet-1", url=redis_url, prefix=key_prefix)
        assert human.returncode == 0, human.stderr
        assert "completed" in human.stdout

        follower = await asyncio.create_subprocess_exec(
            STEADYFLOW, "runs", "events", "gate-1", "--follow", "--json",
            "--store", redis_url, "--prefix", key_prefix,
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert follower.stdout is not None
        seen: list[str] = []
        while "run.waiting_for_signal" not in seen:  # the log so far
            line = await asyncio.wait_for(follower.stdout.readline(), 30)
            assert line, (await follower.communicate())[1]
            seen.append(json.loads(line)["type"])
        sent = await steadyflow(
            "signal", "gate-1", "open", "--payload", '"now"', url=redis_url, prefix=key_prefix
        )
        assert sent.returncode == 0, sent.stderr
        rest, errors = await asyncio.wait_for(follower.communicate(), 30)  # it ends by itself
        assert follower.returncode == 0, errors
        seen += [json.loads(line)["type"] for line in rest.decode().splitlines()]
        assert "signal.received" in seen
        assert seen[-1] == "run.completed"
        assert (await client.get("gate-1")).result == "opened now"

        await client.start(gate, run_id="gate-2")  # followed, then Ctrl-C
        follower = await asyncio.create_subprocess_exec(
            STEADYFLOW, "runs", "events", "gate-2", "--follow",
            "--store", redis_url, "--prefix", key_prefix,
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            preexec_fn=_default_sigint,
        )  # fmt: skip
        assert follower.stdout is not None
        assert b"run.created" in await asyncio.wait_for(follower.stdout.readline(), 30)
        follower.send_signal(signal.SIGINT)
        _, errors = await asyncio.wait_for(follower.communicate(), 30)
        assert follower.returncode == 130
        assert errors.decode().strip() == "Error: interrupted"
    finally:
        if follower is not None and follower.returncode is None:
            follower.kill()
            await follower.wait()
        worker.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(worker.wait(), 30)
        log.close()
    assert code == 0, (tmp_path / "worker.log").read_text()


def _default_sigint() -> None:
    """In the child: SIGINT as a terminal's Ctrl-C (a shell may have it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def _is_waiting(client: Client) -> bool:
    return (await client.get("gate-1")).status.value == "waiting_for_signal"


async def test_a_worker_process_logs_failures_and_undeclared_queues_and_send_event_delivers(
    redis_url: str, key_prefix: str, real_store: RedisStore, tmp_path: Path
) -> None:
    client = Client(real_store)
    log = (tmp_path / "worker.log").open("w")
    worker = await asyncio.create_subprocess_exec(
        STEADYFLOW, "worker", "tests.test_cli_process", "--store", redis_url,
        "--prefix", key_prefix, "--lease-ttl", "2",
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        await client.start(billing, 5, run_id="bill-1")
        await client.start(pickup, "o-1", run_id="pickup-1")

        async def settled() -> bool:
            bill_run, pick = await client.get("bill-1"), await client.get("pickup-1")
            return bill_run.status is RunStatus.FAILED and bool(pick.waiting_on)

        await until(settled, 30, "bill-1 to fail and pickup-1 to wait for its event")
        sent = await steadyflow(
            "send-event", "carrier.pickup", '{"order_id": "o-1", "carrier": "dhl"}',
            "--event-id", "hook-1", url=redis_url, prefix=key_prefix,
        )  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        assert sent.stdout.split() == ["pickup-1"]
        bad = await steadyflow(
            "send-event", "carrier.pickup", '"notadict"', url=redis_url, prefix=key_prefix
        )
        assert bad.returncode == 2 and "must be a JSON object" in bad.stderr
        assert await client.handle("pickup-1").result(timeout=30) == {
            "order_id": "o-1", "carrier": "dhl",
        }  # fmt: skip
    finally:
        worker.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(worker.wait(), 30)
        log.close()
    text = (tmp_path / "worker.log").read_text()
    assert code == 0, text
    failed = [line for line in text.splitlines() if "failed:" in line]
    assert len(failed) == 1, text
    said = (
        " WARNING steadyflow.worker: run bill-1 of flow tests.test_cli_process.billing "
        "failed: builtins:ValueError: card declined for 5 (step bill#1, reason step_failed)"
    )
    assert said in failed[0]
    queue = [line for line in text.splitlines() if "no Queue(" in line]
    assert len(queue) == 1 and " WARNING " in queue[0], text
    assert (
        "flow tests.test_cli_process.billing runs on queue 'tests.cli_process.billing'" in queue[0]
    )
