"""A connection retry can run a script twice (its first reply lost): no harm done."""

from __future__ import annotations

from sdk import Client
from sdk._journal import Kind, Record, State
from stores.redis import RedisStore
from tests.conformance._support import T0, journal_of, mailbox_key, start_and_claim


def _consume_args(key: str, deadline: float | None) -> tuple[str, str]:
    return (
        Record(key, 0, Kind.WAIT, State.OK).splice_prefix(),
        Record(key, 0, Kind.WAIT, State.TIMEOUT, due=deadline).to_json(),
    )


async def test_consume_run_twice_returns_the_same_signal_and_keeps_the_next(
    store: RedisStore,
) -> None:
    claim = await start_and_claim(store, "r1")
    await store.signal("r1", "s:go", '{"n":1}', None)
    await store.signal("r1", "s:go", '{"n":2}', None)
    prefix, timeout = _consume_args("~wait:go#1", None)
    first = await store.consume(
        "r1", claim.run.fence, "~wait:go#1", "s:go", T0, None, prefix, timeout
    )
    again = await store.consume(
        "r1", claim.run.fence, "~wait:go#1", "s:go", T0, None, prefix, timeout
    )
    assert first == again == (1, '{"n":1}')
    assert await store.client.lrange(mailbox_key(store, "r1", "s:go"), 0, -1) == ['{"n":2}']
    assert Record.from_json((await journal_of(store, "r1"))["~wait:go#1"]).value == {"n": 1}


async def test_consume_run_twice_after_a_timeout_times_out_again(store: RedisStore) -> None:
    claim = await start_and_claim(store, "r1")
    prefix, timeout = _consume_args("~wait:go#1", T0)
    first = await store.consume(
        "r1", claim.run.fence, "~wait:go#1", "s:go", T0, T0, prefix, timeout
    )
    await store.signal("r1", "s:go", '"late"', None)
    again = await store.consume(
        "r1", claim.run.fence, "~wait:go#1", "s:go", T0, T0, prefix, timeout
    )
    assert first == again == (2, None)
    assert await store.client.llen(mailbox_key(store, "r1", "s:go")) == 1


async def test_client_signal_without_dedup_id_is_delivered_once_per_call(
    store: RedisStore,
) -> None:
    await start_and_claim(store, "r1")
    client = Client(store)
    assert await client.signal("r1", "go", 1) is True
    assert await client.signal("r1", "go", 2) is True
    assert await store.client.lrange(mailbox_key(store, "r1", "s:go"), 0, -1) == ["1", "2"]
