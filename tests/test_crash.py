"""Crashes of real worker processes (SIGKILL): nothing recorded runs again, nothing is lost.

Each test runs ``python -m sdk.worker tests.crashflows`` against the real
Redis under the test's own key prefix, with a 1 s lease.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from sdk import Client, RunStatus
from sdk._core._journal import Record
from stores.redis import RedisStore
from tests.conftest import PrivateRedis
from tests.crashflows import (
    ROOT,
    SENDER,
    Workers,
    await_payment,
    crash_mid_step,
    labelled,
    read_marks,
    sleep_between_steps,
    until,
)

pytestmark = [pytest.mark.redis, pytest.mark.slow]

STARTUP = 15.0  # a worker process imports and claims well within this
FINISH = 20.0  # lease expiry (1 s) + recovery + replay, with room for a loaded machine


async def test_sigkill_mid_step_resumes_on_another_worker_without_rerunning_steps(
    workers: Workers, client: Client, tmp_path: Path
) -> None:
    markers, release = tmp_path / "markers", tmp_path / "release"
    first = workers.spawn()
    run_id = f"crash-{uuid.uuid4().hex[:8]}"
    handle = await client.start(crash_mid_step, str(markers), str(release), run_id=run_id)

    await until(lambda: labelled(markers, "held"), STARTUP, "the held step to start", first)
    first.kill()
    release.touch()  # the re-execution may finish at once
    second = workers.spawn()

    assert await handle.result(timeout=FINISH) == ["first", "second", "held", "last"]
    marks = read_marks(markers)
    assert [m.label for m in marks] == ["first", "second", "held", "held", "last"]
    held = labelled(markers, "held")
    assert [m.pid for m in held] == [first.pid, second.pid]
    assert held[0].key == held[1].key == f"{run_id}:hold#1"
    assert {m.pid for m in labelled(markers, "first") + labelled(markers, "second")} == {first.pid}
    assert labelled(markers, "last")[0].pid == second.pid
    assert "lease expired" in second.log()  # the second worker recovered it, not a restart


async def test_sigkill_during_a_durable_sleep_loses_nothing(
    workers: Workers, client: Client, real_store: RedisStore, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    first = workers.spawn()
    run_id = f"sleep-{uuid.uuid4().hex[:8]}"
    handle = await client.start(sleep_between_steps, str(markers), 2.0, run_id=run_id)

    async def parked() -> bool:
        return (await handle.status()) is RunStatus.WAITING_FOR_SIGNAL

    await until(parked, STARTUP, "the run to park on its timer", first)
    first.kill()
    second = workers.spawn()

    assert await handle.result(timeout=FINISH) == "after"
    (before,) = labelled(markers, "before")
    (after,) = labelled(markers, "after")
    assert before.pid == first.pid
    assert after.pid == second.pid
    journal = await real_store.client.hgetall(real_store.keys.journal(run_id))
    due = Record.from_json(journal["~sleep#1"]).due
    assert due is not None
    assert after.at >= due  # the timer fired at its deadline, not before
    # The first worker died blocked on the timer's wait, its bell (stores._storecore,
    # blpop_until) not rung: none is left, and the second's waits rang and took theirs.
    assert [k async for k in real_store.client.scan_iter(match=real_store.keys.bell("*"))] == []


async def test_sigkill_while_a_short_sleep_is_waited_in_place_loses_nothing(
    workers: Workers, client: Client, real_store: RedisStore, tmp_path: Path
) -> None:
    # 0.9 s is within the worker's inline_backoff_max (1 s): the worker waits for
    # it with the run claimed (sdk.engine._waits.holds), and dies meanwhile.
    markers = tmp_path / "markers"
    first = workers.spawn()
    run_id = f"held-{uuid.uuid4().hex[:8]}"
    handle = await client.start(sleep_between_steps, str(markers), 0.9, run_id=run_id)
    journal_key = real_store.keys.journal(run_id)

    async def slept() -> bool:  # the step before the sleep is recorded: the sleep began
        return bool(await real_store.client.hexists(journal_key, "note#1"))

    await until(slept, STARTUP, "the step before the sleep to be recorded", first)
    first.kill()
    second = workers.spawn()

    assert await handle.result(timeout=FINISH) == "after"
    (before,) = labelled(markers, "before")
    (after,) = labelled(markers, "after")
    assert (before.pid, after.pid) == (first.pid, second.pid)
    assert "lease expired" in second.log()  # recovered from the lease, not from a timer
    journal = await real_store.client.hgetall(journal_key)
    due = Record.from_json(journal["~sleep#1"]).due
    assert due is not None
    # The sleep's due time is written when it ends: the replay slept it in full
    # again (longer in all, never shorter), and the step after it ran once, then.
    assert due >= before.at + 0.9
    assert after.at >= due
    kinds = [c.kind.value for c in await client.checkpoints(run_id)]
    assert "waiting_for_signal" not in kinds  # neither worker parked it


async def test_many_runs_survive_a_sigkill_and_each_step_is_recorded_once(
    workers: Workers, client: Client, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    first = workers.spawn()
    handles = [
        await client.start(crash_mid_step, str(tmp_path / f"m{i}"), str(release)) for i in range(6)
    ]

    # Concurrency 4: four runs are held in flight; two wait in the queue.
    await until(
        lambda: sum(bool(labelled(tmp_path / f"m{i}", "held")) for i in range(6)) == 4,
        STARTUP, "four runs to hold", first,
    )  # fmt: skip
    first.kill()
    release.touch()
    workers.spawn()

    for h in handles:
        assert await h.result(timeout=FINISH) == ["first", "second", "held", "last"]
    for i in range(6):
        labels = [m.label for m in read_marks(tmp_path / f"m{i}")]
        assert labels.count("first") == labels.count("second") == labels.count("last") == 1
        assert labels.count("held") in (1, 2)  # 2 when the kill interrupted it
        assert len({m.key for m in labelled(tmp_path / f"m{i}", "held")}) == 1


async def test_a_sender_killed_mid_send_loses_no_delivery_and_a_resend_duplicates_none(
    workers: Workers, client: Client, tmp_path: Path
) -> None:
    runs = 300
    worker = workers.spawn("--concurrency", "64")
    markers = tmp_path / "markers"
    handles = [
        await client.start(await_payment, str(markers), "b1", run_id=f"pay-{i}")
        for i in range(runs)
    ]

    async def all_waiting() -> bool:
        waiting = await client.list_runs(status=RunStatus.WAITING_FOR_SIGNAL, limit=runs)
        return len(waiting) == runs

    await until(all_waiting, 60, "every run to wait for its event", worker)
    sender = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SENDER, workers.store_url, workers.prefix, "b1", "evt-1",
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        # SIGKILL it as soon as its first deliveries show (or once it is done)
        await until(lambda: labelled(markers, "paid") or sender.returncode is not None,
                    STARTUP, "the sender's first delivery", worker)  # fmt: skip
        if sender.returncode is None:
            sender.kill()
    finally:
        await sender.wait()

    again = await client.send_event("crash.payment", {"batch": "b1"}, event_id="evt-1")
    assert len(again) <= runs  # only what the killed send had not delivered
    for h in handles:
        assert await h.result(timeout=FINISH) == {"batch": "b1"}
    paid = labelled(markers, "paid")
    assert len(paid) == runs  # every run paid once, none twice
    assert len({m.key for m in paid}) == runs
    for h in handles[:: runs // 10]:  # and its log shows one delivery of the event
        events = await client.events(h.run_id, limit=1000)
        assert [e.type for e in events].count("event.delivered") == 1
    assert await client.send_event("crash.payment", {"batch": "b1"}, event_id="evt-1") == []


# -- killed with a step's write on the wire (sdk.engine._writes.Writes.send) ----------------
# The worker sends a step's write and runs the flow's own code on while it is out; the
# next step's body waits for it. A private Redis holds the write: stopped (SIGSTOP), it
# has the command in its socket and runs it once it goes on, after the worker died;
# paused for writes (CLIENT PAUSE WRITE), it drops the command with the dead client.


@pytest.mark.parametrize("hold", ["sigstop", "pause"])
async def test_sigkill_with_a_write_on_the_wire_runs_nothing_ahead_of_it(
    private_redis: PrivateRedis, tmp_path: Path, hold: str
) -> None:
    prefix = f"wire-{uuid.uuid4().hex[:8]}"
    store = RedisStore.from_url(private_redis.url, prefix=prefix)
    workers = Workers(private_redis.url, prefix, tmp_path)
    admin = store.client
    assert private_redis.proc is not None
    try:
        markers, release = tmp_path / "markers", tmp_path / "release"
        first = workers.spawn()
        handle = await Client(store).start(crash_mid_step, str(markers), str(release))
        await until(lambda: labelled(markers, "held"), STARTUP, "the held step to start", first)
        if hold == "sigstop":
            private_redis.proc.send_signal(signal.SIGSTOP)
        else:
            await admin.client_pause(60_000, all=False)  # write commands (and scripts) wait
        try:
            release.touch()  # the held step returns and its write goes out, and stays out
            await asyncio.sleep(2.0)  # time to run ahead to the next step, had it not waited
            assert not labelled(markers, "last")
            first.kill()
        finally:
            if hold == "sigstop":
                private_redis.proc.send_signal(signal.SIGCONT)
            else:
                await admin.client_unpause()
        second = workers.spawn()
        assert await handle.result(timeout=FINISH) == ["first", "second", "held", "last"]
        held = labelled(markers, "held")
        # stopped: the write ran once Redis went on, so the step is not run again;
        # paused: the write went with the dead client, so recovery runs the step again
        ran = [first.pid] if hold == "sigstop" else [first.pid, second.pid]
        assert [m.pid for m in held] == ran
        assert [m.pid for m in labelled(markers, "last")] == [second.pid]
    finally:
        workers.close()
        await store.close()
