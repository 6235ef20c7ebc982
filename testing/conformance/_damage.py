"""Damaged data: keys that hold what the store cannot work with (issue 30).

These checks break a store's data by hand, as a hand edit or a partial restore
would, which the protocol has no call for: through the fixture ``damage`` (a
`Damage`). The kit gives one for the Redis store and the stores built on it
(Redis Cluster, the embedded server); for a store of yours, override the
fixture in your subclass, or these checks skip.

What they pin: a key of one run that its wake-up needs fails that run (it would
wait forever), a key that runs share raises `CorruptIndex` naming it with
nothing written and is rebuilt by a tick when it can be (the FIFO counter, our
own bookkeeping, starts over at once), and reads name the damaged key
(`CorruptData`, `CorruptIndex`), never a raw error.
"""

from __future__ import annotations

from typing import Protocol

import pytest

from sdk.store import (
    CorruptData,
    CorruptIndex,
    Mailbox,
    Refusal,
    Refused,
    RunStatus,
    Store,
)
from testing.conformance._support import (
    GO,
    OWNER,
    RECOVERY_ERROR,
    T0,
    TTL,
    async_checks,
    claim_ids,
    new_run,
    start_and_claim,
    stored,
    together,
)

__all__ = ["Damage", "DamageChecks", "RedisDamage"]


class Damage(Protocol):
    """Breaks one key of a store by hand (it then holds another type than the
    store writes there) and answers the key's name, which the store's errors
    must name."""

    async def run_key(self, run_id: str, part: str, mailbox: Mailbox | None = None) -> str:
        """Break `part` of run `run_id`: ``"events"``, ``"dedup"``, ``"done"``,
        ``"children"`` (the index of its child runs), ``"mailbox"`` (`mailbox`)."""
        ...

    async def shared_key(self, run_id: str, part: str, name: str = "") -> str:
        """Break `part` that the runs of `run_id`'s partition share: ``"queue"``
        (queue `name`), ``"queues"`` (the list of queues), ``"seq"`` (the FIFO
        counter), ``"status"`` (the index of status `name`)."""
        ...


class RedisDamage:
    """`Damage` for `stores.redis.RedisStore`: the key becomes a string."""

    def __init__(self, store: Store) -> None:
        from stores.redis import RedisStore

        assert isinstance(store, RedisStore)
        self._store = store

    async def _replace(self, key: str) -> str:
        await self._store.client.delete(key)
        await self._store.client.set(key, "garbage")
        return key

    async def run_key(self, run_id: str, part: str, mailbox: Mailbox | None = None) -> str:
        from stores._codec import mailbox_name
        from stores._keys import SUFFIX

        base = self._store.keys.base_of(run_id)
        if part == "mailbox":
            assert mailbox is not None
            return await self._replace(
                f"{base}{SUFFIX['mailbox']}{len(run_id)}:{run_id}:{mailbox_name(mailbox)}"
            )
        return await self._replace(base + SUFFIX[part] + run_id)

    async def shared_key(self, run_id: str, part: str, name: str = "") -> str:
        from stores._keys import SUFFIX

        return await self._replace(self._store.keys.base_of(run_id) + SUFFIX[part] + name)


async def parked(store: Store, run_id: str) -> None:
    """Create `run_id`, claim it and park it waiting on mailbox GO (no deadline)."""
    claim = await start_and_claim(store, run_id)
    await store.suspend(
        run_id, claim.run.fence, T0 + 1, None, RunStatus.WAITING_FOR_SIGNAL, [], [GO]
    )


