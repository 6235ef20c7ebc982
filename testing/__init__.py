"""Testing kit: a fake clock, an in-process environment for flows, a store checker.

    from testing import FlowTestEnv, FakeClock, StoreConformance
    from testing import check_crash_everywhere, HistoryEntry

The pytest plugin (installed with the package) adds the fixtures ``flow_env``
and ``fake_clock``. `StoreConformance` (from `testing.conformance`) is the
store protocol's conformance kit: subclass it to run every check on a store of
yours. All three need the ``test`` extra (``pip install 'steadyflow[test]'``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from testing._clock import FakeClock
    from testing._crashcheck import CrashPoint, CrashReport, check_crash_everywhere
    from testing._env import FlowTestEnv
    from testing._history import HistoryEntry
    from testing._replay import ReplayPoint, ReplayReport, load_exports, replay
    from testing.conformance import StoreConformance

__all__ = [
    "CrashPoint",
    "CrashReport",
    "FakeClock",
    "FlowTestEnv",
    "HistoryEntry",
    "ReplayPoint",
    "ReplayReport",
    "StoreConformance",
    "check_crash_everywhere",
    "load_exports",
    "replay",
]


def __getattr__(name: str) -> Any:
    # Imported on first use, not with the package: pytest loads testing.plugin
    # (so this package) in every run where steadyflow is installed, and the
    # classes need freezegun and fakeredis, which only the test extra brings.
    if name == "FakeClock":
        from testing._clock import FakeClock

        return FakeClock
    if name == "FlowTestEnv":
        from testing._env import FlowTestEnv

        return FlowTestEnv
    if name in ("CrashPoint", "CrashReport", "check_crash_everywhere"):
        from testing import _crashcheck

        return getattr(_crashcheck, name)
    if name == "HistoryEntry":
        from testing._history import HistoryEntry

        return HistoryEntry
    if name in ("ReplayPoint", "ReplayReport", "load_exports", "replay"):
        from testing import _replay

        return getattr(_replay, name)
    if name == "StoreConformance":
        from testing.conformance import StoreConformance

        return StoreConformance
    raise AttributeError(f"module 'testing' has no attribute {name!r}")
