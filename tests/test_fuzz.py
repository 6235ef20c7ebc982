"""A small run of the fuzz harness (`python -m bench.fuzz` runs it large): hostile
arguments and values at every public entry point, with healthy runs beside."""

from __future__ import annotations

import pytest

from bench import fuzz


def _assert_contained(report: fuzz.Report) -> None:
    assert report["unclear"] == 0, report["examples"]
    assert report["hangs"] == 0, report["examples"]
    assert report["values_changed"] == 0, report["examples"]
    assert report["values_unclear"] == 0, report["examples"]
    assert report["healthy_affected"] == 0, report
    assert report["clear"] > 0 and report["accepted"] > 0  # both kinds were tried


@pytest.mark.parametrize("seed", [1, 2])
async def test_hostile_calls_on_the_memory_store_are_contained(seed: int) -> None:
    _assert_contained(await fuzz.run(calls=250, seed=seed))


@pytest.mark.redis
async def test_hostile_calls_on_real_redis_are_contained(redis_url: str) -> None:
    _assert_contained(await fuzz.run(calls=150, seed=3, store_url=redis_url))
