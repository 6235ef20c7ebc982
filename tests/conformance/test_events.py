"""The event log, checkpoints and the live feed, at the store protocol.

Every transition script appends its own event (and checkpoint) in the same
round trip; event data is JSON made by the client and must come back exactly
as it was passed (Lua never decodes it: real cjson would round big numbers).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sdk._types import RunStatus
from sdk.errors import LeaseLost
from stores._protocol import RawEvent, StepEvent
from stores.redis import RedisStore
from tests.conformance._support import (
    OWNER,
    T0,
    TTL,
    new_run,
    start_and_claim,
    step_record,
    wait_prefix,
    wait_timeout,
)

# JSON that a Lua round trip through cjson would change: unicode, an integer
# beyond 2^53, a float with 17 significant digits, an empty list, a null.
TRICKY = json.dumps(
    {"note": "héllo ✓ 🚀 \"quoted\" \\ back", "big": 2**64 + 1, "float": 0.1 + 0.2,
     "empty": [], "nothing": None, "nested": {"list": [1, "two", 3.5]}},
    ensure_ascii=False, separators=(",", ":"),
)  # fmt: skip


async def events(store: RedisStore, run_id: str) -> list[RawEvent]:
    return await store.events(run_id, None, 10_000)


async def types(store: RedisStore, run_id: str) -> list[str]:
    return [e.fields["type"] for e in await events(store, run_id)]


async def run_field(store: RedisStore, run_id: str, field: str) -> Any:
    return await store.client.hget(store.keys.run(run_id), field)


# -- record and mark -------------------------------------------------------------------


async def test_create_run_appends_run_created_with_its_data(store: RedisStore) -> None:
    await store.create_run(new_run("r1", queue="billing", priority=-3, created_at=T0 + 1))

    (ev,) = await events(store, "r1")

    assert ev.run_id == "r1"
    assert ev.fields["type"] == "run.created"
    assert float(ev.fields["at"]) == T0 + 1
    assert "step" not in ev.fields
    assert json.loads(ev.fields["data"]) == {"flow": "tests.flow", "queue": "billing",
                                             "priority": -3}  # fmt: skip


async def test_the_first_claim_appends_run_started_and_the_run_started_checkpoint(
    store: RedisStore,
) -> None:
    await store.create_run(new_run("r1"))

    await store.claim(OWNER, None, 1, T0 + 5, TTL)

    assert await types(store, "r1") == ["run.created", "run.started"]
    (cp,) = await store.checkpoints("r1")
    assert cp == {"id": "1", "kind": "run_started", "step": "", "status": "running",
                  "at": repr(T0 + 5), "seq": "0"}  # fmt: skip
    assert await run_field(store, "r1", "cp_n") == "1"


async def test_record_with_a_step_event_writes_event_and_checkpoint_in_one_round_trip(
    store: RedisStore, sent: list[str]
) -> None:
    claim = await start_and_claim(store, "r1")
    await store.record("r1", claim.run.fence, "~now#1", step_record("~now#1", 0), now=T0)
    sent.clear()  # the script is loaded by now

    await store.record(
        "r1", claim.run.fence, "s#1", step_record("s#1", 1, 42), now=T0 + 2,
        event=StepEvent("step.completed", "", "step_completed"),
    )  # fmt: skip

    assert sent == ["EVALSHA"]
    last = (await events(store, "r1"))[-1]
    assert last.fields == {"type": "step.completed", "at": repr(T0 + 2), "step": "s#1"}
    cps = await store.checkpoints("r1")
    assert [c["kind"] for c in cps] == ["run_started", "step_completed"]
    assert cps[1] == {"id": "2", "kind": "step_completed", "step": "s#1", "status": "running",
                      "at": repr(T0 + 2), "seq": "2"}  # fmt: skip
    assert await run_field(store, "r1", "cp_n") == "2"


async def test_a_checkpoint_counts_the_journal_writes_it_covers(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")
    completed = StepEvent("step.completed", "", "step_completed")
    await store.record("r1", claim.run.fence, "~now#1", step_record("~now#1", 0), now=T0)
    await store.record("r1", claim.run.fence, "s#1", step_record("s#1", 1), now=T0, event=completed)
    await store.record("r1", claim.run.fence, "~uuid4#1", step_record("~uuid4#1", 2), now=T0)
    await store.record("r1", claim.run.fence, "s#2", step_record("s#2", 3), now=T0, event=completed)

    cps = await store.checkpoints("r1")

    assert [(c["id"], c["step"], c["seq"]) for c in cps] == [
        ("1", "", "0"), ("2", "s#1", "2"), ("3", "s#2", "4"),
    ]  # fmt: skip


async def test_record_with_an_event_but_no_checkpoint_kind_takes_no_checkpoint(
    store: RedisStore,
) -> None:
    claim = await start_and_claim(store, "r1")
    data = json.dumps({"type": "builtins:ValueError", "message": "nope", "reason": "step_failed"})

    await store.record(
        "r1", claim.run.fence, "s#1", step_record("s#1", 0), now=T0 + 1,
        event=StepEvent("step.failed", data),
    )  # fmt: skip

    last = (await events(store, "r1"))[-1]
    assert last.fields == {"type": "step.failed", "at": repr(T0 + 1), "step": "s#1", "data": data}
    assert [c["kind"] for c in await store.checkpoints("r1")] == ["run_started"]
    assert await run_field(store, "r1", "cp_n") == "1"


async def test_record_without_an_event_appends_nothing(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")

    await store.record("r1", claim.run.fence, "~now#1", step_record("~now#1", 0), now=T0)

    assert await types(store, "r1") == ["run.created", "run.started"]
    assert len(await store.checkpoints("r1")) == 1


async def test_a_refused_record_appends_no_event_and_no_checkpoint(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")

    with pytest.raises(LeaseLost):
        await store.record(
            "r1", claim.run.fence + 1, "s#1", step_record("s#1", 0), now=T0,
            event=StepEvent("step.completed", "", "step_completed"),
        )  # fmt: skip

    assert await types(store, "r1") == ["run.created", "run.started"]
    assert len(await store.checkpoints("r1")) == 1


async def test_mark_appends_step_started_and_its_checkpoint_in_one_round_trip(
    store: RedisStore, sent: list[str]
) -> None:
    claim = await start_and_claim(store, "r1")
    await store.mark("r1", claim.run.fence, "warm-up#1", T0)
    sent.clear()  # the script is loaded by now

    await store.mark("r1", claim.run.fence, "s#1", T0 + 3)

    assert sent == ["EVALSHA"]
    last = (await events(store, "r1"))[-1]
    assert last.fields == {"type": "step.started", "at": repr(T0 + 3), "step": "s#1"}
    cp = (await store.checkpoints("r1"))[-1]
    assert (cp["id"], cp["kind"], cp["step"], cp["status"]) == ("3", "step_started", "s#1",
                                                                "running")  # fmt: skip
    assert await run_field(store, "r1", "cp_n") == "3"
    assert await store.client.hget(store.keys.journal("r1"), "s#1") is None


async def test_mark_with_a_stale_fence_raises_lease_lost_and_writes_nothing(
    store: RedisStore,
) -> None:
    claim = await start_and_claim(store, "r1")

    with pytest.raises(LeaseLost):
        await store.mark("r1", claim.run.fence - 1, "s#1", T0)

    assert await types(store, "r1") == ["run.created", "run.started"]
    assert len(await store.checkpoints("r1")) == 1


# -- event data passes through verbatim ------------------------------------------------


async def test_finish_passes_its_event_data_through_verbatim(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")

    await store.finish(
        "r1", claim.run.fence, RunStatus.FAILED, T0 + 4, {"error": TRICKY, "reason": "flow_error"},
        event_data=TRICKY,
    )  # fmt: skip

    last = (await events(store, "r1"))[-1]
    assert last.fields == {"type": "run.failed", "at": repr(T0 + 4), "data": TRICKY}
    cp = (await store.checkpoints("r1"))[-1]
    assert (cp["kind"], cp["status"], cp["at"]) == ("run_finished", "failed", repr(T0 + 4))


async def test_finish_completed_appends_run_completed_and_run_finished(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")

    await store.finish("r1", claim.run.fence, RunStatus.COMPLETED, T0 + 1, {"result": "1"})

    assert await types(store, "r1") == ["run.created", "run.started", "run.completed"]
    assert [(c["kind"], c["status"]) for c in await store.checkpoints("r1")] == [
        ("run_started", "running"), ("run_finished", "completed"),
    ]  # fmt: skip


async def test_cancel_passes_its_event_data_through_verbatim(store: RedisStore) -> None:
    await store.create_run(new_run("r1"))

    await store.cancel("r1", "operator said so", T0 + 6, event_data=TRICKY)

    last = (await events(store, "r1"))[-1]
    assert last.fields == {"type": "run.canceled", "at": repr(T0 + 6), "data": TRICKY}
    (cp,) = await store.checkpoints("r1")  # never started: only the finish
    assert (cp["id"], cp["kind"], cp["status"]) == ("1", "run_finished", "canceled")


async def test_signal_passes_its_event_data_through_verbatim(store: RedisStore) -> None:
    await store.create_run(new_run("r1"))

    assert await store.signal("r1", "s:go", "1", "d-1", now=T0 + 7, event_data=TRICKY)

    last = (await events(store, "r1"))[-1]
    assert last.fields == {"type": "signal.received", "at": repr(T0 + 7), "data": TRICKY}


async def test_a_duplicate_signal_appends_no_second_event(store: RedisStore) -> None:
    await store.create_run(new_run("r1"))
    await store.signal("r1", "s:go", "1", "d-1", now=T0, event_data="{}")

    assert not await store.signal("r1", "s:go", "1", "d-1", now=T0, event_data="{}")

    assert await types(store, "r1") == ["run.created", "signal.received"]


async def test_resume_passes_its_event_data_through_verbatim(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")
    await store.finish("r1", claim.run.fence, RunStatus.FAILED, T0, {"error": "{}"})

    await store.resume("r1", None, now=T0 + 8, event_data=TRICKY)

    last = (await events(store, "r1"))[-1]
    assert last.fields == {"type": "run.resumed", "at": repr(T0 + 8), "data": TRICKY}


async def test_resume_of_a_failed_run_points_before_its_finish(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")
    await store.record(
        "r1", claim.run.fence, "s#1", step_record("s#1", 0), now=T0,
        event=StepEvent("step.completed", "", "step_completed"),
    )  # fmt: skip
    await store.finish("r1", claim.run.fence, RunStatus.FAILED, T0, {"error": "{}"})
    assert await run_field(store, "r1", "cp_n") == "3"

    await store.resume("r1", None, now=T0)

    stored = await store.get_run("r1")
    assert stored is not None
    assert stored.record.resume_from_checkpoint_id == "2"
    assert stored.record.checkpoint_head == "3"  # resuming takes no checkpoint


async def test_consume_appends_wait_completed_or_wait_timed_out(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")
    await store.signal("r1", "s:go", '"hi"', "d-1", now=T0, event_data="{}")

    code, _ = await store.consume(
        "r1", claim.run.fence, "~wait:go#1", "s:go", T0 + 1, None,
        wait_prefix("~wait:go#1", 0), wait_timeout("~wait:go#1", 0, 0.0),
    )  # fmt: skip
    assert code == 1
    code, _ = await store.consume(
        "r1", claim.run.fence, "~wait:go#2", "s:go", T0 + 2, T0 + 2,
        wait_prefix("~wait:go#2", 1), wait_timeout("~wait:go#2", 1, T0 + 2),
    )  # fmt: skip
    assert code == 2

    tail = [
        (e.fields["type"], e.fields.get("step"), e.fields["at"]) for e in await events(store, "r1")
    ]
    assert tail[-2:] == [("wait.completed", "~wait:go#1", repr(T0 + 1)),
                         ("wait.timed_out", "~wait:go#2", repr(T0 + 2))]  # fmt: skip


async def test_suspend_appends_the_waiting_event_and_checkpoint(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")

    parked = await store.suspend(
        "r1", claim.run.fence, T0 + 1, None, RunStatus.WAITING_FOR_HUMAN, [], ["h:ok"]
    )

    assert parked
    assert (await types(store, "r1"))[-1] == "run.waiting_for_human"
    cp = (await store.checkpoints("r1"))[-1]
    assert (cp["kind"], cp["status"], cp["step"]) == ("waiting_for_human", "waiting_for_human", "")


async def test_suspend_that_requeues_for_a_signal_already_there_takes_no_checkpoint(
    store: RedisStore,
) -> None:
    claim = await start_and_claim(store, "r1")
    await store.signal("r1", "s:go", "1", "d-1", now=T0, event_data="{}")

    parked = await store.suspend(
        "r1", claim.run.fence, T0 + 1, None, RunStatus.WAITING_FOR_SIGNAL, [], ["s:go"]
    )

    assert not parked
    assert await types(store, "r1") == ["run.created", "run.started", "signal.received"]
    assert [c["kind"] for c in await store.checkpoints("r1")] == ["run_started"]


async def test_a_lease_expiry_appends_run_lease_expired(store: RedisStore) -> None:
    await start_and_claim(store, "r1")

    assert (await store.tick(T0 + TTL + 1, 10, "{}")).recovered == 1

    last = (await events(store, "r1"))[-1]
    assert last.fields == {"type": "run.lease_expired", "at": repr(T0 + TTL + 1)}
    assert [c["kind"] for c in await store.checkpoints("r1")] == ["run_started"]


async def test_exceeding_max_recoveries_appends_run_failed_and_run_finished(
    store: RedisStore,
) -> None:
    await start_and_claim(store, "r1")
    error = json.dumps({"type": "x:Y", "message": "too many", "reason": "max_recoveries_exceeded"})

    assert (await store.tick(T0 + TTL + 1, 0, error)).recovered == 1

    last = (await events(store, "r1"))[-1]
    assert last.fields == {"type": "run.failed", "at": repr(T0 + TTL + 1), "data": error}
    cp = (await store.checkpoints("r1"))[-1]
    assert (cp["kind"], cp["status"]) == ("run_finished", "failed")


# -- reading: pages and checkpoints ------------------------------------------------------


async def test_events_pages_are_exclusive_of_the_cursor(store: RedisStore) -> None:
    await store.create_run(new_run("r1"))
    for i in range(9):
        await store.signal("r1", "s:go", "1", f"d-{i}", now=T0 + i, event_data=f'{{"i":{i}}}')

    seen: list[RawEvent] = []
    cursor = None
    while page := await store.events("r1", cursor, 4):
        assert len(page) <= 4
        seen += page
        cursor = page[-1].event_id

    assert seen == await events(store, "r1")
    assert len({e.event_id for e in seen}) == 10


async def test_events_and_checkpoints_of_an_unknown_run_are_empty(store: RedisStore) -> None:
    assert await store.events("nope", None, 10) == []
    assert await store.checkpoints("nope") == []


# -- the live feed -------------------------------------------------------------------------

# Short blocking reads: these calls are expected to time out when nothing lands.
POLL = 0.05


async def test_follow_from_now_skips_nothing_that_lands_between_two_calls(
    store: RedisStore,
) -> None:
    await store.create_run(new_run("before"))  # history: never delivered

    first, sub = await store.follow(None, POLL, 100)  # subscribes
    try:
        assert first == []
        await store.create_run(new_run("between"))  # lands after the first call returned
        second, sub = await store.follow(sub, POLL, 100)
    finally:
        await store.unfollow(sub)

    assert [(e.run_id, e.fields["type"]) for e in second] == [("between", "run.created")]


async def test_follow_delivers_every_event_once_in_order(store: RedisStore) -> None:
    _, sub = await store.follow(None, POLL, 100)
    try:
        await store.create_run(new_run("r1", tenant_id="acme"))
        await store.claim(OWNER, None, 1, T0, TTL)
        await store.create_run(new_run("r2"))

        got: list[RawEvent] = []
        for _ in range(3):
            batch, sub = await store.follow(sub, POLL, 2)
            got += batch
        await store.cancel("r2", "stop", T0 + 1, event_data='{"why":"déjà vu"}')
        batch, sub = await store.follow(sub, POLL, 100)
        got += batch
        again, sub = await store.follow(sub, POLL, 100)
    finally:
        await store.unfollow(sub)

    assert [(e.run_id, e.fields["type"]) for e in got] == [
        ("r1", "run.created"), ("r1", "run.started"), ("r2", "run.created"),
        ("r2", "run.canceled"),
    ]  # fmt: skip
    assert again == []
    assert got[3].fields["data"] == '{"why":"déjà vu"}'  # byte-length framing, not chars
    # Each carries the run's own event id; correlation ids are looked up per run.
    r1 = await events(store, "r1")
    assert [e.event_id for e in got[:2]] == [e.event_id for e in r1]
    assert await store.correlation(["r1", "r2", "unknown"]) == {
        "r1": ("r1", "acme"),
        "r2": ("r2", None),
    }
