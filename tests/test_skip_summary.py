"""A test run without Redis says so: outside CI it skips and ends with a loud summary;
in CI it fails. Runs a small part of this suite in a pytest subprocess whose
STEADYFLOW_TEST_REDIS points at a port where nothing listens."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.crashflows import ROOT
from tests.redis62 import COMMAND, MISSING, VARIABLE

pytestmark = pytest.mark.slow

# test_events.py: tests on the memory store, and tests parametrized over both
# stores; test_embedded_conformance.py: tests on Redis 6.2.
SELECTION = (
    "tests/test_events.py", "tests/test_embedded_conformance.py::TestRedis62Store",
    "-k", "canonical or correlation or newest_events or sticky",
)  # fmt: skip


def run_without_redis(*, ci: bool, nothing_fetched: Path) -> subprocess.CompletedProcess[str]:
    """SELECTION with no Redis and no redis-server 6.2 (none given, none fetched)."""
    url = f"redis://127.0.0.1:{free_port()}/0"  # bound, then closed: nothing answers
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS", VARIABLE)}
    env["STEADYFLOW_TEST_REDIS"] = url
    env["STEADYFLOW_TEST_REDIS62_CACHE"] = str(nothing_fetched)
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *SELECTION],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_outside_ci_a_run_without_redis_passes_and_says_what_it_skipped(tmp_path: Path) -> None:
    done = run_without_redis(ci=False, nothing_fetched=tmp_path)
    out = done.stdout

    assert done.returncode == 0, out + done.stderr
    summary = re.search(r"(\d+) passed, (\d+) skipped", out)
    assert summary is not None, out
    skipped = int(summary.group(2))
    assert f"{skipped} tests SKIPPED: this run did not test everything" in out
    # the Redis halves of the parametrized tests, and the capped store
    no_redis = re.search(r"^\s+(\d+)  no Redis answers at redis://127\.0\.0\.1:\d+/0$", out, re.M)
    assert no_redis is not None and int(no_redis.group(1)) >= 3, out
    assert "start Redis on 127.0.0.1:6379" in out
    assert "or point STEADYFLOW_TEST_REDIS at a Redis" in out
    # the tests on Redis 6.2, and the one command that runs them
    no_62 = re.search(rf"^\s+(\d+)  {re.escape(MISSING)}$", out, re.M)
    assert no_62 is not None and int(no_62.group(1)) >= 2, out
    assert int(no_redis.group(1)) + int(no_62.group(1)) == skipped
    assert f"  {COMMAND}\n" in out
    assert COMMAND == "bash scripts/test.sh tests/test_embedded_conformance.py"
    # The summary comes before pytest's own closing line, which stays the last.
    assert out.rstrip().splitlines()[-1].strip("= ").startswith(summary.group(0))


def test_in_ci_a_run_without_redis_fails_and_prints_no_skip_summary(tmp_path: Path) -> None:
    done = run_without_redis(ci=True, nothing_fetched=tmp_path)
    out = done.stdout

    assert done.returncode == 1, out + done.stderr
    assert "CI=true: real Redis is required" in out
    assert "(CI=true: required)" in out  # Redis 6.2 too
    assert "SKIPPED" not in out
    assert re.search(r"\d+ passed, .*\d+ errors? in", out), out
    assert "skipped" not in out.splitlines()[-1]
