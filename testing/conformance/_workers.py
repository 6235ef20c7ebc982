"""The registry of live workers: `beat`, `workers`, `forget_worker`."""

from __future__ import annotations

from sdk.store import Store, WorkerBeat
from testing.conformance._support import T0, TTL, async_checks


def beat(worker_id: str, at: float, **changes: object) -> WorkerBeat:
    fields: dict[str, object] = {
        "worker_id": worker_id, "host": "host-1", "pid": 4242, "flows": ("a", "b"),
        "queues": None, "concurrency": 8, "in_flight": 0, "started_at": T0,
        "beat_at": at, "expires_at": at + TTL,
    }  # fmt: skip
    fields.update(changes)
    return WorkerBeat(**fields)  # type: ignore[arg-type]


@async_checks
class WorkerChecks:
    """A worker is listed from its first beat until it is forgotten or its beat expires."""

    async def test_no_worker_is_listed_on_an_empty_store(self, store: Store) -> None:
        assert await store.workers(T0) == []

    async def test_a_beat_lists_the_worker_as_it_was_sent(self, store: Store) -> None:
        sent = beat("w-1", T0, queues=("default", "bulk"), flows=("ünïcode", "b"))
        await store.beat(sent)

        assert await store.workers(T0 + 1) == [sent]

    async def test_a_new_beat_replaces_the_previous_one(self, store: Store) -> None:
        await store.beat(beat("w-1", T0))
        latest = beat("w-1", T0 + 3, in_flight=5)
        await store.beat(latest)

        assert await store.workers(T0 + 4) == [latest]

    async def test_a_beat_expires_at_its_expiry_and_a_renewal_extends_it(
        self, store: Store
    ) -> None:
        await store.beat(beat("w-1", T0))
        await store.beat(beat("w-2", T0))
        await store.beat(beat("w-2", T0 + TTL / 2))

        alive = await store.workers(T0 + TTL)  # w-1's registration ended
        assert [w.worker_id for w in alive] == ["w-2"]
        assert await store.workers(T0 + TTL + TTL / 2) == []

    async def test_forget_drops_only_that_worker(self, store: Store) -> None:
        await store.beat(beat("w-1", T0))
        await store.beat(beat("w-2", T0))

        await store.forget_worker("w-1")
        await store.forget_worker("never-registered")  # no error

        assert [w.worker_id for w in await store.workers(T0)] == ["w-2"]

    async def test_an_expired_worker_that_beats_again_is_listed_again(self, store: Store) -> None:
        await store.beat(beat("w-1", T0))
        assert await store.workers(T0 + 2 * TTL) == []  # read after it expired

        await store.beat(beat("w-1", T0 + 2 * TTL))
        assert [w.worker_id for w in await store.workers(T0 + 2 * TTL)] == ["w-1"]
