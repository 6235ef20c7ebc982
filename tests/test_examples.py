"""The examples in examples/ do what their docstrings and the docs say."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import attrs
import pytest
import pytest_asyncio
import redis

from examples import agent as agent_example
from examples import checkout as checkout_example
from examples.agent import agent
from examples.checkout import Order, Receipt, checkout, gateway
from examples.hello import hello
from sdk import Client, RunStatus, Worker, flow, step, wait_for
from sdk.errors import InvalidTransition, RunCanceled, RunFailed
from stores.redis import RedisStore
from testing import FlowTestEnv
from tests.conftest import PrivateRedis
from tests.crashflows import STEADYFLOW

ROOT = Path(__file__).resolve().parent.parent


async def journal_keys(env: FlowTestEnv, run_id: str) -> set[str]:
    store = env.store
    assert isinstance(store, RedisStore)
    return set(cast("list[str]", await store.client.hkeys(store.keys.journal(run_id))))


@pytest.fixture(autouse=True, name="_reset_examples")
def reset_examples_fixture() -> Iterator[None]:
    gateway.reset(fail_first=0)
    checkout_example.shipped.clear()
    agent_example.executions.clear()
    agent_example.idempotency_keys.clear()
    yield


# -- hello ---------------------------------------------------------------------------


async def test_hello_runs_its_three_steps(flow_env: FlowTestEnv) -> None:
    handle = await flow_env.start(hello, "Ada", run_id="hello-ada")
    await flow_env.run_until_idle()
    assert await handle.result() == "Hello, Ada! (from Steadyflow)"
    assert await journal_keys(flow_env, "hello-ada") == {"compose#1", "punctuate#1", "sign#1"}


async def _exec(
    *args: str, log: Path | None = None, program: str = sys.executable, **env: str
) -> asyncio.subprocess.Process:
    """`program ARGS` (default `python ARGS`) from the repository root, with `env` added;
    output to `log`, else to pipes."""
    environ = {**os.environ, "PYTHONUNBUFFERED": "1", **env}
    if log is None:
        return await asyncio.create_subprocess_exec(
            program, *args, cwd=ROOT, env=environ,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
    with log.open("wb") as out:
        return await asyncio.create_subprocess_exec(
            program, *args, cwd=ROOT, env=environ, stdout=out, stderr=asyncio.subprocess.STDOUT
        )


# How the end-to-end test configures its worker process and its client: the two
# worker commands (one implementation), with flags, or with the environment alone.
HELLO_SETUPS = {
    "python-m-sdk.worker": ((sys.executable, "-m", "sdk.worker"), "flags"),
    "steadyflow-worker": ((STEADYFLOW, "worker"), "flags"),
    "steadyflow-worker-env": ((STEADYFLOW, "worker"), "env"),
}


@attrs.frozen
class HelloSetup:
    worker: asyncio.subprocess.Process
    log: Path
    flags: tuple[str, ...]  # --store/--prefix for the client, or none
    env: dict[str, str]  # STEADYFLOW_STORE/STEADYFLOW_PREFIX for the client, or none


@pytest_asyncio.fixture(name="hello_worker", params=list(HELLO_SETUPS))
async def hello_worker_fixture(
    request: pytest.FixtureRequest, redis_url: str, key_prefix: str, tmp_path: Path
) -> AsyncIterator[HelloSetup]:
    (program, *command), how = HELLO_SETUPS[request.param]
    flags: tuple[str, ...] = ("--store", redis_url, "--prefix", key_prefix)
    env = {"STEADYFLOW_STORE": redis_url, "STEADYFLOW_PREFIX": key_prefix}
    flags, env = (flags, {}) if how == "flags" else ((), env)
    log = tmp_path / "worker.log"
    worker = await _exec(*command, "examples.hello", *flags, log=log, program=program, **env)
    try:
        yield HelloSetup(worker, log, flags, env)
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()


@pytest.mark.redis
@pytest.mark.slow
async def test_hello_end_to_end_with_a_worker_process_on_real_redis(
    real_store: RedisStore, hello_worker: HelloSetup
) -> None:
    worker = hello_worker.worker
    starter = await _exec(
        "-m",
        "examples.hello",
        *hello_worker.flags,
        "--name",
        "Ada",
        **hello_worker.env,  # type: ignore[arg-type]
    )
    out, err = await asyncio.wait_for(starter.communicate(), timeout=45)
    assert starter.returncode == 0, err.decode()
    assert out.decode() == "Hello, Ada! (from Steadyflow)\n"

    [run] = await Client(real_store).list_runs(flow="examples.hello")
    assert run.status is RunStatus.COMPLETED
    assert run.result == "Hello, Ada! (from Steadyflow)"

    worker.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(worker.wait(), timeout=30) == 0
    text = hello_worker.log.read_text()
    assert "SIGTERM received: stopping" in text
    assert "stopped" in text.splitlines()[-1]


@pytest.mark.redis
@pytest.mark.slow
async def test_hello_without_a_worker_says_nobody_serves_it_and_how_to_start_one(
    real_store: RedisStore, redis_url: str, key_prefix: str
) -> None:
    starter = await _exec(
        "-m", "examples.hello", "--store", redis_url, "--prefix", key_prefix, "--timeout", "0.2"
    )  # fmt: skip
    out, err = await asyncio.wait_for(starter.communicate(), timeout=45)

    assert starter.returncode == 1
    assert out == b""
    text = err.decode()
    assert "is still pending after 0.2s: no live worker serves flow 'examples.hello'" in text
    assert f"steadyflow worker examples.hello --store {redis_url}" in text
    assert f"--prefix {key_prefix}" in text


@pytest.mark.redis
@pytest.mark.slow
def test_the_demo_prints_the_greeting_and_leaves_no_key_behind(redis_url: str) -> None:
    probe = redis.Redis.from_url(redis_url)
    env = {**os.environ, "STEADYFLOW_STORE": redis_url, "STEADYFLOW_PREFIX": "not-the-demos"}
    env["STEADYFLOW_NO_INSTALL"] = "1"  # the suite's virtualenv as it is
    try:
        for _ in range(2):  # a second run works the same and cleans up the same
            done = subprocess.run(
                ["bash", "scripts/demo.sh"], cwd=ROOT, env=env,
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert done.returncode == 0, done.stdout + done.stderr
            assert "Hello, Steadyflow user! (from Steadyflow)\n" in done.stdout
            assert "prefix sf-demo" in done.stdout  # its own prefix, whatever the environment says
            assert re.search(
                r"deleted the [1-9]\d* keys the demo wrote under sf-demo:", done.stdout
            )
            assert list(probe.scan_iter(match="sf-demo:*")) == []
            assert list(probe.scan_iter(match="not-the-demos:*")) == []
    finally:
        probe.close()


# -- checkout ------------------------------------------------------------------------

ORDER = Order("A-1", 4200, "ada@example.com")
AUTH_KEY = "co-1:authorize_payment#1"


async def start_checkout(env: FlowTestEnv, order: Order = ORDER) -> Client:
    await env.start(checkout, order, run_id="co-1")
    await env.run_until_idle()
    return env.client


async def test_checkout_approved_captures_then_ships_after_the_batch_window(
    flow_env: FlowTestEnv,
) -> None:
    client = await start_checkout(flow_env)
    assert await client.handle("co-1").status() is RunStatus.WAITING_FOR_HUMAN

    await client.approve("co-1", "fraud-review", actor="alice")
    await flow_env.run_until_idle()
    # Captured, now sleeping durably: nothing shipped until the window has passed.
    assert gateway.captured == ["auth-1"]
    assert await client.handle("co-1").status() is RunStatus.WAITING_FOR_SIGNAL
    await flow_env.advance(3599)
    assert checkout_example.shipped == []

    await flow_env.advance(1)

    assert await client.handle("co-1").result() == Receipt(
        "A-1", "shipped", "auth-1", tracking="TRACK-A-1"
    )
    assert checkout_example.shipped == ["A-1"]
    assert gateway.released == []


async def test_checkout_denied_releases_the_authorization(flow_env: FlowTestEnv) -> None:
    client = await start_checkout(flow_env)

    await client.deny("co-1", "fraud-review", actor="bob", reason="card reported stolen")
    await flow_env.run_until_idle()

    receipt = await client.handle("co-1").result()
    assert receipt == Receipt(
        "A-1", "released", "auth-1", note="denied by bob: card reported stolen"
    )
    assert gateway.released == ["auth-1"]
    assert gateway.captured == []
    assert checkout_example.shipped == []


async def test_checkout_without_a_review_in_time_releases_the_authorization(
    flow_env: FlowTestEnv,
) -> None:
    client = await start_checkout(flow_env)
    await flow_env.advance(timedelta(days=2) - timedelta(seconds=1))
    assert await client.handle("co-1").status() is RunStatus.WAITING_FOR_HUMAN

    await flow_env.advance(1)

    receipt = await client.handle("co-1").result()
    assert receipt.status == "released"
    assert receipt.note == "no review within 2 days, 0:00:00"
    assert gateway.released == ["auth-1"]
    with pytest.raises(InvalidTransition):  # too late: the run is over
        await client.approve("co-1", "fraud-review", actor="alice")


async def test_checkout_payment_retries_wait_on_durable_timers(flow_env: FlowTestEnv) -> None:
    gateway.reset(fail_first=2)
    client = await start_checkout(flow_env)
    # First attempt failed; the 2 s backoff is a durable timer (FlowTestEnv makes
    # every backoff one), so the run parks instead of holding the worker.
    assert gateway.calls == {AUTH_KEY: 1}
    assert await client.handle("co-1").status() is RunStatus.WAITING_FOR_SIGNAL

    await flow_env.advance(2)
    assert gateway.calls == {AUTH_KEY: 2}
    await flow_env.advance(4)

    assert gateway.calls == {AUTH_KEY: 3}  # every attempt used the same idempotency key
    assert gateway.authorizations == {AUTH_KEY: "auth-1"}
    assert await client.handle("co-1").status() is RunStatus.WAITING_FOR_HUMAN


async def test_checkout_fails_with_retries_exhausted_when_the_gateway_stays_down(
    flow_env: FlowTestEnv,
) -> None:
    gateway.reset(fail_first=100)
    client = await start_checkout(flow_env)
    for backoff in (2, 4, 8, 16):
        await flow_env.advance(backoff)

    with pytest.raises(RunFailed) as failed:
        await client.handle("co-1").result()
    assert gateway.calls == {AUTH_KEY: 5}
    assert failed.value.error.reason == "retries_exhausted"
    assert failed.value.error.step_key == "authorize_payment#1"
    assert failed.value.error.type == "examples.checkout:GatewayUnavailable"


async def test_checkout_declined_card_is_not_retried(flow_env: FlowTestEnv) -> None:
    client = await start_checkout(flow_env, Order("A-1", 0, "ada@example.com"))

    with pytest.raises(RunFailed) as failed:
        await client.handle("co-1").result()
    assert failed.value.error.reason == "non_retryable"
    assert failed.value.error.type == "examples.checkout:CardDeclined"
    assert gateway.calls == {AUTH_KEY: 1}


async def test_checkout_cancel_while_waiting_for_review_ends_the_run_canceled(
    flow_env: FlowTestEnv,
) -> None:
    client = await start_checkout(flow_env)

    await client.cancel("co-1", reason="customer changed their mind", actor="support")
    await flow_env.advance(timedelta(days=3))  # the review deadline passes: nothing wakes

    assert await client.handle("co-1").status() is RunStatus.CANCELED
    with pytest.raises(RunCanceled, match="customer changed their mind"):
        await client.handle("co-1").result()
    # checkout does not catch the cancel (examples/orders.py does): no further step
    # runs, not even the release.
    assert gateway.released == []
    assert gateway.captured == []
    with pytest.raises(InvalidTransition):
        await client.approve("co-1", "fraud-review", actor="alice")


async def test_checkout_crash_after_authorizing_does_not_authorize_twice(
    flow_env: FlowTestEnv,
) -> None:
    flow_env.crash_at("authorize_payment#1", when="after")
    client = await start_checkout(flow_env)
    assert gateway.calls == {AUTH_KEY: 1}  # the gateway authorized; the journal has nothing

    await flow_env.advance(flow_env.worker.lease_ttl + 1)

    # The step ran again with the same idempotency key; the gateway deduped it.
    assert gateway.calls == {AUTH_KEY: 2}
    assert gateway.authorizations == {AUTH_KEY: "auth-1"}
    assert await client.handle("co-1").status() is RunStatus.WAITING_FOR_HUMAN


@pytest.mark.redis
async def test_checkout_command_line_approves_and_prints_the_receipt(
    redis_url: str, key_prefix: str, real_store: RedisStore, capsys: pytest.CaptureFixture[str]
) -> None:
    worker = Worker(real_store, [checkout])
    serving = asyncio.create_task(worker.run())
    try:
        code = await checkout_example.main(
            ["--store", redis_url, "--prefix", key_prefix, "--order", "CLI-1",
             "--batch-window", "0.2", "--timeout", "30"]
        )  # fmt: skip
    finally:
        await worker.stop()
        await serving
    assert code == 0
    assert "status='shipped'" in capsys.readouterr().out


# -- agent ---------------------------------------------------------------------------

QUESTION = "How much taller is Everest than K2, in feet?"
AGENT_KEYS = {
    *(f"model#{n}" for n in range(1, 6)),
    "tool:search#1", "tool:search#2", "tool:calculator#1", "tool:calculator#2",
}  # fmt: skip


async def test_agent_journals_model_turns_and_tool_calls_discovered_at_run_time(
    flow_env: FlowTestEnv,
) -> None:
    handle = await flow_env.start(agent, QUESTION, run_id="agent-1")
    await flow_env.run_until_idle()

    assert await handle.result() == "The answer is 781."
    assert await journal_keys(flow_env, "agent-1") == AGENT_KEYS
    assert agent_example.executions == {"model": 5, "tool:search": 2, "tool:calculator": 2}


async def test_agent_resumes_after_a_crash_without_repeating_turns_or_tools(
    flow_env: FlowTestEnv,
) -> None:
    flow_env.crash_at("tool:calculator#2", when="after")
    handle = await flow_env.start(agent, QUESTION, run_id="agent-2")
    await flow_env.run_until_idle()
    assert agent_example.executions == {"model": 4, "tool:search": 2, "tool:calculator": 2}

    await flow_env.advance(flow_env.worker.lease_ttl + 1)

    assert await handle.result() == "The answer is 781."
    # Only the tool call cut off by the crash ran again (with the same key),
    # then the one model turn that had not happened yet.
    assert agent_example.executions == {"model": 5, "tool:search": 2, "tool:calculator": 3}
    assert agent_example.idempotency_keys.count("agent-2:tool:calculator#2") == 2
    assert agent_example.idempotency_keys.count("agent-2:model#4") == 1


async def test_agent_that_runs_out_of_turns_fails_with_a_flow_error(
    flow_env: FlowTestEnv,
) -> None:
    handle = await flow_env.start(agent, QUESTION, max_turns=2)
    await flow_env.run_until_idle()

    with pytest.raises(RunFailed) as failed:
        await handle.result()
    assert failed.value.error.type == "examples.agent:AgentGaveUp"
    assert failed.value.error.reason == "flow_error"
    assert failed.value.error.step_key is None


@pytest.mark.redis
async def test_agent_command_line_prints_the_answer(
    redis_url: str, key_prefix: str, real_store: RedisStore, capsys: pytest.CaptureFixture[str]
) -> None:
    worker = Worker(real_store, [agent])
    serving = asyncio.create_task(worker.run())
    try:
        code = await agent_example.main(["--store", redis_url, "--prefix", key_prefix])
    finally:
        await worker.stop()
        await serving
    assert code == 0
    assert capsys.readouterr().out == "The answer is 781.\n"


# -- found while writing the examples -------------------------------------------------


@flow(name="tests.examples.waits_forever")
async def waits_forever() -> None:
    await wait_for("never")


@pytest.mark.redis
@pytest.mark.slow
async def test_result_keeps_waiting_past_redis_py_default_socket_timeout(
    real_store: RedisStore,
) -> None:
    # redis-py defaults socket_timeout to 5 s, the length of the store's blocking
    # reads: result() used to die with redis.exceptions.TimeoutError after ~5 s.
    handle = await Client(real_store).start(waits_forever)
    with pytest.raises(TimeoutError) as waited:
        await handle.result(timeout=6)
    assert type(waited.value) is TimeoutError


# Step results the flow below saw, one entry per activation.
SEEN_RESULTS: list[object] = []


@step
async def unannotated_int_keys():  # type: ignore[no-untyped-def]  # no return annotation, on purpose
    return {1: "one"}


@flow(name="tests.examples.int_keys")
async def int_keys() -> None:
    SEEN_RESULTS.append(await unannotated_int_keys())  # type: ignore[no-untyped-call]
    await wait_for("go")


async def test_unannotated_dict_with_int_keys_is_refused_naming_the_step(
    flow_env: FlowTestEnv,
) -> None:
    # JSON would turn {1: "one"} into {"1": "one"}: refused, not silently changed.
    SEEN_RESULTS.clear()
    run = await flow_env.start(int_keys)
    await flow_env.run_until_idle()
    with pytest.raises(RunFailed) as failed:
        await run.result()
    assert failed.value.error.reason == "serialization_error"
    assert failed.value.error.step_key == "unannotated_int_keys#1"
    assert "the int key 1" in failed.value.error.message
    assert SEEN_RESULTS == []


# -- the docs' code ----------------------------------------------------------------------
#
# Every ```python block in these pages runs here. A block is a complete program,
# unless it starts with a file name comment: "# test_x.py" blocks are pytest files
# (run with pytest), and the quickstart's files (flows.py, start.py, test_flows.py)
# run together, end to end, against a Redis server of the test's own.

DOC_PAGES = [
    ROOT / "README.md",
    *(ROOT / "docs" / f"{name}.md" for name in
      ("quickstart", "concepts", "lifecycle", "side-effects", "security", "testing",
       "operations", "api")),
]  # fmt: skip
QUICKSTART = ROOT / "docs" / "quickstart.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_FILE = re.compile(r"# ([\w/]+\.py)\n")


def doc_blocks(*, files: bool) -> list[Any]:
    """Programs (files=False) or pytest files outside the quickstart (files=True)."""
    found = []
    for page in DOC_PAGES:
        for i, code in enumerate(_BLOCK.findall(page.read_text()), 1):
            named = _FILE.match(code)
            if files and named and page != QUICKSTART:
                # the whole store conformance kit again, as tests/test_store_conformance.py
                # runs it in process: CI's (--all) alone
                marks = [pytest.mark.long] if "StoreConformance" in code else []
                found.append(pytest.param(named.group(1), code, id=f"{page.name}:{i}", marks=marks))
            elif not files and not named:
                found.append(pytest.param(code, id=f"{page.name}:{i}"))
    return found


@pytest.mark.parametrize("code", doc_blocks(files=False))
def test_python_block_in_the_docs_runs(code: str) -> None:
    done = subprocess.run(
        [sys.executable, "-"], input=code, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("name", "code"), doc_blocks(files=True))
def test_pytest_file_in_the_docs_passes(name: str, code: str, tmp_path: Path) -> None:
    (tmp_path / name).write_text(code)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", name],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def quickstart_files(dest: Path) -> list[str]:
    names = []
    for code in _BLOCK.findall(QUICKSTART.read_text()):
        if m := _FILE.match(code):
            (dest / m.group(1)).write_text(code)
            names.append(m.group(1))
    return names


@pytest.mark.slow
async def test_quickstart_works_end_to_end(private_redis: PrivateRedis, tmp_path: Path) -> None:
    assert quickstart_files(tmp_path) == ["flows.py", "start.py", "test_flows.py"]
    env = {**os.environ, "STEADYFLOW_STORE": private_redis.url, "PYTHONUNBUFFERED": "1"}

    async def python(*args: str) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *args, cwd=tmp_path, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    with (tmp_path / "worker.log").open("wb") as log:
        worker = await asyncio.create_subprocess_exec(
            STEADYFLOW, "worker", "flows", cwd=tmp_path, env=env,
            stdout=log, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
    try:
        assert await python("start.py") == (0, "active\n", "")
        # As the page says: start() returns the finished run, which is not signalled again.
        assert await python("start.py") == (0, "onboard-ada has already finished: active\n", "")
    finally:
        worker.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(worker.wait(), timeout=30) == 0

    code, out, err = await python("-m", "pytest", "-q", "-p", "no:cacheprovider", "test_flows.py")
    assert code == 0, out + err
    assert "2 passed" in out
