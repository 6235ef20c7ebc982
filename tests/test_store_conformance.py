"""The store conformance kit (`testing.conformance`) on the project's stores.

`memory://` (the Redis store's scripts on fakeredis) and a real Redis each run
every check; without Redis the second class skips, and fails when CI=true
(`need_real_redis`). What only the Redis store promises (its key layout, its
round trips per call, real cjson) is checked in ``tests/redis_layout``.

Below the two classes: checks of the kit itself, among them stores broken on
purpose, one way each, that the kit's checks must fail.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterator
from typing import Any, cast

import attrs
import pytest
import pytest_asyncio

from sdk.errors import RunFailed
from sdk.store import Claim, Mailbox, Parked, RunStatus, Store, TickResult
from stores import open_store
from stores.redis import RedisStore
from testing.conformance import StoreConformance
from tests.conftest import need_real_redis, redis_store


class TestMemoryStore(StoreConformance):
    @pytest_asyncio.fixture(name="store")
    async def store_fixture(self) -> AsyncIterator[Store]:
        store = open_store("memory://")
        try:
            yield store
        finally:
            await store.close()


@pytest.mark.redis
class TestRedisStore(StoreConformance):
    @pytest_asyncio.fixture(name="store")
    async def store_fixture(self, key_prefix: str) -> AsyncIterator[RedisStore]:
        async with redis_store(need_real_redis(), key_prefix) as store:
            yield store


def test_no_two_checks_of_the_kit_share_a_name() -> None:
    # A check of one group with the name of another's would silently replace it.
    groups = [cls for cls in StoreConformance.__mro__[1:] if cls.__name__.endswith("Checks")]
    names = [name for cls in groups for name in vars(cls) if name.startswith("test_")]
    assert len(groups) >= 10
    assert len(names) == len(set(names))


def test_every_check_of_the_kit_is_an_async_test_marked_for_pytest_asyncio() -> None:
    checks = {n: m for n, m in inspect.getmembers(StoreConformance) if n.startswith("test_")}
    assert len(checks) > 150
    for name, check in checks.items():
        assert inspect.iscoroutinefunction(check), name
        assert "asyncio" in [m.name for m in getattr(check, "pytestmark", [])], name


# -- the kit fails stores that break the protocol -------------------------------------
# Each broken store wraps a good one and gets one thing wrong; a check of the
# kit that is meant to catch it must fail on it (so the check can fail at all).


class Wrapped:
    """Delegates every protocol call to `inner`; subclasses break one."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def cjson_like(text: str) -> str:
    """What a Lua script that decodes and re-encodes JSON with real Redis's cjson makes
    of it: [] becomes {}, numbers keep 14 significant digits."""

    def mangle(value: Any) -> Any:
        if isinstance(value, list):
            return [mangle(v) for v in value] if value else {}
        if isinstance(value, dict):
            return {k: mangle(v) for k, v in value.items()}
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return (
                float(f"{value:.14g}") if abs(value) >= 2**53 or isinstance(value, float) else value
            )
        return value

    return json.dumps(mangle(json.loads(text)), separators=(",", ":"))


class DecodesPayloads(Wrapped):
    async def signal(self, run_id: str, mailbox: Mailbox, payload: str, *a: Any, **kw: Any) -> Any:
        return await self.inner.signal(run_id, mailbox, cjson_like(payload), *a, **kw)


class ForgetsMail(Wrapped):
    async def claim(self, *a: Any, **kw: Any) -> list[Claim]:
        return [attrs.evolve(c, mail=frozenset()) for c in await self.inner.claim(*a, **kw)]


class IgnoresDedupIds(Wrapped):
    async def signal(self, run_id: str, mailbox: Mailbox, payload: str, dedup_id: str | None,
                     **kw: Any) -> Any:  # fmt: skip
        return await self.inner.signal(run_id, mailbox, payload, None, **kw)


class WritesWithAnyFence(Wrapped):
    async def record(self, run_id: str, fence: int, *a: Any, **kw: Any) -> bool:
        run = await self.inner.get_run(run_id)
        return await self.inner.record(run_id, run.fence if run else fence, *a, **kw)


