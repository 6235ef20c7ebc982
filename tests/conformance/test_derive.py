"""Replays and forks at the store: `derive_run`, `read_lineage`, and the lineage a claim carries."""

from __future__ import annotations

import json

import attrs
import pytest

from sdk._journal import StepEvent
from sdk._retry import RetryPolicy
from sdk._types import RunOptions, RunStatus, Versions
from sdk.errors import IdempotencyConflict
from stores._keys import SUFFIX
from stores._protocol import NewRun
from stores.redis import RedisStore
from tests.conformance._support import (
    OWNER,
    T0,
    TTL,
    assert_indexed_once,
    journal_of,
    new_run,
    start_and_claim,
    status_of,
    step_record,
)

EVENT = json.dumps({"source_run_id": "src", "source_checkpoint_id": "2", "actor": "ops"})
COMPLETED = StepEvent("step.completed", "", "step_completed")


def derived(run_id: str = "copy", **changes: object) -> NewRun:
    """A replay of run "src" (root "root") from its checkpoint "2"."""
    base = attrs.evolve(
        new_run(run_id, created_at=T0 + 10), source_run_id="src", source_checkpoint_id="2",
        root_run_id="root",
    )  # fmt: skip
    return attrs.evolve(base, **changes)


def write_order(jseq: dict[str, str]) -> list[str]:
    """Step keys in journal write order. A js: entry starts with the write's
    sequence number (a step_completed checkpoint's fields may follow a ':')."""
    return sorted(jseq, key=lambda key: int(jseq[key].split(":", 1)[0]))


SEED = [("b#1", step_record("b#1", 0, "B")), ("a#1", step_record("a#1", 1, "A"))]
LINEAGE = [("c#1", step_record("c#1", 2, "C")), ("~now#1", step_record("~now#1", 3, "t"))]


async def test_derive_run_creates_a_pending_queued_run_with_its_lineage(
    store: RedisStore,
) -> None:
    retry = RetryPolicy(max_attempts=4).to_json()
    await store.derive_run(derived(retry=retry), SEED, LINEAGE, "run.replayed", EVENT)

    stored = await store.get_run("copy")
    assert stored is not None
    rec = stored.record
    assert rec.status is RunStatus.PENDING
    assert (rec.source_run_id, rec.source_checkpoint_id, rec.root_run_id) == ("src", "2", "root")
    assert rec.created_at.timestamp() == T0 + 10
    assert rec.trace_id == "copy"  # no trace id given: its own run id
    assert stored.retry == retry
    await assert_indexed_once(store, "copy")
    assert await store.client.zscore(store.keys.all_runs(0), "copy") == T0 + 10
    (event,) = await store.events("copy", None, 10)
    assert event.fields == {"type": "run.replayed", "at": repr(T0 + 10), "data": EVENT}
    assert await store.checkpoints("copy") == []  # the first one is taken when it starts


async def test_a_claim_of_a_derived_run_carries_its_seed_journal_and_lineage(
    store: RedisStore,
) -> None:
    await store.derive_run(derived(), SEED, LINEAGE, "run.forked", EVENT)

    (claim,) = await store.claim(OWNER, None, 10, T0 + 11, TTL)

    assert claim.run.record.run_id == "copy"
    assert claim.journal == dict(SEED)
    assert claim.lineage == dict(LINEAGE)  # reusable results stay out of the journal
    # the run_started checkpoint covers the two seeded journal writes, in seed order
    (started,) = await store.checkpoints("copy")
    assert (started["kind"], started["seq"]) == ("run_started", "2")
    lineage = await store.read_lineage("copy")
    assert lineage is not None
    assert write_order(lineage.jseq) == ["b#1", "a#1"]


async def test_a_derived_run_keeps_its_lineage_while_it_runs(store: RedisStore) -> None:
    await store.derive_run(derived(), [], LINEAGE, "run.replayed", EVENT)
    (claim,) = await store.claim(OWNER, None, 10, T0 + 11, TTL)

    # the activation reuses c#1: it writes its own record; the lineage stays as it was
    await store.record("copy", claim.run.fence, "c#1", step_record("c#1", 2, "C"), now=T0 + 12,
                       event=StepEvent("side_effect.reused", "{}", "step_completed"))  # fmt: skip

    lineage = await store.read_lineage("copy")
    assert lineage is not None
    assert lineage.lineage == dict(LINEAGE)
    assert lineage.journal == {"c#1": step_record("c#1", 2, "C")}


async def test_a_claim_of_a_run_that_was_not_derived_has_no_lineage(store: RedisStore) -> None:
    claim = await start_and_claim(store, "plain")

    assert claim.lineage == {}


