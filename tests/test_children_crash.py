"""A parent killed (SIGKILL, a real worker process) between starting its children and
journaling them neither loses nor duplicates a child, across partitions."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from sdk import Client
from stores.redis import RedisStore
from tests.crashflows import Workers, fan_out, labelled

pytestmark = [pytest.mark.redis, pytest.mark.slow]

STARTUP = 15.0
FINISH = 30.0


async def test_a_parent_killed_between_child_start_and_journal_loses_and_duplicates_nothing(
    workers: Workers, partitioned: RedisStore, tmp_path: Path
) -> None:
    client = Client(partitioned)
    markers, flag = tmp_path / "markers", tmp_path / "died"
    n = 12
    doomed = workers.spawn(
        "--partitions", "4", env={"CRASHFLOWS_DIE_BEFORE_CHILD_RECORD": str(flag)}
    )
    run_id = f"fan-{uuid.uuid4().hex[:8]}"
    handle = await client.start(fan_out, str(markers), n, run_id=run_id)
    assert await doomed.exited(STARTUP) != 0
    assert flag.read_text() == str(doomed.pid)  # it died right after starting the children

    kids = await client.list_runs(parent_run_id=run_id, limit=100)
    assert len(kids) == n  # all started, spread over partitions
    assert len({partitioned.keys.partition(k.run_id) for k in kids}) > 1
    lin = await partitioned.read_lineage(run_id)
    assert lin is not None
    assert not [k for k in lin.journal if k.startswith("~child:")]  # none journaled

    rescuer = workers.spawn("--partitions", "4")
    assert await handle.result(timeout=FINISH) == sum(10 * i for i in range(n))
    kids_after = await client.list_runs(parent_run_id=run_id, limit=100)
    assert sorted(k.run_id for k in kids_after) == sorted(k.run_id for k in kids)
    started = [e.data for e in await client.events(run_id, limit=1000) if e.type == "child.started"]
    assert len(started) == n and not any(d["created"] for d in started)  # found, not made
    for i in range(n):
        ran = labelled(markers, f"child-{i}")
        assert len(ran) == 1, (i, ran, rescuer.describe())
