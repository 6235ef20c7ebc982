"""Replays and forks: `derive_run`, `read_lineage`, and the lineage a claim carries."""

from __future__ import annotations

import json
from typing import Any

from sdk.store import (
    CheckpointKind,
    EventType,
    Mailbox,
    NewRun,
    Refusal,
    Refused,
    RunStatus,
    StepEvent,
    Store,
    StoredCheckpoint,
)
from testing.conformance._support import (
    COMPLETED,
    OWNER,
    T0,
    TTL,
    async_checks,
    claim_ids,
    drain,
    events_of,
    journal_of,
    lineage_of,
    new_run,
    seen,
    start_and_claim,
    step_record,
    stored,
    tick,
)

EVENT = json.dumps({"source_run_id": "src", "source_checkpoint_id": "2", "actor": "ops"})
SEED = [("b#1", step_record("b#1", 0, "B")), ("a#1", step_record("a#1", 1, "A"))]
LINEAGE = [("c#1", step_record("c#1", 2, "C")), ("~now#1", step_record("~now#1", 3, "t"))]
REUSED = StepEvent(EventType.SIDE_EFFECT_REUSED, "{}", CheckpointKind.STEP_COMPLETED)


def derived(run_id: str = "copy", **changes: Any) -> NewRun:
    """A replay of run "src" (root "root") from its checkpoint "2"."""
    more = {"source_run_id": "src", "source_checkpoint_id": "2", "root_run_id": "root"}
    return new_run(run_id, created_at=T0 + 10, **{**more, **changes})


