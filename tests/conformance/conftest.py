"""Fixtures of the conformance suite."""

from __future__ import annotations

import pytest

from stores.redis import RedisStore
from tests.conformance._support import count_sent


@pytest.fixture(name="sent")
def sent_fixture(store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The first command of each round trip the store makes (a script call is one EVALSHA)."""
    return count_sent(store, monkeypatch)
