"""A rolling deploy with real worker processes on the real Redis: each run is
executed by a process serving the version it started on, and a run whose
version lost its last worker (killed mid-step) waits until it is moved."""

from __future__ import annotations

import pytest

from sdk import Client, Registry, RunStatus, flow
from tests import versionflows
from tests.crashflows import Workers, until

OLD, NEW = "2024-06-01", "2024-07-15"
STARTUP = 20.0

# the test process starts runs at either version (its own registry)
REG = Registry()
at_old = flow(name=versionflows.NAME, version=OLD, registry=REG)(versionflows.deployed)
REG_NEW = Registry()
at_new = flow(name=versionflows.NAME, version=NEW, registry=REG_NEW)(versionflows.deployed)


def env_of(version: str) -> dict[str, str]:
    return {"STEADYFLOW_TEST_FLOW_VERSION": version}


@pytest.mark.redis
@pytest.mark.slow
async def test_old_and_new_worker_processes_each_execute_their_own_versions_runs(
    workers: Workers, client: Client
) -> None:
    old = workers.spawn(module="tests.versionflows", env=env_of(OLD))
    new = workers.spawn(module="tests.versionflows", env=env_of(NEW))
    olds = [await client.start(at_old) for _ in range(6)]
    news = [await client.start(at_new) for _ in range(6)]

    for handle in olds:
        assert await handle.result(timeout=STARTUP) == f"{OLD}:{old.pid}:{old.pid}"
    for handle in news:
        assert await handle.result(timeout=STARTUP) == f"{NEW}:{new.pid}:{new.pid}"


@pytest.mark.redis
@pytest.mark.slow
async def test_a_run_whose_old_worker_died_waits_for_its_version_until_moved(
    workers: Workers, client: Client
) -> None:
    old = workers.spawn(
        module="tests.versionflows", env={**env_of(OLD), "STEADYFLOW_TEST_HOLD": "1"}
    )
    new = workers.spawn(module="tests.versionflows", env=env_of(NEW))
    run = await client.start(at_old)  # holds its worker in the step
    await until(lambda: _status_is(client, run.run_id, RunStatus.RUNNING), STARTUP, "claim", old)
    old.kill()  # mid-step: its lease expires (1 s) and the run is queued again

    async def queued_again() -> bool:
        return any(e.type == "run.lease_expired" for e in await client.events(run.run_id))

    await until(queued_again, STARTUP, "lease expiry", new)
    # the new worker serves only the new version: the run waits (and is not failed)
    with pytest.raises(TimeoutError):
        await run.result(timeout=1.5)
    assert (await client.get(run.run_id)).flow_version == OLD

    await client.resume(run.run_id, version=NEW, actor="ops")
    # the step was cut off before its result was recorded: the new worker runs it again
    assert await run.result(timeout=STARTUP) == f"{NEW}:{new.pid}:{new.pid}"


async def _status_is(client: Client, run_id: str, status: RunStatus) -> bool:
    return (await client.get(run_id)).status is status
