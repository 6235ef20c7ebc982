"""Reading a run's history: event pages, event data unchanged, the live feed."""

from __future__ import annotations

from sdk.store import RunStatus, Store, StoredEvent
from testing.conformance._support import (
    GO,
    OWNER,
    T0,
    TRICKY,
    TTL,
    async_checks,
    events_of,
    new_run,
    together,
)

# Short blocking reads: these calls are expected to time out when nothing lands.
POLL = 0.05


@async_checks
class HistoryChecks:
    """`events`, `checkpoints`, `follow` / `unfollow` and `correlation`."""

    async def test_a_signal_logs_its_event_data_unchanged(self, store: Store) -> None:
        await store.create_run(new_run("r1"))

        assert await store.signal("r1", GO, "1", "d-1", now=T0 + 7, event_data=TRICKY) is True

        last = (await events_of(store, "r1"))[-1]
        assert (last.type, last.at, last.step_key, last.data) == (
            "signal.received", T0 + 7, None, TRICKY,
        )  # fmt: skip

    async def test_event_pages_start_after_their_cursor(self, store: Store) -> None:
        await store.create_run(new_run("r1"))
        for i in range(9):
            await store.signal("r1", GO, "1", f"d-{i}", now=T0 + i, event_data=f'{{"i":{i}}}')

        pages: list[list[StoredEvent]] = []
        cursor = None
        while page := await store.events("r1", cursor, 4):
            pages.append(page)
            cursor = page[-1].event_id

        assert [len(p) for p in pages] == [4, 4, 2]
        every = [e for page in pages for e in page]
        assert every == await events_of(store, "r1")
        assert len({e.event_id for e in every}) == 10
        assert [e.data for e in every[1:]] == [f'{{"i":{i}}}' for i in range(9)]

    async def test_events_are_oldest_first_and_belong_to_their_run(self, store: Store) -> None:
        await store.create_run(new_run("r1", created_at=T0))
        await store.create_run(new_run("r2", created_at=T0 + 1))
        await store.cancel("r1", "stop", T0 + 2)

        assert [(e.run_id, e.type) for e in await events_of(store, "r1")] == [
            ("r1", "run.created"), ("r1", "run.canceled"),
        ]  # fmt: skip
        assert [e.type for e in await events_of(store, "r2")] == ["run.created"]

    async def test_following_from_now_skips_nothing_that_lands_between_two_calls(
        self, store: Store
    ) -> None:
        await store.create_run(new_run("before"))  # history: never delivered

        first, sub = await store.follow(None, POLL, 100)  # subscribes
        try:
            assert first == []
            await store.create_run(new_run("between"))  # lands after the first call returned
            second, sub = await store.follow(sub, POLL, 100)
        finally:
            await store.unfollow(sub)

        assert [(e.run_id, e.type) for e in second] == [("between", "run.created")]

    async def test_following_delivers_every_event_once_in_order(self, store: Store) -> None:
        # In one partition: the feed keeps each partition's order; on a cluster,
        # partitions on different masters come over different connections and
        # may interleave otherwise (docs/operations.md, the live feed on a cluster).
        r1, r2 = together(store, "r1", "r2")
        _, sub = await store.follow(None, POLL, 100)
        try:
            await store.create_run(new_run(r1, tenant_id="acme"))
            await store.claim(OWNER, None, 1, T0, TTL)
            await store.create_run(new_run(r2))

            got: list[StoredEvent] = []
            for _ in range(3):
                batch, sub = await store.follow(sub, POLL, 2)
                got += batch
            await store.cancel(r2, "stop", T0 + 1, event_data='{"why":"déjà vu"}')
            batch, sub = await store.follow(sub, POLL, 100)
            got += batch
            again, sub = await store.follow(sub, POLL, 100)
        finally:
            await store.unfollow(sub)

        assert [(e.run_id, e.type) for e in got] == [
            (r1, "run.created"), (r1, "run.started"), (r2, "run.created"),
            (r2, "run.canceled"),
        ]  # fmt: skip
        assert again == []
        assert got[3].data == '{"why":"déjà vu"}'
        assert got[:2] == await events_of(store, r1)  # the run's own events, ids and all
        assert await store.correlation([r1, r2, "unknown"]) == {
            r1: (r1, "acme"),
            r2: (r2, None),
        }

    async def test_checkpoints_are_oldest_first(self, store: Store) -> None:
        await store.create_run(new_run("r1"))
        (claim,) = await store.claim(OWNER, None, 1, T0, TTL)
        await store.mark("r1", claim.run.fence, "s#1", T0 + 1)
        await store.finish("r1", claim.run.fence, RunStatus.COMPLETED, T0 + 2, result="1")

        cps = await store.checkpoints("r1")

        assert [(c.checkpoint_id, c.kind, c.at) for c in cps] == [
            (1, "run_started", T0), (2, "step_started", T0 + 1), (3, "run_finished", T0 + 2),
        ]  # fmt: skip
