"""`python -m bench.peers`: its options, and its Steadyflow part end to end.

The peers themselves (DBOS, Temporal) are optional (`steadyflow[bench]`): the
bench skips a missing one by name, and the tests do not need them.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import peers
from tests.conftest import IN_CI, NO_REDIS_SERVER

REPO = Path(__file__).resolve().parent.parent


def _bench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.peers", *args],
        cwd=REPO, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def test_help_names_the_options() -> None:
    done = _bench("--help", timeout=30)
    assert done.returncode == 0, done.stderr
    for option in ("--peers", "--quick", "--postgres", "--redis-fsync", "--temporal-db"):
        assert option in done.stdout


def test_an_unknown_peer_is_refused_by_name() -> None:
    done = _bench("--peers", "steadyflow,celery", timeout=30)
    assert done.returncode != 0
    assert "unknown peer(s) ['celery']" in done.stderr


def test_a_peer_whose_package_is_missing_is_skipped_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "dbos" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    args = argparse.Namespace(postgres=None)
    assert peers._available("dbos-sqlite", args) == "dbos not installed"
    assert peers._available("steadyflow", args) is None
    report = peers.report(
        {"results": {}, "skipped": {"dbos-sqlite": "dbos not installed"}, "rounds": 1}
    )
    assert "skipped: dbos-sqlite: dbos not installed" in report


@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.long  # a benchmark's round: CI's (--all) alone
def test_the_steadyflow_part_prints_every_figure_on_its_own_redis() -> None:
    if shutil.which("redis-server") is None:
        if IN_CI:
            pytest.fail(NO_REDIS_SERVER + " (CI=true: required)")
        pytest.skip(NO_REDIS_SERVER)
    done = _bench(
        "--peers", "steadyflow,dbos-postgres", "--quick", "--rounds", "1", "--redis-fsync", "no"
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].split() == ["steadyflow"]
    for label, _, _ in peers.ROWS.values():
        row = next(line for line in lines if line.startswith(label))
        figure = row[len(label) :].strip().replace(",", "")
        assert float(figure) > 0, row
    assert "skipped: dbos-postgres: no --postgres URL given" in lines
