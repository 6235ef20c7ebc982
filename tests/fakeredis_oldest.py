"""Run the memory:// store's tests against the oldest fakeredis the project supports.

The project's own virtualenv has the newest fakeredis that ``pyproject.toml``
allows (the whole suite runs on it). This installs the lower bound of the
``fakeredis`` test dependency (without its dependencies: the virtualenv's
redis-py, lupa and sortedcontainers serve) into a directory of its own
(``.venv/fakeredis-<version>``, kept between runs) and runs, with that
directory first on ``sys.path``, the adapter to fakeredis's internals
(`testing._fakelua`), the store conformance suite on ``memory://``, and the
crash-everywhere check (the heaviest user of ``memory://``). ~30 s.

    python -m tests.fakeredis_oldest [PYTEST ARGS...]
"""

from __future__ import annotations

import sys

from tests.redispy_oldest import lower_bound, run_on

TESTS = [
    "tests/test_fakelua.py",
    "tests/test_store_conformance.py::TestMemoryStore",
    "tests/test_crash_everywhere.py",
    "tests/test_wait_bell.py",  # BLPOP ended by another connection's LPUSH
]


def main() -> int:
    version = lower_bound("fakeredis", "test")
    if version.count(".") == 1:
        version += ".0"
    return run_on("fakeredis", version, "fakeredis", TESTS, pip=["--no-deps"], pytest=[])


if __name__ == "__main__":
    sys.exit(main())