class LosesEarlySignals(Wrapped):
    async def suspend(self, *a: Any, **kw: Any) -> Parked:
        *args, _mailboxes = a  # parks without looking at its mailboxes
        return await self.inner.suspend(*args, [], **kw)  # type: ignore[call-arg, arg-type]


class LoadsHalfTheJournal(Wrapped):
    async def claim(self, *a: Any, **kw: Any) -> list[Claim]:
        return [halved(c) for c in await self.inner.claim(*a, **kw)]

    async def poll(self, *a: Any, **kw: Any) -> tuple[list[Claim], TickResult]:
        claims, result = await self.inner.poll(*a, **kw)
        return [halved(c) for c in claims], result


def halved(claim: Claim) -> Claim:
    keys = sorted(claim.journal)[: len(claim.journal) // 2]
    return attrs.evolve(claim, journal={k: claim.journal[k] for k in keys})


class ConsumesAgainWhenRetried(Wrapped):
    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.seen: set[str] = set()

    async def consume(self, run_id: str, fence: int, key: str, *a: Any) -> Any:
        retried = key in self.seen
        self.seen.add(key)
        return await self.inner.consume(run_id, fence, key + "'" * retried, *a)


class ListsEveryStatus(Wrapped):
    async def list_runs(self, status: RunStatus | None, flow: str | None, limit: int) -> Any:
        return await self.inner.list_runs(None, flow, limit)


def caught_by(
    broken: type[Wrapped], check: str, failure: type[Exception] = AssertionError, **args: Any
) -> Any:
    """A case: `check` (a method of the kit) fails with `failure` on a `broken` store."""
    name = f"{broken.__name__}-{check}" + "".join(f"-{v}" for v in args.values())
    return pytest.param(broken, check, args, failure, id=name)


@pytest.mark.parametrize(
    ("broken", "check", "args", "failure"),
    [
        caught_by(DecodesPayloads, "test_consume_moves_the_payload_into_the_record_unchanged",
                  payload="[]"),
        caught_by(DecodesPayloads, "test_consume_moves_the_payload_into_the_record_unchanged",
                  payload="12345678901234567890"),
        caught_by(DecodesPayloads, "test_consume_moves_the_payload_into_the_record_unchanged",
                  payload=json.dumps(0.1 + 0.2)),
        caught_by(ForgetsMail, "test_claim_names_the_mailboxes_that_hold_signals"),
        caught_by(IgnoresDedupIds, "test_a_signal_with_a_repeated_dedup_id_is_delivered_once"),
        caught_by(WritesWithAnyFence,
                  "test_record_with_a_stale_fence_is_refused_and_writes_nothing"),
        caught_by(WritesWithAnyFence, "test_release_requeues_the_run_and_fences_out_its_holder"),
        caught_by(LosesEarlySignals,
                  "test_suspend_rechecks_the_mailbox_so_a_wake_up_is_not_lost"),
        caught_by(LoadsHalfTheJournal, "test_claim_returns_the_whole_journal_verbatim"),
        # the engine finds steps missing from the journal it was given
        caught_by(LoadsHalfTheJournal, "test_an_activation_gets_its_whole_journal_with_its_claim",
                  RunFailed),
        caught_by(ConsumesAgainWhenRetried,
                  "test_consume_called_twice_answers_the_same_signal_and_keeps_the_next"),
        caught_by(ListsEveryStatus, "test_listing_by_status_follows_every_transition"),
    ],
)  # fmt: skip
async def test_the_kit_fails_a_store_that_breaks_the_protocol(
    broken: type[Wrapped], check: str, args: dict[str, Any], failure: type[Exception]
) -> None:
    good = open_store("memory://")
    try:
        kit = StoreConformance()
        await getattr(kit, check)(good, **args)  # the check passes on the good store...

        with pytest.raises(failure):  # ...and fails on the broken one
            fresh = open_store("memory://")
            try:
                await getattr(kit, check)(cast(Store, broken(fresh)), **args)
            finally:
                await fresh.close()
    finally:
        await good.close()
