"""STEADYFLOW_STORE and STEADYFLOW_PREFIX: the defaults open_store() and the command line share."""

from __future__ import annotations

import pytest

from stores import open_store
from tests.conftest import need_real_redis


@pytest.fixture(name="no_config")
def no_config_fixture(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv("STEADYFLOW_STORE", raising=False)
    monkeypatch.delenv("STEADYFLOW_PREFIX", raising=False)
    return monkeypatch


async def test_open_store_defaults_to_local_redis_and_prefix_sf(
    no_config: pytest.MonkeyPatch,
) -> None:
    # the local Redis answers (it is part of the suite): it is the default; with
    # none there the embedded server is (tests/test_embedded.py)
    need_real_redis()
    store = open_store()
    try:
        assert store.describe() == {
            "store": "redis://127.0.0.1:6379/0",
            "prefix": "sf",
            "partitions": 1,
        }
    finally:
        await store.close()


async def test_open_store_reads_the_store_and_prefix_from_the_environment(
    no_config: pytest.MonkeyPatch,
) -> None:
    no_config.setenv("STEADYFLOW_STORE", "redis://:secret@redis.internal:6380/2")
    no_config.setenv("STEADYFLOW_PREFIX", "staging")
    store = open_store()
    try:
        assert store.describe() == {
            "store": "redis://:***@redis.internal:6380/2",
            "prefix": "staging",
            "partitions": 1,
        }
    finally:
        await store.close()


async def test_arguments_win_over_the_environment(no_config: pytest.MonkeyPatch) -> None:
    no_config.setenv("STEADYFLOW_STORE", "redis://redis.internal:6380/2")
    no_config.setenv("STEADYFLOW_PREFIX", "staging")
    store = open_store("memory://", prefix="mine")
    try:
        assert store.describe()["store"] == "memory://"
        assert store.keys.prefix == "mine"
    finally:
        await store.close()


async def test_an_empty_variable_counts_as_unset(no_config: pytest.MonkeyPatch) -> None:
    no_config.setenv("STEADYFLOW_STORE", "")
    no_config.setenv("STEADYFLOW_PREFIX", "")
    store = open_store()
    try:
        assert store.describe()["store"] == "redis://127.0.0.1:6379/0"
        assert store.keys.prefix == "sf"
    finally:
        await store.close()


async def test_a_memory_store_from_the_environment_is_the_same_store_kind(
    no_config: pytest.MonkeyPatch,
) -> None:
    no_config.setenv("STEADYFLOW_STORE", "memory://")
    no_config.setenv("STEADYFLOW_PREFIX", "envprefix")
    store = open_store()
    try:
        await store.client.set("envprefix:probe", "1")  # a working in-process server
        assert store.keys.prefix == "envprefix"
        assert store.describe()["store"] == "memory://"
    finally:
        await store.close()
