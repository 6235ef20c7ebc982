"""pytest plugin (entry point ``pytest11``): the ``fake_clock`` and ``flow_env`` fixtures.

async def test_onboarding(flow_env):
    handle = await flow_env.start(onboard, "ada")
    await flow_env.run_until_idle()

pytest loads this module in every run of every project whose environment has
steadyflow installed, with or without the ``test`` extra. So it imports only
pytest, pytest-asyncio if present, and the standard library when it loads;
the fixtures import the kit
when a test asks for them, and fail that test with the command that installs
the extra when it is missing. The rest of the run is not affected.
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator, Iterator
from importlib.util import find_spec
from typing import TYPE_CHECKING, NoReturn

import pytest

from testing._extra import missing, needs_extra

if TYPE_CHECKING:
    from testing._clock import FakeClock
    from testing._env import FlowTestEnv

# What each fixture needs beyond the core dependencies (pytest-asyncio: to be
# an async fixture at all; lupa: the memory store's Lua).
_FAKE_CLOCK_NEEDS = ("freezegun",)
_FLOW_ENV_NEEDS = ("pytest_asyncio", "freezegun", "fakeredis", "lupa")


def _require(fixture: str, modules: tuple[str, ...]) -> None:
    absent = missing(*modules)
    if absent:
        pytest.fail(needs_extra(f"The fixture {fixture!r}", absent), pytrace=False)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # pytest-asyncio (0.24 and later) warns in its own pytest_configure, in every
    # run, when a project leaves `asyncio_default_fixture_loop_scope` unset. The
    # option cannot change our fixtures (flow_env names its loop scope), and a
    # project that has no async fixture of its own would see that warning only
    # because our extra installed pytest-asyncio, and fail on it under
    # `filterwarnings = error`. This filter lives in pytest's configure-time
    # warnings context (tryfirst: set before pytest-asyncio warns) and matches
    # that one message only.
    warnings.filterwarnings(
        "ignore",
        message='The configuration option "asyncio_default_fixture_loop_scope" is unset',
        category=pytest.PytestDeprecationWarning,
    )


@pytest.fixture(name="fake_clock")
def fake_clock_fixture() -> Iterator[FakeClock]:
    """A started `FakeClock` (wall-clock reads in the test see fake time)."""
    _require("fake_clock", _FAKE_CLOCK_NEEDS)
    from testing._clock import FakeClock

    with FakeClock() as clock:
        yield clock


if find_spec("pytest_asyncio") is not None:
    import pytest_asyncio

    # loop_scope="function", explicitly: the env's store and worker belong to the
    # loop that runs the test (pytest-asyncio's default for tests), whatever the
    # project sets as `asyncio_default_fixture_loop_scope`.
    @pytest_asyncio.fixture(name="flow_env", loop_scope="function")
    async def flow_env_fixture(request: pytest.FixtureRequest) -> AsyncIterator[FlowTestEnv]:
        """A `FlowTestEnv` on a fresh memory store, sharing the `fake_clock` fixture."""
        _require("flow_env", _FLOW_ENV_NEEDS)  # before fake_clock, to name this fixture
        from testing._env import FlowTestEnv

        clock: FakeClock = request.getfixturevalue("fake_clock")
        async with FlowTestEnv(clock=clock) as env:
            yield env

else:

    @pytest.fixture(name="flow_env")
    def flow_env_without_the_extra() -> NoReturn:
        """`flow_env` is an async fixture: without pytest-asyncio, say what to install."""
        absent = missing(*_FLOW_ENV_NEEDS)  # pytest-asyncio at least
        pytest.fail(needs_extra("The fixture 'flow_env'", absent), pytrace=False)
