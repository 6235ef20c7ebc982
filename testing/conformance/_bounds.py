"""What a store bounds per run (`Store.limits`): the audit events a flood cannot
trim away, and the messages a caller may leave in a run's mailboxes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from sdk.store import (
    Consumed,
    EventDelivered,
    EventType,
    Mailbox,
    Parked,
    Refusal,
    Refused,
    RunStatus,
    Store,
    StoredEvent,
)
from testing.conformance._events import BOX, WATCH, deliver, listen
from testing.conformance._support import (
    OK_BOX,
    T0,
    async_checks,
    consume,
    new_run,
    seen,
    start_and_claim,
)

FLOOD = Mailbox("flood")
CHILD = Mailbox("~child:c-1")  # where the engine delivers a child's outcome


async def at_once(make: Callable[[int], Awaitable[Any]], n: int, batch: int = 500) -> list[Any]:
    """Await ``make(i)`` for i in range(n), `batch` at a time (sent together): the
    replies in order."""
    replies: list[Any] = []
    for start in range(0, n, batch):
        replies += await asyncio.gather(*(make(i) for i in range(start, min(n, start + batch))))
    return replies


async def fill(store: Store, run_id: str, n: int) -> None:
    """`n` events that change nothing else and are no audit events: the traffic
    that trims a run's log."""

    def filler(i: int) -> Awaitable[Any]:
        return store.audit(run_id, EventType.SIDE_EFFECT_REUSED, T0, f'{{"n":{i}}}')

    assert await at_once(filler, n) == [None] * n


async def history(store: Store, run_id: str, page: int = 1000) -> list[StoredEvent]:
    """Every event `events` gives, page by page."""
    found: list[StoredEvent] = []
    cursor = None
    while batch := await store.events(run_id, cursor, page):
        found += batch
        cursor = batch[-1].event_id
    return found


def refusal(n: int) -> str:
    return json.dumps({"actor": "sam", "action": "cancel", "n": n})


