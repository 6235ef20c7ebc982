"""The worker CLI as a real process: graceful shutdown, hand-back, queue selection."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from sdk import Client, RunStatus
from stores.redis import RedisStore
from tests.crashflows import (
    ROOT,
    Workers,
    crash_mid_step,
    labelled,
    one_step,
    read_marks,
    until,
)

pytestmark = [pytest.mark.redis, pytest.mark.slow]

STARTUP = 15.0
FINISH = 20.0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_stop_signal_lets_the_in_flight_step_finish_and_the_run_complete(
    workers: Workers, client: Client, tmp_path: Path, sig: signal.Signals
) -> None:
    markers, release = tmp_path / "markers", tmp_path / "release"
    worker = workers.spawn("--grace", "15")
    handle = await client.start(crash_mid_step, str(markers), str(release))
    await until(lambda: labelled(markers, "held"), STARTUP, "the held step to start", worker)

    worker.send(sig)
    await until(lambda: f"{sig.name} received" in worker.log(), STARTUP, "the signal", worker)
    release.touch()  # the step finishes only now, after the worker began stopping

    assert await worker.exited(FINISH) == 0
    assert await handle.result(timeout=1) == ["first", "second", "held", "last"]
    assert [m.label for m in read_marks(markers)] == ["first", "second", "held", "last"]
    assert {m.pid for m in read_marks(markers)} == {worker.pid}
    assert "stopped" in worker.log()


async def test_step_that_outlives_the_grace_period_is_handed_back_at_once(
    workers: Workers, client: Client, real_store: RedisStore, tmp_path: Path
) -> None:
    markers, release = tmp_path / "markers", tmp_path / "release"
    first = workers.spawn("--grace", "0.2")
    run_id = f"handback-{uuid.uuid4().hex[:8]}"
    handle = await client.start(crash_mid_step, str(markers), str(release), run_id=run_id)
    await until(lambda: labelled(markers, "held"), STARTUP, "the held step to start", first)

    first.send(signal.SIGTERM)

    assert await first.exited(FINISH) == 0
    assert "handed 1 unfinished run(s) back" in first.log()
    raw = await real_store.client.hgetall(real_store.keys.run(run_id))
    assert raw["status"] == RunStatus.RUNNING  # released and queued, not left to expire
    assert "lease_owner" not in raw
    release.touch()
    second = workers.spawn()
    assert await handle.result(timeout=FINISH) == ["first", "second", "held", "last"]
    held = labelled(markers, "held")
    assert [m.pid for m in held] == [first.pid, second.pid]
    assert held[0].key == held[1].key == f"{run_id}:hold#1"
    assert "lease expired" not in second.log()  # the hand-back made recovery unnecessary


async def test_worker_with_queues_serves_only_those_queues(
    workers: Workers, client: Client, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    # Created first: a worker serving every queue would take it first (FIFO).
    elsewhere = await client.start(one_step, str(markers), "elsewhere", queue="other")
    mine = await client.start(one_step, str(markers), "mine", queue="mine")
    worker = workers.spawn("--queues", "mine,unused", "--concurrency", "1")

    assert await mine.result(timeout=FINISH) == "mine"
    assert await elsewhere.status() is RunStatus.PENDING
    assert [m.label for m in read_marks(markers)] == ["mine"]
    assert worker.proc is not None and worker.proc.poll() is None


def test_worker_with_an_unimportable_module_exits_with_an_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sdk.worker", "tests.no_such_module", "--store", "memory://"],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )  # fmt: skip

    assert done.returncode != 0
    assert "tests.no_such_module" in done.stderr
