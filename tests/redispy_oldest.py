"""Run the redis-py adapter's tests against the oldest redis-py the project supports.

The project's own virtualenv has the newest redis-py that ``pyproject.toml``
allows (the whole suite runs on it). This installs the lower bound of the
``redis`` dependency, with its own dependencies, into a directory of its own
(``.venv/redis-py-<version>``, kept between runs; pip's cache makes the first
install quick) and runs, with that directory first on ``sys.path``, the
adapter's tests, the stores' end-to-end flows over real Redis (unix socket,
TLS with an ACL user), the store conformance kit on real Redis, and the Redis
store's own checks of retried script calls and of its encodings. `.ci/run`
calls it; ~15 s.

    python -m tests.redispy_oldest [PYTEST ARGS...]
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
    "tests/test_lane.py",
    "tests/test_lane_pipelining.py",
    "tests/test_resp.py",
    "tests/test_unix_socket.py",
    "tests/test_tls_acl.py",
    "tests/test_store_conformance.py::TestRedisStore",
    "tests/redis_layout/test_retried_scripts.py",
    "tests/redis_layout/test_encodings.py",
    "tests/test_cluster_wakeups.py",  # the sharded Pub/Sub adapter (stores._sharded)
    "tests/test_cluster_store.py",  # redis+cluster:// clients (stores._cluster)
    "tests/test_wait_bell.py",  # a blocking wait ended by the store (stores._storecore)
    # a blocking wait cut by the client: its connection is closed, the next is new
    "tests/test_client.py::test_result_after_a_wait_cut_at_its_deadline_on_real_redis",
]


def lower_bound(name: str, group: str | None = None) -> str:
    """The lower bound of the requirement `name` in pyproject.toml: among the
    dependencies, or those of the optional-dependency `group`."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    deps = project["dependencies"] if group is None else project["optional-dependencies"][group]
    (spec,) = [d for d in deps if re.match(rf"{name}\b", d)]
    match = re.search(r">=\s*([\w.]+)", spec)
    if match is None:
        raise SystemExit(f"no lower bound in {spec!r}")
    return match.group(1)


def run_on(
    dist: str, version: str, label: str, tests: list[str], *, pip: list[str], pytest: list[str]
) -> int:
    """Run pytest on `tests` with `dist`=={version} first on ``sys.path``: installed
    (pip options `pip`) into ``.venv/<label>-<version>``, kept between runs."""
    target = ROOT / ".venv" / f"{label}-{version}"
    if not (target / dist).is_dir():
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             *pip, "--target", str(target), f"{dist}=={version}"],
            check=True,
        )  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(ROOT)])}
    ask = f"from importlib.metadata import version; print(version({dist!r}))"
    got = subprocess.run(
        [sys.executable, "-c", ask],
        env=env, check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    if got != version:
        raise SystemExit(f"expected {label} {version} first on the path, got {got}")
    print(f"{label} {got} (oldest supported)", flush=True)
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            *pytest, *tests, *sys.argv[1:]]  # fmt: skip
    return subprocess.run(args, env=env, cwd=ROOT).returncode


def main() -> int:
    return run_on(
        "redis", lower_bound("redis"), "redis-py", TESTS, pip=[], pytest=["-k", "not memory"]
    )


if __name__ == "__main__":
    sys.exit(main())
