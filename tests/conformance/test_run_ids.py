"""Run ids are opaque: separators and hash-tag braces in them change nothing."""

from __future__ import annotations

import pytest

from sdk._types import RunStatus
from stores.redis import RedisStore
from tests.conformance._support import (
    OWNER,
    T0,
    TTL,
    claim_ids,
    consume,
    journal_of,
    new_run,
    status_of,
    step_record,
)

ODD_IDS = ["a:b", "tenant:{42}:order:7", "{p0}", "}{", "x:{p0}:run:y", "日本:{}", "a b\tc"]


@pytest.mark.parametrize("run_id", ODD_IDS)
async def test_full_lifecycle_of_a_run_with_an_odd_id(store: RedisStore, run_id: str) -> None:
    await store.create_run(new_run(run_id))
    assert await claim_ids(store, limit=1) == [run_id]
    stored = await store.get_run(run_id)
    assert stored is not None
    fence = stored.fence
    await store.record(run_id, fence, "a#1", step_record("a#1", 0, 1))
    assert await store.suspend(
        run_id, fence, T0, T0 + 5, RunStatus.WAITING_FOR_SIGNAL, [], ["s:go"]
    )
    await store.signal(run_id, "s:go", '"hi"', "d")
    (claim,) = await store.claim(OWNER, None, 1, T0, TTL)
    assert claim.run.record.run_id == run_id
    assert claim.journal == {"a#1": step_record("a#1", 0, 1)}
    assert await consume(store, run_id, claim.run.fence, key="~wait:go#1") == (1, '"hi"')
    await store.finish(run_id, claim.run.fence, RunStatus.COMPLETED, T0 + 1, {"result": "1"})

    assert await status_of(store, run_id) is RunStatus.COMPLETED
    assert [s.record.run_id for s in await store.list_runs(None, None, 10)] == [run_id]
    # Everything stayed inside this deployment's one partition.
    keys = [k async for k in store.client.scan_iter(match=f"{store.keys.prefix}:*")]
    assert keys and all(k.startswith(store.keys.base(0)) for k in keys)


async def test_mailboxes_of_runs_whose_ids_share_a_prefix_do_not_collide(
    store: RedisStore,
) -> None:
    # Without the length prefix both would be "...mb:r:s:x:s:y".
    await store.create_run(new_run("r"))
    await store.create_run(new_run("r:s:x"))
    await claim_ids(store)
    short, long = await store.get_run("r"), await store.get_run("r:s:x")
    assert short is not None and long is not None

    await store.signal("r", "s:x:s:y", '"for r"', None)
    await store.signal("r:s:x", "s:y", '"for r:s:x"', None)

    assert await consume(store, "r:s:x", long.fence, mailbox="s:y") == (1, '"for r:s:x"')
    assert await consume(store, "r", short.fence, mailbox="s:x:s:y") == (1, '"for r"')
    assert await consume(store, "r", short.fence, key="~wait:y#1", mailbox="s:y") == (0, None)


async def test_runs_whose_ids_share_a_prefix_keep_separate_journals_and_dedup(
    store: RedisStore,
) -> None:
    await store.create_run(new_run("a"))
    await store.create_run(new_run("a:"))
    fences = {c.run.record.run_id: c.run.fence for c in await store.claim(OWNER, None, 2, T0, TTL)}

    await store.record("a", fences["a"], "s#1", step_record("s#1", 0, "a"))
    await store.record("a:", fences["a:"], "s#1", step_record("s#1", 0, "a:"))

    assert await journal_of(store, "a") == {"s#1": step_record("s#1", 0, "a")}
    assert await journal_of(store, "a:") == {"s#1": step_record("s#1", 0, "a:")}
    assert await store.signal("a", "s:go", "1", "d") is True
    assert await store.signal("a:", "s:go", "1", "d") is True
