"""pytest plugin (entry point ``pytest11``): the ``fake_clock`` and ``flow_env`` fixtures.

async def test_onboarding(flow_env):
    handle = await flow_env.start(onboard, "ada")
    await flow_env.run_until_idle()
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from testing._clock import FakeClock
from testing._env import FlowTestEnv


@pytest.fixture(name="fake_clock")
def fake_clock_fixture() -> Iterator[FakeClock]:
    """A started `FakeClock` (wall-clock reads in the test see fake time)."""
    with FakeClock() as clock:
        yield clock


@pytest_asyncio.fixture(name="flow_env")
async def flow_env_fixture(fake_clock: FakeClock) -> AsyncIterator[FlowTestEnv]:
    """A `FlowTestEnv` on a fresh memory store, sharing the `fake_clock` fixture."""
    async with FlowTestEnv(clock=fake_clock) as env:
        yield env
