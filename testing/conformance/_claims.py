"""Claiming: priority order, FIFO, queue and flow filters, journals, no double claim."""

from __future__ import annotations

import asyncio

from sdk.store import Mailbox, RunStatus, Store
from testing.conformance._support import (
    GO,
    OK_BOX,
    OWNER,
    T0,
    TTL,
    async_checks,
    claim_ids,
    consume,
    new_run,
    start_and_claim,
    status_of,
    step_record,
    together,
)


@async_checks
class ClaimChecks:
    """`claim`: which runs, in which order, with what."""

    async def test_claim_of_an_empty_store_returns_nothing(self, store: Store) -> None:
        assert await store.claim(OWNER, None, 10, T0, TTL) == []
        assert await store.claim(OWNER, ["default"], 10, T0, TTL) == []

    async def test_claim_takes_the_lower_priority_number_first(self, store: Store) -> None:
        for run_id, prio in [("p5", 5), ("p-4095", -4095), ("p0", 0), ("p4095", 4095),
                             ("p-1", -1)]:  # fmt: skip
            await store.create_run(new_run(run_id, priority=prio))

        assert await claim_ids(store) == ["p-4095", "p-1", "p0", "p5", "p4095"]

    async def test_claim_is_fifo_within_a_priority_across_queues(self, store: Store) -> None:
        # Three queues and two priorities, interleaved: within a priority, creation order wins.
        plan = [("a1", "qa", 1), ("b1", "qb", 0), ("c1", "qc", 1), ("a2", "qa", 0),
                ("b2", "qb", 1), ("c2", "qc", 0), ("a3", "qa", 0)]  # fmt: skip
        for i, (run_id, queue, prio) in enumerate(plan):
            await store.create_run(new_run(run_id, queue=queue, priority=prio, created_at=T0 + i))

        assert await claim_ids(store) == ["b1", "a2", "c2", "a3", "a1", "c1", "b2"]

    async def test_claiming_one_at_a_time_keeps_the_order(self, store: Store) -> None:
        for i in range(4):
            await store.create_run(new_run(f"r{i}", queue=f"q{i % 2}", created_at=T0 + i))

        taken = [await claim_ids(store, limit=1) for _ in range(5)]

        assert taken == [["r0"], ["r1"], ["r2"], ["r3"], []]

    async def test_runs_created_at_the_same_time_are_claimed_in_enqueue_order(
        self, store: Store
    ) -> None:
        # FIFO by enqueue order: across partitions, creation times decide (see `together`)
        r = together(store, *(f"r{i}" for i in range(4)))
        for i, run_id in enumerate(r):
            await store.create_run(new_run(run_id, queue=f"q{i % 2}"))

        assert [await claim_ids(store, limit=1) for _ in range(3)] == [[r[0]], [r[1]], [r[2]]]
        assert await claim_ids(store) == [r[3]]

    async def test_priority_and_then_creation_time_order_claims_across_partitions(
        self, store: Store
    ) -> None:
        # 40 runs land in every partition of a store with several, with 4
        # priorities in a shuffled order: claims take the best first, across
        # partitions, by priority and then creation time.
        plan = [(f"r{i:02}", (i * 7) % 4, T0 + i) for i in range(40)]
        for run_id, prio, at in plan:
            await store.create_run(new_run(run_id, priority=prio, created_at=at))
        best = [run_id for run_id, _, _ in sorted(plan, key=lambda x: (x[1], x[2]))]

        assert await claim_ids(store, limit=10) == best[:10]
        assert await claim_ids(store, limit=25) == best[10:35]
        assert await claim_ids(store, limit=1) == best[35:36]
        assert await claim_ids(store) == best[36:]

    async def test_claim_with_a_queue_filter_takes_only_those_queues(self, store: Store) -> None:
        await store.create_run(new_run("a1", queue="qa", created_at=T0))
        await store.create_run(new_run("b1", queue="qb", created_at=T0 + 1))
        await store.create_run(new_run("c1", queue="qc", created_at=T0 + 2))
        await store.create_run(new_run("b2", queue="qb", priority=-1, created_at=T0 + 3))

        assert await claim_ids(store, queues=["qb"]) == ["b2", "b1"]
        assert await claim_ids(store, queues=["qx"]) == []
        assert await claim_ids(store, queues=["qc", "qa"]) == ["a1", "c1"]

    async def test_claim_respects_the_limit(self, store: Store) -> None:
        for i in range(5):
            await store.create_run(new_run(f"r{i}", created_at=T0 + i))

        assert await claim_ids(store, limit=2) == ["r0", "r1"]
        assert await claim_ids(store, limit=2) == ["r2", "r3"]
        assert await claim_ids(store, limit=2) == ["r4"]

    async def test_claim_starts_the_run_with_a_fresh_fence(self, store: Store) -> None:
        await store.create_run(new_run("r1"))
        pending = await store.get_run("r1")
        assert pending is not None

        (claim,) = await store.claim(OWNER, None, 1, T0 + 3, TTL)

        assert claim.run.run_id == "r1"
        assert claim.run.status is RunStatus.RUNNING
        assert claim.run.started_at == T0 + 3
        assert claim.run.fence != pending.fence
        assert (claim.journal, claim.mail, claim.lineage) == ({}, frozenset(), {})
        assert await status_of(store, "r1") is RunStatus.RUNNING

    async def test_claim_returns_the_whole_journal_verbatim(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        records = {f"s#{i}": step_record(f"s#{i}", i - 1, {"i": i}) for i in range(1, 201)}
        records["s#7"] = step_record("s#7", 6, {"tricky": [12345678901234567890, 0.1 + 0.2, []]})
        for key, rec in records.items():
            assert await store.record("r1", claim.run.fence, key, rec)
        await store.release("r1", claim.run.fence)

        (again,) = await store.claim("worker-b", None, 1, T0 + 1, TTL)

        assert again.run.run_id == "r1"
        assert again.journal == records
        assert again.run.fence != claim.run.fence

    async def test_claim_takes_no_run_twice(self, store: Store) -> None:
        for i in range(20):
            await store.create_run(new_run(f"r{i:02}"))

        batches = await asyncio.gather(
            *(claim_ids(store, owner=f"w{n}", limit=7) for n in range(4))
        )

        taken = [run_id for batch in batches for run_id in batch]
        assert sorted(taken) == [f"r{i:02}" for i in range(20)]
        assert await claim_ids(store) == []

    async def test_a_claimed_run_is_not_claimable_while_leased(self, store: Store) -> None:
        await start_and_claim(store, "r1")

        assert await claim_ids(store, now=T0 + TTL - 1) == []
        assert await status_of(store, "r1") is RunStatus.RUNNING

    async def test_claim_skips_a_run_canceled_while_queued(self, store: Store) -> None:
        await store.create_run(new_run("r1"))
        await store.create_run(new_run("r2"))
        assert await store.cancel("r1", "changed my mind", T0) is None

        assert await claim_ids(store) == ["r2"]
        assert await status_of(store, "r1") is RunStatus.CANCELED

    async def test_claim_names_the_mailboxes_that_hold_signals(self, store: Store) -> None:
        await store.create_run(new_run("with-mail", created_at=T0))
        await store.create_run(new_run("no-mail", created_at=T0 + 1))
        assert await store.signal("with-mail", GO, '"x"', None) is True
        assert await store.signal("with-mail", OK_BOX, '"y"', None) is True

        claims = {c.run.run_id: c for c in await store.claim(OWNER, None, 2, T0, TTL)}

        assert claims["with-mail"].mail == {GO, OK_BOX}
        assert claims["no-mail"].mail == frozenset()

    async def test_claim_does_not_name_a_mailbox_that_was_emptied(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        await store.signal("r1", GO, "1", None)
        await store.signal("r1", Mailbox("other"), "2", None)
        await consume(store, "r1", claim.run.fence)
        await store.release("r1", claim.run.fence)

        (again,) = await store.claim(OWNER, None, 1, T0, TTL)

        assert again.mail == {Mailbox("other")}

    async def test_claim_with_flows_takes_only_runs_of_those_flows(self, store: Store) -> None:
        await store.create_run(new_run("other-first", flow="c.other", priority=-5, created_at=T0))
        await store.create_run(new_run("mine", flow="c.mine", priority=0, created_at=T0 + 1))

        assert await claim_ids(store, flows=["c.mine"]) == ["mine"]
        # the other flow's run is still queued, first in line for a worker that serves it
        assert await claim_ids(store, flows=["c.other", "c.mine"]) == ["other-first"]

    async def test_claim_with_flow_versions_takes_only_runs_started_at_them(
        self, store: Store
    ) -> None:
        await store.create_run(new_run("old", flow="c.f", flow_version="1", created_at=T0))
        await store.create_run(new_run("plain", flow="c.f", created_at=T0 + 1))
        await store.create_run(new_run("new", flow="c.f", flow_version="2", created_at=T0 + 2))
        await store.create_run(new_run("any", flow="c.g", flow_version="9", created_at=T0 + 3))

        # a (name, version) pair takes that version only; (name, None) unversioned runs;
        # a plain name any version
        assert await claim_ids(store, flows=[("c.f", "2")], limit=5) == ["new"]
        assert await claim_ids(store, flows=[("c.f", None), ("c.g", "1")], limit=5) == ["plain"]
        assert await claim_ids(store, flows=[("c.f", "1"), "c.g"], limit=5) == ["old", "any"]

    async def test_claim_without_flows_takes_any_flow(self, store: Store) -> None:
        await store.create_run(new_run("a", flow="c.a", created_at=T0))
        await store.create_run(new_run("b", flow="c.b", created_at=T0 + 1))

        assert await claim_ids(store) == ["a", "b"]
