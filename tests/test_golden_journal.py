"""Golden journals: records written by earlier format versions must keep decoding and replaying.

``tests/golden/*.json`` hold the journal of one run of `golden_order` (the
Redis hash ``step key -> record JSON``, as stored) at three moments: parked on
a retry backoff, parked on a wait, and completed. They were written by the
code of format version 1 and must never be edited: a later version has to
read them (upgrading on read) and replay them without re-running a recorded
step. ``journal_v1_unversioned_complete.json`` was written by the first
commit, whose records left out their (default) ``"v"``: a record without one
is format 1. To add golden files for a new format, run
``python -m tests.test_golden_journal SUFFIX`` (e.g. ``v2``) and commit the
new files next to the old ones.

Format 2 (``journal_v2_*``) adds each outcome's delivery round (``"r"``);
format 1 records have none and replay each outcome as soon as it is called.

The recorded values avoid type paths of this test module (declared types are
used instead), so the files do not depend on how pytest names test modules.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import uuid
from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest

from sdk import (
    Decision,
    RetryPolicy,
    RunStatus,
    current_step,
    flow,
    now,
    sleep,
    step,
    uuid4,
    wait_for,
)
from sdk._core._journal import Journal, Kind, Record, State
from sdk._core._serde import converter, dumps
from sdk.errors import WaitTimeout
from stores.redis import RedisStore
from testing import FakeClock, FlowTestEnv

GOLDEN = Path(__file__).parent / "golden"
FILES = (
    "v1_retry", "v1_waiting", "v1_complete", "v1_unversioned_complete",
    "v2_retry", "v2_waiting", "v2_complete",
)  # fmt: skip
COMPLETE = ("v1_complete", "v1_unversioned_complete", "v2_complete")
START = datetime(2030, 1, 1, 8, 0, tzinfo=UTC)

RUNS: Counter[str] = Counter()


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> None:
    RUNS.clear()


@attrs.frozen
class Quote:
    sku: str
    amount: Decimal


@dataclasses.dataclass(frozen=True)
class Line:
    sku: str
    quantity: int


@attrs.frozen
class Receipt:
    order_id: str
    started: datetime
    reference: uuid.UUID
    quote: Quote
    lines: list[Line]
    total: str
    pair: list[Any]
    rejected: str
    charged: str
    paid: Any
    approved_by: str | None
    timed_out: bool


@step
async def price(order_id: str) -> Quote:
    RUNS["price"] += 1
    return Quote(f"sku-{order_id}", Decimal("19.99"))


@step
async def lines_of(order_id: str) -> list[Line]:
    RUNS["lines_of"] += 1
    return [Line("a", 1), Line("b", 3)]


@step
async def total_of():  # type: ignore[no-untyped-def]  # unannotated: its type is recorded
    RUNS["total_of"] += 1
    return Decimal("79.96")


@step
async def pair_of():  # type: ignore[no-untyped-def]
    RUNS["pair_of"] += 1
    return (1, "one")


@step
async def reject(order_id: str) -> None:
    RUNS["reject"] += 1
    raise ValueError(f"order {order_id} has a bad coupon")


@step(retry=RetryPolicy(max_attempts=3, initial_interval=1.0))
async def charge(order_id: str) -> str:
    RUNS["charge"] += 1
    if current_step().attempt == 1:
        raise ConnectionError("gateway timeout")
    return f"ch_{order_id}"


@flow(name="tests.golden.order")
async def golden_order(order_id: str) -> Receipt:
    started = await now()
    reference = await uuid4()
    quote = await price(order_id)
    lines = await lines_of(order_id)
    total = await total_of()  # type: ignore[no-untyped-call]
    pair = await pair_of()  # type: ignore[no-untyped-call]
    try:
        await reject(order_id)
        rejected = ""
    except ValueError as exc:
        rejected = str(exc)
    charged = await charge(order_id)
    paid = await wait_for("paid")
    decision: Decision = await wait_for("approval", human=True)
    try:
        await wait_for("cancel", timeout=60)
        timed_out = False
    except WaitTimeout:
        timed_out = True
    await sleep(3600)
    return Receipt(
        order_id, started, reference, quote, lines, str(total), list(pair), rejected, charged,
        paid, decision.actor, timed_out,
    )  # fmt: skip


async def drive_to_the_end(env: FlowTestEnv, run_id: str) -> None:
    """The signal first (it is kept), the approval once the run waits for it (a decision
    needs a waiting run), then every timer in turn."""
    await env.client.signal(run_id, "paid", {"cents": 7996})
    await env.run_until_idle()
    for seconds in (1, 60, 3600):  # retry backoff, wait timeout, sleep
        await approve_if_waiting(env, run_id)
        await env.advance(seconds)


async def approve_if_waiting(env: FlowTestEnv, run_id: str) -> None:
    if (await env.client.get(run_id)).status is RunStatus.WAITING_FOR_HUMAN:
        await env.client.approve(run_id, "approval", actor="golden-reviewer")
        await env.run_until_idle()


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / f"journal_{name}.json").read_text())
    return data


async def inject(env: FlowTestEnv, run_id: str, journal: dict[str, str]) -> None:
    store = env.store
    assert isinstance(store, RedisStore)
    await store.client.hset(store.keys.journal(run_id), mapping=journal)  # type: ignore[arg-type]


# -- the files themselves --------------------------------------------------------------


@pytest.mark.parametrize("name", FILES)
def test_golden_records_decode_with_their_format(name: str) -> None:
    golden = load(name)
    version = golden["format_version"]
    assert version == int(name[1])
    journal = Journal.from_raw(golden["journal"])
    assert set(journal.by_key) == set(golden["journal"])
    for key, text in golden["journal"].items():
        rec = Record.from_json(text)
        assert rec.key == key
        assert rec.v == version
        assert json.loads(text).get("v", 1) == version
        # format 2 records its delivery rounds; format 1 replays outcomes as called
        assert (rec.r is not None) == (version >= 2 and rec.resolved)


def test_records_are_written_with_their_format_version() -> None:
    text = Record("a#1", 0, Kind.STEP, State.OK, value=1).to_json()
    assert json.loads(text)["v"] == 2  # written, not implied by a default
    for text in load("v1_complete")["journal"].values():
        assert json.loads(text)["v"] == 1


@pytest.mark.parametrize("name", FILES)
def test_golden_records_are_written_back_as_the_converter_writes_them(name: str) -> None:
    # Record.to_json is hand-written for speed: it must write what the
    # converter's hook writes (field order, omitted defaults, "v" always).
    for text in load(name)["journal"].values():
        rec = Record.from_json(text)
        assert rec.to_json() == dumps(converter.unstructure(rec))
        if rec.v == 2 and rec.kind is not Kind.WAIT:  # a wait's payload is spliced in
            assert rec.to_json() == text


def test_every_field_set_or_left_out_is_written_as_the_converter_writes_it() -> None:
    full = Record(
        "a#1", 3, Kind.STEP, State.RETRY, value={"x": [1, "é"]}, type="m:T",
        error={"type": "builtins:ValueError", "message": "no"}, reason="step_failed",
        attempts=2, due=12.5, rh="abc", r=4,
    )  # fmt: skip
    bare = Record("~now#1", 0, Kind.NOW, State.OK)
    falsy = Record("b#1", 1, Kind.WAIT, State.TIMEOUT, value=0, type="", due=0.0, rh="", r=0)
    for rec in (full, bare, falsy):
        assert rec.to_json() == dumps(converter.unstructure(rec)), rec


@pytest.mark.parametrize("name", COMPLETE)
def test_golden_complete_journal_holds_every_kind_of_record(name: str) -> None:
    journal = Journal.from_raw(load(name)["journal"])
    rec = journal.by_key
    assert [journal.by_pos[p].key for p in range(len(rec))] == [
        "~now#1", "~uuid4#1", "price#1", "lines_of#1", "total_of#1", "pair_of#1", "reject#1",
        "charge#1", "~wait:paid#1", "~wait:approval#1", "~wait:cancel#1", "~sleep#1",
    ]  # fmt: skip
    assert (rec["~now#1"].kind, rec["~now#1"].value) == (Kind.NOW, START.isoformat())
    assert rec["~uuid4#1"].kind is Kind.UUID
    assert rec["price#1"].value == {"sku": "sku-o-1", "amount": "19.99"}
    assert (rec["total_of#1"].type, rec["total_of#1"].value) == ("decimal:Decimal", "79.96")
    assert rec["pair_of#1"].type == "builtins:tuple"
    failed = rec["reject#1"]
    assert (failed.state, failed.reason, failed.attempts) == (State.FAILED, "step_failed", 1)
    assert failed.error is not None and failed.error["type"] == "builtins:ValueError"
    assert (rec["charge#1"].state, rec["charge#1"].attempts) == (State.OK, 1)
    assert rec["~wait:paid#1"].value == {"cents": 7996}
    assert rec["~wait:approval#1"].value["actor"] == "golden-reviewer"
    assert rec["~wait:cancel#1"].state is State.TIMEOUT
    assert (rec["~sleep#1"].kind, rec["~sleep#1"].state) == (Kind.SLEEP, State.OK)


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_golden_snapshots_hold_the_parked_states(version: str) -> None:
    retry = Journal.from_raw(load(f"{version}_retry")["journal"]).by_key["charge#1"]
    assert (retry.state, retry.attempts) == (State.RETRY, 1)
    assert retry.due == START.timestamp() + 1
    assert retry.error is not None and retry.error["type"] == "builtins:ConnectionError"
    waiting = Journal.from_raw(load(f"{version}_waiting")["journal"]).by_key["~wait:paid#1"]
    assert (waiting.kind, waiting.state, waiting.due) == (Kind.WAIT, State.PENDING, None)


# -- replaying them ----------------------------------------------------------------


@pytest.mark.parametrize("name", COMPLETE)
async def test_a_golden_complete_journal_replays_without_running_a_step(
    store: RedisStore, name: str
) -> None:
    golden = load(name)
    async with FlowTestEnv(clock=FakeClock(START), store=store) as env:
        handle = await env.start(golden_order, *golden["args"], run_id="golden")
        await inject(env, handle.run_id, golden["journal"])
        await env.run_until_idle()  # no signal, no timer: everything is recorded
        result = await handle.result()
    assert RUNS == {}
    assert isinstance(result, Receipt)
    assert converter.unstructure(result) == golden["result"]


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("stage", ["retry", "waiting"])
async def test_a_golden_parked_journal_continues_to_the_same_result(
    stage: str, version: str
) -> None:
    golden = load(f"{version}_{stage}")
    expected = load(f"{version}_complete")["result"]
    async with FlowTestEnv(clock=FakeClock(START)) as env:
        handle = await env.start(golden_order, *golden["args"], run_id="golden")
        await inject(env, handle.run_id, golden["journal"])
        await drive_to_the_end(env, handle.run_id)
        result = await handle.result()
    assert converter.unstructure(result) == expected
    # Only what the snapshot had not recorded ran: the second charge attempt, if that.
    assert ({"charge": 1} if stage == "retry" else {}) == RUNS


# -- writing them (by hand, for a new format version) -------------------------------


async def regenerate(suffix: str) -> None:
    """Write ``journal_{suffix}_{stage}.json`` for the current format."""
    async with FlowTestEnv(clock=FakeClock(START)) as env:
        store = env.store
        assert isinstance(store, RedisStore)
        handle = await env.start(golden_order, "o-1", run_id="golden")

        async def snapshot(stage: str, **extra: Any) -> None:
            raw = await store.client.hgetall(store.keys.journal(handle.run_id))
            ordered = dict(sorted(raw.items(), key=lambda kv: Record.from_json(kv[1]).pos))
            data = {
                "format_version": Record("x", 0, Kind.STEP, State.OK).v,
                "flow": "tests.golden.order",
                "args": ["o-1"],
                "clock_start": START.isoformat(),
                "stage": stage,
                "journal": ordered,
                **extra,
            }
            path = GOLDEN / f"journal_{suffix}_{stage}.json"
            path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
            print("wrote", path)

        await env.run_until_idle()
        await snapshot("retry")
        await env.advance(1)
        await snapshot("waiting")
        await env.client.signal(handle.run_id, "paid", {"cents": 7996})
        await env.run_until_idle()
        await approve_if_waiting(env, handle.run_id)
        await env.advance(60)
        await env.advance(3600)
        result = await handle.result()
        await snapshot("complete", result=converter.unstructure(result))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.test_golden_journal SUFFIX  (e.g. v2; never overwrite v1)")
    asyncio.run(regenerate(sys.argv[1]))