@async_checks
class DamageChecks:
    """What a store does with data that cannot be worked with (see the module)."""

    @pytest.fixture(name="damage")
    def damage_fixture(self, store: Store) -> Damage:
        from stores.redis import RedisStore

        if not isinstance(store, RedisStore):
            pytest.skip("no `damage` fixture for this store: it cannot be damaged by hand")
        return RedisDamage(store)

    @pytest.mark.parametrize("part", ["mailbox", "dedup", "events"])
    async def test_a_tick_reports_a_waiting_run_whose_wake_up_keys_are_damaged(
        self, store: Store, damage: Damage, part: str
    ) -> None:
        # a signal to it is refused while they are: nothing else would end the run
        await parked(store, "r1")
        key = await damage.run_key("r1", part, GO)

        refused = await store.signal("r1", GO, "1", "d1", now=T0 + 2)
        assert isinstance(refused, Refused) and refused.why is Refusal.CORRUPT
        assert refused.key == key
        result = await store.tick(T0 + 3, 10, RECOVERY_ERROR)

        assert [(d.run_id, d.key, d.fence) for d in result.damaged] == [("r1", key, None)]
        assert await store.quarantine("r1", None, T0 + 4, RECOVERY_ERROR)
        assert (await stored(store, "r1")).reason == "corrupt_record"

    async def test_a_start_on_a_damaged_queue_raises_corrupt_index_and_writes_nothing(
        self, store: Store, damage: Damage
    ) -> None:
        key = await damage.shared_key("r1", "queue", "default")

        with pytest.raises(CorruptIndex) as info:
            await store.create_run(new_run("r1"))

        assert (info.value.key, info.value.detail) == (key, "holds a string, not a zset")
        assert await store.get_run("r1") is None

    @pytest.mark.parametrize(("part", "name"), [("queues", ""), ("status", "pending")])
    async def test_a_start_on_another_damaged_shared_key_raises_corrupt_index(
        self, store: Store, damage: Damage, part: str, name: str
    ) -> None:
        key = await damage.shared_key("r1", part, name)

        with pytest.raises(CorruptIndex) as info:
            await store.create_run(new_run("r1"))

        assert info.value.key == key
        assert await store.get_run("r1") is None

    async def test_a_fifo_counter_that_cannot_count_starts_over(
        self, store: Store, damage: Damage
    ) -> None:
        a, b = together(store, "a", "b")
        await store.create_run(new_run(a))
        await damage.shared_key(a, "seq")

        await store.create_run(new_run(b))  # our own bookkeeping: no error

        assert sorted(await claim_ids(store)) == sorted([a, b])

    async def test_a_tick_rebuilds_a_damaged_queue_and_queues_its_runs_again(
        self, store: Store, damage: Damage
    ) -> None:
        await store.create_run(new_run("r1"))
        key = await damage.shared_key("r1", "queue", "default")
        assert await claim_ids(store) == []  # (a damaged queue holds nothing to claim)

        result = await store.tick(T0 + 1, 10, RECOVERY_ERROR)

        assert [(r.key, r.detail) for r in result.rebuilt] == [(key, "holds a string, not a zset")]
        assert result.repaired == 1  # pending without a queue entry: queued again
        assert await claim_ids(store, now=T0 + 2) == ["r1"]
        await store.create_run(new_run("r2"))  # starts work again
        assert (await store.tick(T0 + 3, 10, RECOVERY_ERROR)).rebuilt == ()

    async def test_a_poll_rebuilds_a_damaged_queue_before_it_claims(
        self, store: Store, damage: Damage
    ) -> None:
        await store.create_run(new_run("r1"))
        await damage.shared_key("r1", "queue", "default")

        claims, tick = await store.poll(OWNER, None, 10, T0 + 1, TTL, 10, RECOVERY_ERROR)

        assert [r.key for r in tick.rebuilt] != []
        assert [c.run.run_id for c in claims] == ["r1"]

    async def test_waiting_for_the_end_of_a_run_whose_done_notice_is_damaged_names_it(
        self, store: Store, damage: Damage
    ) -> None:
        await parked(store, "r1")
        key = await damage.run_key("r1", "done")

        with pytest.raises(CorruptData) as info:
            await store.wait_finished("r1", 0.01)

        assert (info.value.run_id, info.value.key) == ("r1", key)

    async def test_listing_the_children_of_a_run_whose_index_of_them_is_damaged_names_it(
        self, store: Store, damage: Damage
    ) -> None:
        await store.create_run(new_run("parent"))
        key = await damage.run_key("parent", "children")

        with pytest.raises(CorruptData) as info:
            await store.list_runs(None, None, 10, parent_run_id="parent")

        assert (info.value.run_id, info.value.key) == ("parent", key)
        assert [r.run_id for r in await store.list_runs(None, None, 10)] == ["parent"]

    async def test_listing_by_a_damaged_status_index_raises_corrupt_index(
        self, store: Store, damage: Damage
    ) -> None:
        await store.create_run(new_run("r1"))
        key = await damage.shared_key("r1", "status", "pending")

        with pytest.raises(CorruptIndex) as info:
            await store.list_runs(RunStatus.PENDING, None, 10)

        assert info.value.key == key
