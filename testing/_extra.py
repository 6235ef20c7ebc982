"""The ``test`` extra: the modules the testing kit needs, and the message when they are missing.

The pytest plugin is loaded by every pytest run in an environment where
steadyflow is installed, with or without the extra, so nothing here may import
them: it only looks them up.
"""

from __future__ import annotations

from importlib.util import find_spec

__all__ = ["INSTALL", "missing", "needs_extra"]

INSTALL = "pip install 'steadyflow[test]'"

# Module -> the distribution that provides it (what pip is asked for).
_DISTRIBUTIONS = {
    "pytest_asyncio": "pytest-asyncio",
    "freezegun": "freezegun",
    "fakeredis": "fakeredis",
    "lupa": "lupa",  # fakeredis's Lua: the memory store runs the Redis store's scripts
}


def missing(*modules: str) -> list[str]:
    """The distributions of `modules` that cannot be imported here."""
    return [_DISTRIBUTIONS.get(m, m) for m in modules if find_spec(m) is None]


def needs_extra(what: str, absent: list[str]) -> str:
    """The message for `what` (a fixture, a class) when `absent` distributions are missing."""
    return (
        f"{what} needs steadyflow's 'test' extra, which is not installed "
        f"(missing: {', '.join(absent)}). Install it: {INSTALL}"
    )
