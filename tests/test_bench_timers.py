"""`python -m bench.timers`: its measurement runs, and its "ended by Redis" mode is undone."""

from __future__ import annotations

import math

import pytest

from bench.timers import ended_by_redis, measure
from stores import _storecore
from stores.redis import RedisStore


@pytest.mark.parametrize("park", [False, True])
async def test_measure_gives_one_figure_per_duration(memory_store: RedisStore, park: bool) -> None:
    late = await measure(memory_store, [0.001, 0.002], sleeps=2, park=park)

    assert len(late) == 2 and all(math.isfinite(ms) and ms > -1.0 for ms in late)


async def test_the_redis_ended_mode_is_undone_after_it(memory_store: RedisStore) -> None:
    bell = _storecore.StoreCore.blpop_until
    with ended_by_redis():
        assert _storecore.StoreCore.blpop_until is not bell
        assert await measure(memory_store, [0.001], sleeps=1, park=True)

    assert _storecore.StoreCore.blpop_until is bell
