"""Fenced journal writes and consuming signals into the journal.

The payload cases are the ones real Redis's ``cjson`` gets wrong when a
script decodes JSON (``[]`` -> ``{}``, 14-digit rounding, truthy null): the
store must move payloads through verbatim.
"""

from __future__ import annotations

import json

import pytest

from sdk._journal import Kind, Record, State
from sdk._types import RunStatus
from sdk.errors import LeaseLost
from stores.redis import RedisStore
from tests.conformance._support import (
    T0,
    TTL,
    consume,
    journal_of,
    mailbox_key,
    new_run,
    start_and_claim,
    step_record,
    wait_prefix,
    wait_timeout,
)

PAYLOADS = [
    pytest.param("[]", id="empty-list"),
    pytest.param("{}", id="empty-object"),
    pytest.param("null", id="null"),
    pytest.param("false", id="false"),
    pytest.param("0", id="zero"),
    pytest.param('""', id="empty-string"),
    pytest.param('{"a":[],"b":{},"c":null,"d":[[{"e":[null,{}]}]]}', id="nested"),
    pytest.param(json.dumps("héllo ☃ 日本 \U0001f680", ensure_ascii=False), id="unicode"),
    pytest.param(json.dumps('\\u00e9 "quoted" \n'), id="escapes"),
    pytest.param("12345678901234567890", id="big-int"),
    pytest.param(json.dumps(0.1 + 0.2), id="float-17-digits"),
    pytest.param("-1.7976931348623157e+308", id="float-extreme"),
    pytest.param('[1,2.5,"x",true,null,[],{}]', id="mixed-list"),
]


async def test_record_with_current_fence_writes_the_journal(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")

    await store.record("r1", claim.run.fence, "a#1", step_record("a#1", 0, [1, 2]))

    assert await journal_of(store, "r1") == {"a#1": step_record("a#1", 0, [1, 2])}
    stored = await store.get_run("r1")
    assert stored is not None and stored.record.current_step_id == "a#1"


async def test_record_with_stale_fence_raises_lease_lost_and_writes_nothing(
    store: RedisStore,
) -> None:
    claim = await start_and_claim(store, "r1")

    with pytest.raises(LeaseLost):
        await store.record("r1", claim.run.fence - 1, "a#1", step_record("a#1", 0))
    with pytest.raises(LeaseLost):
        await store.record("r1", claim.run.fence + 1, "a#1", step_record("a#1", 0))

    assert await journal_of(store, "r1") == {}


async def test_record_on_a_run_that_is_not_running_raises_lease_lost(store: RedisStore) -> None:
    await store.create_run(new_run("r1"))  # pending, fence 0

    with pytest.raises(LeaseLost):
        await store.record("r1", 0, "a#1", step_record("a#1", 0))

    assert await journal_of(store, "r1") == {}


async def test_record_after_release_raises_lease_lost(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")
    await store.release("r1", claim.run.fence)

    with pytest.raises(LeaseLost):
        await store.record("r1", claim.run.fence, "a#1", step_record("a#1", 0))

    assert await journal_of(store, "r1") == {}


@pytest.mark.parametrize("payload", PAYLOADS)
async def test_consume_splices_the_payload_verbatim(store: RedisStore, payload: str) -> None:
    claim = await start_and_claim(store, "r1")
    assert await store.signal("r1", "s:go", payload, None) is True

    code, got = await consume(store, "r1", claim.run.fence)

    assert (code, got) == (1, payload)
    raw = (await journal_of(store, "r1"))["~wait:go#1"]
    assert raw == wait_prefix("~wait:go#1", 0) + payload + "}"
    rec = Record.from_json(raw)
    assert (rec.kind, rec.state) == (Kind.WAIT, State.OK)
    assert rec.value == json.loads(payload)
    assert type(rec.value) is type(json.loads(payload))
    # And the journal a later claim loads carries the same bytes.
    await store.release("r1", claim.run.fence)
    (again,) = await store.claim("worker-b", None, 1, T0, TTL)
    assert again.journal["~wait:go#1"] == raw


async def test_consume_takes_signals_fifo_per_mailbox(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")
    for payload in ("1", "2"):
        await store.signal("r1", "s:go", payload, None)
    await store.signal("r1", "s:other", '"x"', None)

    first = await consume(store, "r1", claim.run.fence, key="~wait:go#1")
    second = await consume(store, "r1", claim.run.fence, key="~wait:go#2")
    third = await consume(store, "r1", claim.run.fence, key="~wait:go#3")

    assert (first, second, third) == ((1, "1"), (1, "2"), (0, None))
    assert await store.client.llen(mailbox_key(store, "r1", "s:other")) == 1


async def test_consume_of_empty_mailbox_before_deadline_writes_nothing(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")

    assert await consume(store, "r1", claim.run.fence, deadline=T0 + 5) == (0, None)
    assert await consume(store, "r1", claim.run.fence, deadline=None) == (0, None)

    assert await journal_of(store, "r1") == {}


@pytest.mark.parametrize("late", [0.0, 0.001, 3600.0])
async def test_consume_at_or_after_deadline_records_a_timeout(
    store: RedisStore, late: float
) -> None:
    claim = await start_and_claim(store, "r1")
    deadline = T0 + 5

    code, got = await consume(store, "r1", claim.run.fence, now=deadline + late, deadline=deadline)

    assert (code, got) == (2, None)
    raw = (await journal_of(store, "r1"))["~wait:go#1"]
    assert raw == wait_timeout("~wait:go#1", 0, deadline)
    assert Record.from_json(raw).state is State.TIMEOUT


async def test_consume_prefers_a_waiting_signal_over_an_expired_deadline(
    store: RedisStore,
) -> None:
    claim = await start_and_claim(store, "r1")
    await store.signal("r1", "s:go", '{"late":true}', None)

    code, got = await consume(store, "r1", claim.run.fence, now=T0 + 60, deadline=T0 + 5)

    assert (code, got) == (1, '{"late":true}')


async def test_consume_with_stale_fence_raises_lease_lost_and_keeps_the_signal(
    store: RedisStore,
) -> None:
    claim = await start_and_claim(store, "r1")
    await store.signal("r1", "s:go", "1", None)

    with pytest.raises(LeaseLost):
        await consume(store, "r1", claim.run.fence - 1)

    assert await journal_of(store, "r1") == {}
    assert await store.client.lrange(mailbox_key(store, "r1", "s:go"), 0, -1) == ["1"]
    stored = await store.get_run("r1")
    assert stored is not None and stored.record.status is RunStatus.RUNNING
