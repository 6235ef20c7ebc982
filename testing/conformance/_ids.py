"""Run ids and mailbox names are opaque: separators, braces and spaces in them change nothing."""

from __future__ import annotations

import pytest

from sdk.store import Consumed, Mailbox, Parked, RunStatus, Store
from testing.conformance._support import (
    GO,
    OWNER,
    T0,
    TTL,
    async_checks,
    claim_ids,
    consume,
    journal_of,
    new_run,
    status_of,
    step_record,
    stored,
)

ODD_IDS = ["a:b", "tenant:{42}:order:7", "{p0}", "}{", "x:{p0}:run:y", "日本:{}", "a b\tc", "*?[]"]


@async_checks
class RunIdChecks:
    """Every operation on a run whose id looks like a separator, a pattern or a hash tag."""

    @pytest.mark.parametrize("run_id", ODD_IDS)
    async def test_the_whole_life_of_a_run_with_an_odd_id(self, store: Store, run_id: str) -> None:
        await store.create_run(new_run(run_id))
        assert await claim_ids(store, limit=1) == [run_id]
        fence = (await stored(store, run_id)).fence
        assert await store.record(run_id, fence, "a#1", step_record("a#1", 0, 1))
        parked = await store.suspend(
            run_id, fence, T0, T0 + 5, RunStatus.WAITING_FOR_SIGNAL, [], [GO]
        )
        assert parked is Parked.PARKED
        assert await store.signal(run_id, GO, '"hi"', "d") is True

        (claim,) = await store.claim(OWNER, None, 1, T0, TTL)
        assert claim.run.run_id == run_id
        assert claim.journal == {"a#1": step_record("a#1", 0, 1)}
        assert await consume(store, run_id, claim.run.fence) == (Consumed.SIGNAL, '"hi"')
        await store.finish(run_id, claim.run.fence, RunStatus.COMPLETED, T0 + 1, result="1")

        assert await status_of(store, run_id) is RunStatus.COMPLETED
        assert [r.run_id for r in await store.list_runs(None, None, 10)] == [run_id]
        events = await store.events(run_id, None, 100)
        assert {e.run_id for e in events} == {run_id}
        assert [e.type for e in events] == [
            "run.created", "run.started", "run.waiting_for_signal", "signal.received",
            "wait.completed", "run.completed",
        ]  # fmt: skip
        assert await store.wait_finished(run_id, 0.05) is True
        assert await store.delete(run_id, T0 + 2) is None
        assert await store.get_run(run_id) is None

    async def test_mailboxes_of_runs_whose_ids_share_a_prefix_are_apart(self, store: Store) -> None:
        await store.create_run(new_run("r"))
        await store.create_run(new_run("r:s:x"))
        await claim_ids(store)
        short, long = await stored(store, "r"), await stored(store, "r:s:x")

        await store.signal("r", Mailbox("x:s:y"), '"for r"', None)
        await store.signal("r:s:x", Mailbox("y"), '"for r:s:x"', None)

        assert await consume(store, "r:s:x", long.fence, mailbox=Mailbox("y")) == (
            Consumed.SIGNAL, '"for r:s:x"',
        )  # fmt: skip
        assert await consume(store, "r", short.fence, mailbox=Mailbox("x:s:y")) == (
            Consumed.SIGNAL, '"for r"',
        )  # fmt: skip
        outcome = await consume(store, "r", short.fence, key="~wait:y#1", mailbox=Mailbox("y"))
        assert outcome == (Consumed.EMPTY, None)

    async def test_runs_whose_ids_share_a_prefix_keep_their_own_journals_and_dedup_ids(
        self, store: Store
    ) -> None:
        await store.create_run(new_run("a"))
        await store.create_run(new_run("a:"))
        fences = {c.run.run_id: c.run.fence for c in await store.claim(OWNER, None, 2, T0, TTL)}

        await store.record("a", fences["a"], "s#1", step_record("s#1", 0, "a"))
        await store.record("a:", fences["a:"], "s#1", step_record("s#1", 0, "a:"))

        assert await journal_of(store, "a") == {"s#1": step_record("s#1", 0, "a")}
        assert await journal_of(store, "a:") == {"s#1": step_record("s#1", 0, "a:")}
        assert await store.signal("a", GO, "1", "d") is True
        assert await store.signal("a:", GO, "1", "d") is True

    async def test_step_keys_and_mailbox_names_with_odd_characters_are_kept(
        self, store: Store
    ) -> None:
        await store.create_run(new_run("r1"))
        (claim,) = await store.claim(OWNER, None, 1, T0, TTL)
        odd = Mailbox("s:{x}:日本 *")
        key = "we:ird {key}#1"

        assert await store.record("r1", claim.run.fence, key, step_record(key, 0, 1))
        assert await store.signal("r1", odd, "7", None) is True

        assert await journal_of(store, "r1") == {key: step_record(key, 0, 1)}
        assert await consume(store, "r1", claim.run.fence, mailbox=odd) == (Consumed.SIGNAL, "7")