@async_checks
class DeriveChecks:
    """`derive_run` seeds a new run; `read_lineage` reads a source in one call."""

    async def test_derive_run_creates_a_pending_queued_run_with_its_lineage(
        self, store: Store
    ) -> None:
        retry = '{"max_attempts":4}'

        refused = await store.derive_run(
            derived(retry=retry), SEED, LINEAGE, EventType.RUN_REPLAYED, EVENT
        )

        assert refused is None
        run = await stored(store, "copy")
        assert run.status is RunStatus.PENDING
        assert (run.source_run_id, run.source_checkpoint_id, run.root_run_id) == (
            "src", "2", "root",
        )  # fmt: skip
        assert run.created_at == T0 + 10
        assert run.trace_id == "copy"  # no trace id given: its own run id
        assert run.retry == retry
        assert [r.run_id for r in await store.list_runs(RunStatus.PENDING, None, 10)] == ["copy"]
        (event,) = await events_of(store, "copy")
        assert (event.type, event.at, event.step_key, event.data) == (
            "run.replayed", T0 + 10, None, EVENT,
        )  # fmt: skip
        assert await store.checkpoints("copy") == []  # the first one is taken when it starts

    async def test_a_claim_of_a_derived_run_carries_its_seed_journal_and_its_lineage(
        self, store: Store
    ) -> None:
        await store.derive_run(derived(), SEED, LINEAGE, EventType.RUN_FORKED, EVENT)

        (claim,) = await store.claim(OWNER, None, 10, T0 + 11, TTL)

        assert claim.run.run_id == "copy"
        assert claim.journal == dict(SEED)
        assert claim.lineage == dict(LINEAGE)  # reusable results stay out of the journal
        # the run_started checkpoint covers the two seeded journal writes, in seed order
        (started,) = await store.checkpoints("copy")
        assert (started.kind, started.seq) == (CheckpointKind.RUN_STARTED, 2)
        written = (await lineage_of(store, "copy")).written
        assert sorted(written, key=written.__getitem__) == ["b#1", "a#1"]

    async def test_a_derived_run_keeps_its_lineage_while_it_runs(self, store: Store) -> None:
        await store.derive_run(derived(), [], LINEAGE, EventType.RUN_REPLAYED, EVENT)
        (claim,) = await store.claim(OWNER, None, 10, T0 + 11, TTL)

        # the activation reuses c#1: it writes its own record; the lineage stays as it was
        await store.record("copy", claim.run.fence, "c#1", step_record("c#1", 2, "C"),
                           now=T0 + 12, event=REUSED)  # fmt: skip

        lineage = await lineage_of(store, "copy")
        assert lineage.lineage == dict(LINEAGE)
        assert lineage.journal == {"c#1": step_record("c#1", 2, "C")}
        await store.release("copy", claim.run.fence)
        (again,) = await store.claim(OWNER, None, 10, T0 + 13, TTL)
        assert again.lineage == dict(LINEAGE)

    async def test_derive_run_puts_its_mail_in_the_new_runs_mailboxes_with_their_dedup_ids(
        self, store: Store
    ) -> None:
        box = Mailbox("~child:src-kid")
        mail = [(box, '{"status":"completed","result":1}', "~child:src-kid")]

        await store.derive_run(derived(), [], LINEAGE, EventType.RUN_REPLAYED, EVENT, mail)

        (claim,) = await store.claim(OWNER, None, 10, T0 + 11, TTL)
        assert claim.mail == frozenset({box})
        # the same delivery again (its dedup id) is a duplicate
        assert await store.signal("copy", box, '"again"', "~child:src-kid") is False
        assert await drain(store, "copy", claim.run.fence, box) == [mail[0][1]]

    async def test_a_derived_run_with_a_parent_is_listed_among_its_children(
        self, store: Store
    ) -> None:
        await start_and_claim(store, "parent")

        await store.derive_run(
            derived(parent_run_id="parent", tree_root_run_id="parent"), [], [],
            EventType.RUN_REPLAYED, EVENT,
        )  # fmt: skip

        (kid,) = await store.list_runs(None, None, 10, parent_run_id="parent")
        assert (kid.run_id, kid.parent_run_id, kid.source_run_id) == ("copy", "parent", "src")

    async def test_a_claim_of_a_run_that_was_not_derived_has_no_lineage(self, store: Store) -> None:
        claim = await start_and_claim(store, "plain")

        assert claim.lineage == {}
        assert (await lineage_of(store, "plain")).lineage == {}

    async def test_derive_run_records_the_run_options(self, store: Store) -> None:
        versions = '{"capabilities":["pay"],"bindings":{"model":"v2"},"registry_ref":"d-3"}'
        new = derived(
            thread_id="case-7", trace_id="trace-1", environment="staging", versions=versions,
            policy_snapshot_id="pol-9", queue="vip", priority=-3, tenant_id="acme",
            flow_version="2",
        )  # fmt: skip

        await store.derive_run(new, [], [], EventType.RUN_FORKED, EVENT)

        run = await stored(store, "copy")
        assert (run.queue, run.priority, run.tenant_id, run.flow_version) == (
            "vip",
            -3,
            "acme",
            "2",
        )
        assert (run.thread_id, run.trace_id, run.environment, run.policy_snapshot_id) == (
            "case-7", "trace-1", "staging", "pol-9",
        )  # fmt: skip
        assert (run.versions, run.retry) == (versions, None)
        # queued on its own queue at its own priority
        assert await claim_ids(store, queues=["default"]) == []
        assert await claim_ids(store, queues=["vip"]) == ["copy"]

    async def test_a_derived_run_keeps_its_flows_retention(self, store: Store) -> None:
        await store.derive_run(derived(retention=60.0), [], [], EventType.RUN_REPLAYED, EVENT)

        await store.cancel("copy", "not needed", T0 + 20)

        await tick(store, T0 + 79)
        assert await store.get_run("copy") is not None
        await tick(store, T0 + 80)
        assert await store.get_run("copy") is None

    async def test_derive_run_onto_a_taken_id_is_refused_and_changes_nothing(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "taken")
        await store.record("taken", claim.run.fence, "x#1", step_record("x#1", 0, 1), now=T0,
                           event=COMPLETED)  # fmt: skip
        before = await seen(store, "taken")

        refused = await store.derive_run(
            derived("taken"), SEED, LINEAGE, EventType.RUN_REPLAYED, EVENT
        )

        assert refused == Refused(Refusal.EXISTS)
        assert await seen(store, "taken") == before

    async def test_read_lineage_of_an_unknown_run_is_none(self, store: Store) -> None:
        assert await store.read_lineage("nobody") is None

    async def test_read_lineage_reads_the_run_its_journal_in_write_order_and_its_checkpoints(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "src")
        fence = claim.run.fence
        await store.record("src", fence, "~now#1", step_record("~now#1", 0, "t"), now=T0 + 1)
        await store.record("src", fence, "s#1", step_record("s#1", 1, 1), now=T0 + 2,
                           event=COMPLETED)  # fmt: skip
        await store.record("src", fence, "s#2", step_record("s#2", 2, 2), now=T0 + 3,
                           event=COMPLETED)  # fmt: skip
        await store.finish("src", fence, RunStatus.COMPLETED, T0 + 4, result="3")

        lineage = await lineage_of(store, "src")

        assert lineage.run == await store.get_run("src")
        assert lineage.journal == {
            "~now#1": step_record("~now#1", 0, "t"),
            "s#1": step_record("s#1", 1, 1),
            "s#2": step_record("s#2", 2, 2),
        }
        assert lineage.written == {"~now#1": 1, "s#1": 2, "s#2": 3}
        assert lineage.lineage == {}
        # every checkpoint, step checkpoints included, as `checkpoints` lists them
        assert lineage.checkpoints == await store.checkpoints("src")
        R, C, F = RunStatus.RUNNING, CheckpointKind, RunStatus.COMPLETED
        assert lineage.checkpoints == [
            StoredCheckpoint(1, C.RUN_STARTED, None, R, T0, 0),
            StoredCheckpoint(2, C.STEP_COMPLETED, "s#1", R, T0 + 2, 2),
            StoredCheckpoint(3, C.STEP_COMPLETED, "s#2", R, T0 + 3, 3),
            StoredCheckpoint(4, C.RUN_FINISHED, None, F, T0 + 4, 3),
        ]

    async def test_read_lineage_of_a_derived_run_reads_its_lineage(self, store: Store) -> None:
        await store.derive_run(derived(), SEED, LINEAGE, EventType.RUN_REPLAYED, EVENT)

        lineage = await lineage_of(store, "copy")

        assert (lineage.journal, lineage.lineage) == (dict(SEED), dict(LINEAGE))
        assert lineage.run.status is RunStatus.PENDING
        assert await journal_of(store, "copy") == dict(SEED)
