"""Testing kit: a fake clock and an in-process environment for flows.

    from testing import FlowTestEnv, FakeClock

The pytest plugin (installed with the package) adds the fixtures ``flow_env``
and ``fake_clock``.
"""

from testing._clock import FakeClock
from testing._env import FlowTestEnv

__all__ = ["FakeClock", "FlowTestEnv"]
