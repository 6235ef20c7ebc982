"""`continue_as_new`: a run's generation archived, the next one started, in one write."""

from __future__ import annotations

from sdk.store import Consumed, EventDelivered, Refusal, Refused, RunStatus, Store
from testing.conformance._events import WATCH, deliver, listen
from testing.conformance._support import (
    COMPLETED,
    GO,
    T0,
    TTL,
    async_checks,
    claim_ids,
    drain,
    journal_of,
    start_and_claim,
    step_record,
    stored,
    tick,
    types_of,
)

NEXT = '{"args":[1],"kwargs":{},"types":{}}'
DATA = '{"generation":1,"archived_as":"r1~g0"}'
ARCHIVE = '{"generation":0,"continued_as":"r1"}'


@async_checks
class ContinueChecks:
    """`continue_as_new`."""

    async def test_continue_archives_the_generation_and_queues_the_next(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        fence = claim.run.fence
        await store.record("r1", fence, "s#1", step_record("s#1", 0, 1), now=T0, event=COMPLETED)
        await store.signal("r1", GO, '"kept"', None, now=T0)

        assert await store.continue_as_new("r1", fence, T0 + 1, NEXT, DATA, ARCHIVE) is None

        run = await stored(store, "r1")
        assert (run.status, run.args, run.generation) == (RunStatus.RUNNING, NEXT, 1)
        assert (run.current_step, run.checkpoint_head) == (None, 1)
        assert await journal_of(store, "r1") == {}
        old = await stored(store, "r1~g0")
        assert (old.status, old.reason, old.finished_at) == (
            RunStatus.COMPLETED, "continued_as_new", T0 + 1,
        )  # fmt: skip
        assert (old.args, old.generation, old.flow) == (claim.run.args, 0, claim.run.flow)
        assert list(await journal_of(store, "r1~g0")) == ["s#1"]
        assert (await types_of(store, "r1"))[-1] == "run.continued_as_new"
        assert await types_of(store, "r1~g0") == ["run.continued_as_new"]
        assert await store.wait_finished("r1~g0", 0.01)
        # the old activation is fenced out; the run is ready with its mailbox kept
        assert await store.continue_as_new("r1", fence, T0 + 1, NEXT, DATA, ARCHIVE) == Refused(
            Refusal.FENCED
        )
        assert await store.finish("r1", fence, RunStatus.COMPLETED, T0, result="1") == Refused(
            Refusal.FENCED
        )
        assert await tick(store, T0 + TTL + 1) == (0, 0)  # no lease left behind
        [again] = await store.claim("w", None, 1, T0 + 2, TTL)
        assert (again.run.run_id, again.run.args, again.journal) == ("r1", NEXT, {})
        assert await drain(store, "r1", again.run.fence) == ['"kept"']
        listed = {r.run_id for r in await store.list_runs(None, None, 10)}
        assert listed == {"r1", "r1~g0"}

    async def test_the_second_continue_archives_generation_one(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        await store.continue_as_new("r1", claim.run.fence, T0, NEXT, DATA, ARCHIVE)
        [again] = await store.claim("w", None, 1, T0 + 1, TTL)
        await store.continue_as_new("r1", again.run.fence, T0 + 1, NEXT, DATA, ARCHIVE)
        assert (await stored(store, "r1")).generation == 2
        assert (await stored(store, "r1~g1")).generation == 1
        assert await claim_ids(store, now=T0 + 2) == ["r1"]

    async def test_a_wait_for_event_still_listening_ends_with_its_generation(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")
        assert await listen(store, "r1", claim.run.fence) == (Consumed.EMPTY, None)
        assert await deliver(store, "r1", "1", "e-1") is EventDelivered.DELIVERED

        await store.continue_as_new("r1", claim.run.fence, T0, NEXT, DATA, ARCHIVE)

        assert await deliver(store, "r1", "2", "e-2") is EventDelivered.NOT_LISTENING
        assert await store.event_listeners([WATCH.token]) == []
        [again] = await store.claim("w", None, 1, T0 + 1, TTL)
        assert await listen(store, "r1", again.run.fence) == (Consumed.EMPTY, None)
