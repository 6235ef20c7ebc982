"""Fixtures of the Redis layout tests."""

from __future__ import annotations

import pytest

from stores.redis import RedisStore
from tests.redis_layout._support import count_sent


@pytest.fixture(name="sent")
def sent_fixture(store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The first command of each round trip the store makes (a script call is one EVALSHA)."""
    return count_sent(store, monkeypatch)
