"""Fenced journal writes (`record`, `mark`) and the events and checkpoints they take."""

from __future__ import annotations

import json

from sdk.store import (
    CheckpointKind,
    EventType,
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
    events_of,
    journal_of,
    new_run,
    start_and_claim,
    step_record,
    stored,
    types_of,
)


@async_checks
class JournalChecks:
    """`record` and `mark`: one fenced write each, with its event and checkpoint."""

    async def test_record_with_the_current_fence_writes_the_journal(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")

        assert await store.record("r1", claim.run.fence, "a#1", step_record("a#1", 0, [1, 2]))

        assert await journal_of(store, "r1") == {"a#1": step_record("a#1", 0, [1, 2])}
        assert (await stored(store, "r1")).current_step == "a#1"

    async def test_record_overwrites_the_record_at_its_key(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        await store.record("r1", claim.run.fence, "a#1", step_record("a#1", 0, "first"))

        assert await store.record("r1", claim.run.fence, "a#1", step_record("a#1", 0, "second"))

        assert await journal_of(store, "r1") == {"a#1": step_record("a#1", 0, "second")}

    async def test_record_with_a_stale_fence_is_refused_and_writes_nothing(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")
        await store.release("r1", claim.run.fence)
        (again,) = await store.claim(OWNER, None, 1, T0, TTL)

        assert not await store.record("r1", claim.run.fence, "a#1", step_record("a#1", 0))
        assert not await store.record("r1", again.run.fence + 1, "a#1", step_record("a#1", 0))

        assert await journal_of(store, "r1") == {}

    async def test_record_on_a_run_that_is_not_running_is_refused(self, store: Store) -> None:
        await store.create_run(new_run("r1"))
        pending = await stored(store, "r1")

        assert not await store.record("r1", pending.fence, "a#1", step_record("a#1", 0))

        assert await journal_of(store, "r1") == {}

    async def test_record_on_an_unknown_run_is_refused_and_creates_nothing(
        self, store: Store
    ) -> None:
        assert not await store.record("nope", 1, "a#1", step_record("a#1", 0))

        assert await store.get_run("nope") is None
        assert await store.read_lineage("nope") is None

    async def test_record_with_a_step_event_logs_the_event_and_takes_the_checkpoint(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")
        await store.record("r1", claim.run.fence, "~now#1", step_record("~now#1", 0), now=T0)

        ok = await store.record(
            "r1", claim.run.fence, "s#1", step_record("s#1", 1, 42), now=T0 + 2, event=COMPLETED
        )

        assert ok
        last = (await events_of(store, "r1"))[-1]
        assert (last.type, last.at, last.step_key, last.data) == (
            "step.completed", T0 + 2, "s#1", None,
        )  # fmt: skip
        assert [c.kind for c in await store.checkpoints("r1")] == [
            CheckpointKind.RUN_STARTED, CheckpointKind.STEP_COMPLETED,
        ]  # fmt: skip
        step_cp = (await store.checkpoints("r1"))[1]
        assert step_cp == StoredCheckpoint(
            2, CheckpointKind.STEP_COMPLETED, "s#1", RunStatus.RUNNING, T0 + 2, seq=2
        )
        assert (await stored(store, "r1")).checkpoint_head == 2

    async def test_a_checkpoint_counts_the_journal_writes_it_covers(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        fence = claim.run.fence
        await store.record("r1", fence, "~now#1", step_record("~now#1", 0), now=T0)
        await store.record("r1", fence, "s#1", step_record("s#1", 1), now=T0, event=COMPLETED)
        await store.record("r1", fence, "~uuid4#1", step_record("~uuid4#1", 2), now=T0)
        await store.record("r1", fence, "s#2", step_record("s#2", 3), now=T0, event=COMPLETED)

        cps = await store.checkpoints("r1")

        assert [(c.checkpoint_id, c.step_key, c.seq) for c in cps] == [
            (1, None, 0), (2, "s#1", 2), (3, "s#2", 4),
        ]  # fmt: skip

    async def test_record_with_an_event_but_no_checkpoint_kind_takes_no_checkpoint(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")
        data = json.dumps({"type": "builtins:ValueError", "message": "nöpe", "big": 2**70})

        await store.record(
            "r1", claim.run.fence, "s#1", step_record("s#1", 0), now=T0 + 1,
            event=StepEvent(EventType.STEP_FAILED, data),
        )  # fmt: skip

        last = (await events_of(store, "r1"))[-1]
        assert (last.type, last.at, last.step_key, last.data) == (
            "step.failed", T0 + 1, "s#1", data,
        )  # fmt: skip
        assert [c.kind for c in await store.checkpoints("r1")] == ["run_started"]
        assert (await stored(store, "r1")).checkpoint_head == 1

    async def test_record_without_an_event_logs_nothing(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")

        await store.record("r1", claim.run.fence, "~now#1", step_record("~now#1", 0), now=T0)

        assert await types_of(store, "r1") == ["run.created", "run.started"]
        assert len(await store.checkpoints("r1")) == 1

    async def test_a_refused_record_logs_no_event_and_takes_no_checkpoint(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")
        await store.cancel("r1", "stop", T0)
        before = (await events_of(store, "r1"), await store.checkpoints("r1"))

        ok = await store.record(
            "r1", claim.run.fence, "s#1", step_record("s#1", 0), now=T0, event=COMPLETED
        )

        assert not ok
        assert (await events_of(store, "r1"), await store.checkpoints("r1")) == before

    async def test_mark_logs_step_started_and_takes_its_checkpoint(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")

        assert await store.mark("r1", claim.run.fence, "s#1", T0 + 3)

        last = (await events_of(store, "r1"))[-1]
        assert (last.type, last.at, last.step_key) == ("step.started", T0 + 3, "s#1")
        cp = (await store.checkpoints("r1"))[-1]
        assert (cp.checkpoint_id, cp.kind, cp.step_key, cp.status, cp.at) == (
            2, CheckpointKind.STEP_STARTED, "s#1", RunStatus.RUNNING, T0 + 3,
        )  # fmt: skip
        assert (await stored(store, "r1")).checkpoint_head == 2
        assert await journal_of(store, "r1") == {}  # a mark is not a journal record

    async def test_mark_with_a_stale_fence_is_refused_and_writes_nothing(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")
        await store.release("r1", claim.run.fence)

        assert not await store.mark("r1", claim.run.fence, "s#1", T0)

        assert await types_of(store, "r1") == ["run.created", "run.started"]
        assert len(await store.checkpoints("r1")) == 1

    async def test_the_first_claim_logs_run_started_and_takes_the_run_started_checkpoint(
        self, store: Store
    ) -> None:
        await store.create_run(new_run("r1"))

        await store.claim(OWNER, None, 1, T0 + 5, TTL)

        assert await types_of(store, "r1") == ["run.created", "run.started"]
        assert await store.checkpoints("r1") == [
            StoredCheckpoint(1, CheckpointKind.RUN_STARTED, None, RunStatus.RUNNING, T0 + 5, 0)
        ]
        assert (await stored(store, "r1")).checkpoint_head == 1

    async def test_a_later_claim_logs_no_second_start(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        await store.release("r1", claim.run.fence)

        await store.claim(OWNER, None, 1, T0 + 1, TTL)

        assert await types_of(store, "r1") == ["run.created", "run.started"]
        assert (await stored(store, "r1")).started_at == T0
        assert len(await store.checkpoints("r1")) == 1
