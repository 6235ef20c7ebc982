"""Events matched by key: a consumed ``wait_for_event`` listens on its filter's
index until it takes an event or times out; deliveries are per run and deduplicated."""

from __future__ import annotations

from sdk.store import Consumed, EventDelivered, EventWatch, Mailbox, RunStatus, Store
from testing.conformance._support import (
    T0,
    async_checks,
    start_and_claim,
    types_of,
    wait_record,
    wait_timeout,
)

WATCH = EventWatch("paid", '["order_id"]', "token-o1")
BOX = Mailbox("~event:token-o1")
KEY = "~event:paid#1"


async def listen(
    store: Store, run_id: str, fence: int, *, key: str = KEY, deadline: float | None = None,
    now: float = T0,
) -> tuple[Consumed, str | None]:  # fmt: skip
    """The consume of a ``wait_for_event`` (it starts listening, then takes or not)."""
    return await store.consume(
        run_id, fence, key, BOX, now, deadline, wait_record(key, 0),
        wait_timeout(key, 0, deadline or 0.0), watch=WATCH,
    )  # fmt: skip


async def deliver(store: Store, run_id: str, payload: str, dedup: str) -> object:
    return await store.deliver_event(
        run_id, WATCH.token, BOX, payload, dedup, now=T0, event_data='{"name":"paid"}'
    )


@async_checks
class EventChecks:
    """`consume` with an `EventWatch`, `event_shapes`, `event_listeners`, `deliver_event`."""

    async def test_a_listening_wait_is_found_by_its_token_and_gets_the_event(
        self, store: Store
    ) -> None:
        claim = await start_and_claim(store, "r1")
        assert await listen(store, "r1", claim.run.fence) == (Consumed.EMPTY, None)
        assert await store.event_shapes("paid") == {WATCH.shape}
        assert await store.event_listeners([WATCH.token, "other"]) == [(WATCH.token, "r1")]

        assert await deliver(store, "r1", '{"n":1}', "e-1") is EventDelivered.DELIVERED
        assert await deliver(store, "r1", '{"n":1}', "e-1") is EventDelivered.DUPLICATE
        assert await deliver(store, "r1", '{"n":2}', "e-2") is EventDelivered.DELIVERED
        assert (await types_of(store, "r1")).count("event.delivered") == 2

        assert await listen(store, "r1", claim.run.fence) == (Consumed.SIGNAL, '{"n":1}')
        # it took one and stopped listening: the rest is dropped, the index left
        assert await store.event_listeners([WATCH.token]) == []
        assert await listen(store, "r1", claim.run.fence, key="~event:paid#2") == (
            Consumed.EMPTY, None,
        )  # fmt: skip

    async def test_a_run_that_does_not_listen_gets_nothing(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        assert await deliver(store, "r1", "1", "e-1") is EventDelivered.NOT_LISTENING
        assert await deliver(store, "nobody", "1", "e-1") is EventDelivered.NOT_LISTENING
        assert await listen(store, "r1", claim.run.fence) == (Consumed.EMPTY, None)
        await store.finish("r1", claim.run.fence, RunStatus.COMPLETED, T0, result="null")
        # an index entry of a finished run is dropped when a delivery finds it
        assert await deliver(store, "r1", "1", "e-2") is EventDelivered.NOT_LISTENING
        assert await store.event_listeners([WATCH.token]) == []

    async def test_a_timed_out_wait_stops_listening(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        assert await listen(store, "r1", claim.run.fence, deadline=T0 + 5) == (
            Consumed.EMPTY, None,
        )  # fmt: skip
        assert await listen(store, "r1", claim.run.fence, deadline=T0 + 5, now=T0 + 5) == (
            Consumed.TIMEOUT, None,
        )  # fmt: skip
        assert await store.event_listeners([WATCH.token]) == []
        assert await deliver(store, "r1", "1", "e-1") is EventDelivered.NOT_LISTENING