async def test_derive_run_records_the_run_options(store: RedisStore) -> None:
    opts = RunOptions(thread_id="case-7", trace_id="trace-1", environment="staging",
                      versions=Versions(("pay",), {"model": "v2"}, "deploy-3"),
                      policy_snapshot_id="pol-9")  # fmt: skip
    new = derived(options=opts, queue="vip", priority=-3, tenant_id="acme", flow_version="2")

    await store.derive_run(new, [], [], "run.forked", EVENT)

    stored = await store.get_run("copy")
    assert stored is not None
    rec = stored.record
    assert (rec.queue, rec.priority, rec.tenant_id, rec.flow_version) == ("vip", -3, "acme", "2")
    assert (rec.thread_id, rec.trace_id, rec.environment, rec.policy_snapshot_id) == (
        "case-7", "trace-1", "staging", "pol-9",
    )  # fmt: skip
    assert rec.versions == opts.versions
    assert stored.retry is None
    # queued on its own queue at its own priority
    assert [c.run.record.run_id for c in await store.claim(OWNER, ["default"], 10, T0, TTL)] == []
    assert [c.run.record.run_id for c in await store.claim(OWNER, ["vip"], 10, T0, TTL)] == ["copy"]


async def test_a_derived_run_keeps_its_flows_retention(store: RedisStore) -> None:
    await store.derive_run(derived(retention=60.0), [], [], "run.replayed", EVENT)

    await store.cancel("copy", "not needed", T0 + 20)

    assert await store.client.zscore(store.keys.expiry(0), "copy") == T0 + 80


async def test_derive_run_onto_an_existing_run_raises_and_changes_nothing(
    store: RedisStore,
) -> None:
    claim = await start_and_claim(store, "taken")
    await store.record("taken", claim.run.fence, "x#1", step_record("x#1", 0, 1), now=T0,
                       event=COMPLETED)  # fmt: skip
    base = store.keys.base_of("taken")
    before = (
        await store.client.hgetall(store.keys.run("taken")),
        await journal_of(store, "taken"),
        await store.client.hgetall(base + SUFFIX["jseq"] + "taken"),
        await store.events("taken", None, 100),
        await store.checkpoints("taken"),
    )

    with pytest.raises(IdempotencyConflict, match="taken"):
        await store.derive_run(derived("taken"), SEED, LINEAGE, "run.replayed", EVENT)

    after = (
        await store.client.hgetall(store.keys.run("taken")),
        await journal_of(store, "taken"),
        await store.client.hgetall(base + SUFFIX["jseq"] + "taken"),
        await store.events("taken", None, 100),
        await store.checkpoints("taken"),
    )
    assert after == before
    assert await store.client.exists(base + SUFFIX["lineage"] + "taken") == 0
    assert await status_of(store, "taken") is RunStatus.RUNNING


async def test_read_lineage_of_an_unknown_run_is_none(store: RedisStore) -> None:
    assert await store.read_lineage("nobody") is None


async def test_read_lineage_returns_the_run_its_journal_in_write_order_and_its_checkpoints(
    store: RedisStore,
) -> None:
    claim = await start_and_claim(store, "src")
    fence = claim.run.fence
    await store.record("src", fence, "~now#1", step_record("~now#1", 0, "t"), now=T0 + 1)
    await store.record("src", fence, "s#1", step_record("s#1", 1, 1), now=T0 + 2, event=COMPLETED)
    await store.record("src", fence, "s#2", step_record("s#2", 2, 2), now=T0 + 3, event=COMPLETED)
    await store.finish("src", fence, RunStatus.COMPLETED, T0 + 4, {"result": "3"})

    lineage = await store.read_lineage("src")

    assert lineage is not None
    assert lineage.run.record.run_id == "src"
    assert lineage.run.record.status is RunStatus.COMPLETED
    assert lineage.run.args == (await store.get_run("src")).args  # type: ignore[union-attr]
    assert lineage.journal == await journal_of(store, "src")
    assert write_order(lineage.jseq) == ["~now#1", "s#1", "s#2"]
    assert lineage.lineage == {}
    # every checkpoint, step checkpoints included, as `checkpoints` lists them
    assert lineage.checkpoints == await store.checkpoints("src")
    assert [(c["kind"], c["step"], c["seq"]) for c in lineage.checkpoints] == [
        ("run_started", "", "0"),
        ("step_completed", "s#1", "2"),
        ("step_completed", "s#2", "3"),
        ("run_finished", "", "3"),
    ]
