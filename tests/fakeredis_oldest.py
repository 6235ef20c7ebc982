"""Run the memory:// store's tests against the oldest fakeredis the project supports.

The project's own virtualenv has the newest fakeredis that ``pyproject.toml``
allows (the whole suite runs on it). This installs the lower bound of the
``fakeredis`` test dependency (without its dependencies: the virtualenv's
redis-py, lupa and sortedcontainers serve) into a directory of its own
(``.venv/fakeredis-<version>``, kept between runs) and runs, with that
directory first on ``sys.path``, the adapter to fakeredis's internals
(`stores._fakelua`), the store conformance suite on ``memory://``, and the
crash-everywhere check (the heaviest user of ``memory://``). ~30 s.

    python -m tests.fakeredis_oldest [PYTEST ARGS...]
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = [
    "tests/test_fakelua.py",
    "tests/test_store_conformance.py::TestMemoryStore",
    "tests/test_crash_everywhere.py",
]


def oldest() -> str:
    """The lower bound of the ``fakeredis`` test requirement in pyproject.toml."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        deps = tomllib.load(f)["project"]["optional-dependencies"]["test"]
    (spec,) = [d for d in deps if re.match(r"fakeredis\b", d)]
    match = re.search(r">=\s*([\w.]+)", spec)
    if match is None:
        raise SystemExit(f"no lower bound in {spec!r}")
    return match.group(1)


def main() -> int:
    version = oldest()
    if version.count(".") == 1:
        version += ".0"
    target = ROOT / ".venv" / f"fakeredis-{version}"
    if not (target / "fakeredis").is_dir():
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "--no-deps", "--target", str(target), f"fakeredis=={version}"],
            check=True,
        )  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(ROOT)])}
    ask = "from importlib.metadata import version; print(version('fakeredis'))"
    got = subprocess.run(
        [sys.executable, "-c", ask],
        env=env, check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    if got != version:
        raise SystemExit(f"expected fakeredis {version} first on the path, got {got}")
    print(f"fakeredis {got} (oldest supported)", flush=True)
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            *TESTS, *sys.argv[1:]]  # fmt: skip
    return subprocess.run(args, env=env, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main())