@async_checks
class BoundChecks:
    """A flood trims no audit event; mailboxes hold a bounded number of bytes."""

    # -- the audit trail -----------------------------------------------------------

    async def test_audit_events_stay_in_their_place_when_the_log_is_trimmed(
        self, store: Store
    ) -> None:
        cap = store.limits.max_events_per_run
        await store.create_run(new_run("r1", created_at=T0))
        assert await store.audit("r1", EventType.AUTH_DENIED, T0 + 1, refusal(0)) is None
        await fill(store, "r1", cap + 250)

        events = await history(store, "r1")

        assert [(e.type, e.at, e.data) for e in events[:2]] == [
            ("run.created", T0, None), ("auth.denied", T0 + 1, refusal(0)),
        ]  # fmt: skip
        fillers = [json.loads(e.data or "")["n"] for e in events[2:]]
        # the log was trimmed (the oldest traffic is gone), to about its cap
        assert cap <= len(fillers) < cap + 250
        assert 0 not in fillers and len(set(fillers)) == len(fillers)
        # a cursor walks the same history, whatever the page
        assert await history(store, "r1", page=7) == events
        assert await store.events("r1", events[0].event_id, 1) == events[1:2]

    async def test_the_trail_keeps_every_change_and_the_first_refusals(self, store: Store) -> None:
        cap, most = store.limits.max_events_per_run, store.limits.max_refusals_per_run
        await store.create_run(new_run("r1", created_at=T0))
        for n in range(most + 10):  # one by one: which come first matters here
            assert await store.audit("r1", EventType.AUTH_DENIED, T0 + 1, refusal(n)) is None
        await fill(store, "r1", cap + 250)
        # a change after the trail holds its refusals is still kept
        assert await store.cancel("r1", "enough", T0 + 2, event_data='{"actor":"ada"}') is None
        await fill(store, "r1", cap + 250)

        audit = [e for e in await history(store, "r1") if e.type != "side_effect.reused"]

        kinds = [e.type for e in audit]
        assert kinds[0] == "run.created" and kinds[-1] == "run.canceled"
        kept = sorted(json.loads(e.data or "")["n"] for e in audit if e.type == "auth.denied")
        # the first refusals stay (no flood erases one); the bound stops the rest
        assert most - 1 <= len(kept) <= most
        assert kept == list(range(len(kept)))
        assert audit[-1].data == '{"actor":"ada"}'

    # -- mailboxes -----------------------------------------------------------------

    async def test_a_message_over_max_message_bytes_is_refused_and_writes_nothing(
        self, store: Store
    ) -> None:
        most = store.limits.max_message_bytes
        await store.create_run(new_run("r1"))
        before = await seen(store, "r1")

        too_big = '"' + "x" * (most - 1) + '"'
        refused = await store.signal("r1", FLOOD, too_big, "d-1", now=T0, event_data="{}")

        assert refused == Refused(Refusal.TOO_LARGE, size=most + 1, limit=most)
        assert await seen(store, "r1") == before
        # exactly at the bound is fine; a refused dedup id was not kept
        assert await store.signal("r1", FLOOD, '"' + "x" * (most - 2) + '"', "d-1") is True

    async def test_a_run_holds_at_most_max_pending_messages(self, store: Store) -> None:
        most = store.limits.max_pending_messages
        claim = await start_and_claim(store, "r1")
        sent = await at_once(lambda n: store.signal("r1", FLOOD, str(n), f"d-{n}"), most)
        assert sent == [True] * most
        before = await seen(store, "r1")

        refused = await store.signal("r1", FLOOD, "1", None)

        assert refused == Refused(Refusal.FULL, detail="messages", size=most + 1, limit=most)
        assert await seen(store, "r1") == before
        # a repeated dedup id is still answered as one; a child's outcome still arrives
        assert await store.signal("r1", FLOOD, "0", "d-0") is False
        assert await store.signal("r1", CHILD, '{"status":"completed"}', "~child:c-1") is True
        # what the flow takes makes room again, one message each
        outcome = await consume(store, "r1", claim.run.fence, key="~wait:flood#1", mailbox=FLOOD)
        # (sent together: they may have arrived in any order)
        assert outcome[0] is Consumed.SIGNAL and outcome[1] in {str(n) for n in range(most)}
        assert await store.signal("r1", FLOOD, "again", None) is True
        assert isinstance(await store.signal("r1", FLOOD, "1", None), Refused)

    async def test_a_run_holds_at_most_max_pending_bytes(self, store: Store) -> None:
        limits = store.limits
        size = min(limits.max_message_bytes, limits.max_pending_bytes)
        count = limits.max_pending_bytes // size
        if count >= limits.max_pending_messages:
            pytest.skip("this store's bound on messages is reached before its bound on bytes")
        await store.create_run(new_run("r1"))
        body = '"' + "x" * (size - 2) + '"'
        assert await at_once(lambda _: store.signal("r1", FLOOD, body, None), count)
        held = count * size
        before = await seen(store, "r1")

        extra = limits.max_pending_bytes - held + 1
        refused = await store.signal("r1", FLOOD, "1" * extra, None)

        assert refused == Refused(
            Refusal.FULL, detail="bytes", size=limits.max_pending_bytes + 1,
            limit=limits.max_pending_bytes,
        )  # fmt: skip
        assert await seen(store, "r1") == before

    async def test_a_decision_is_bounded_by_its_size_only(self, store: Store) -> None:
        most = store.limits.max_pending_messages
        claim = await start_and_claim(store, "r1")
        await at_once(lambda n: store.signal("r1", FLOOD, str(n), None), most)
        parked = await store.suspend(
            "r1", claim.run.fence, T0, None, RunStatus.WAITING_FOR_HUMAN, [], [OK_BOX]
        )
        assert parked is Parked.PARKED
        big = '"' + "x" * store.limits.max_message_bytes + '"'

        too_big = await store.signal("r1", OK_BOX, big, None, decision_by="ann")
        assert isinstance(too_big, Refused) and too_big.why is Refusal.TOO_LARGE
        # the run waits for it: a decision never piles up, so the flood does not stop it
        assert await store.signal("r1", OK_BOX, "true", None, decision_by="ann") is True

    async def test_events_delivered_count_against_the_bounds_until_the_wait_ends(
        self, store: Store
    ) -> None:
        most = store.limits.max_pending_messages
        claim = await start_and_claim(store, "r1")
        assert await listen(store, "r1", claim.run.fence) == (Consumed.EMPTY, None)
        sent = await at_once(lambda n: deliver(store, "r1", str(n), f"e-{n}"), most)
        assert sent == [EventDelivered.DELIVERED] * most

        refused = await deliver(store, "r1", "1", "e-full")

        assert refused == Refused(Refusal.FULL, detail="messages", size=most + 1, limit=most)
        # the wait takes one and stops listening: what was left goes, and with it its count
        taken, payload = await listen(store, "r1", claim.run.fence)
        assert taken is Consumed.SIGNAL and payload in {str(n) for n in range(most)}
        assert await listen(store, "r1", claim.run.fence, key="~event:paid#2") == (
            Consumed.EMPTY, None,
        )  # fmt: skip
        assert await store.event_listeners([WATCH.token]) == [(WATCH.token, "r1")]
        assert await deliver(store, "r1", "1", "e-after") is EventDelivered.DELIVERED
        assert BOX.name.startswith("~event:")  # events are bounded as signals are
