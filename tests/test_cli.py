"""The ``steadyflow`` console script, run as the installed program (``.venv/bin/steadyflow``).

A worker serving a flow end to end through it is in test_examples.py (the hello
end-to-end test runs once per worker command).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.crashflows import ROOT, STEADYFLOW

pytestmark = pytest.mark.slow

PYTHON_M_WORKER = (sys.executable, "-m", "sdk.worker")


def run(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=30)


def test_the_console_script_is_installed_and_lists_its_commands() -> None:
    done = run(STEADYFLOW, "--help")

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: steadyflow [OPTIONS] COMMAND [ARGS]...")
    assert "worker" in done.stdout
    assert "Exit codes: 0 done" in done.stdout


def test_version() -> None:
    done = run(STEADYFLOW, "--version")

    assert done.returncode == 0
    assert done.stdout.strip() == "steadyflow, version 0.1.0"


def test_worker_help_shows_every_option_with_its_default() -> None:
    done = run(STEADYFLOW, "worker", "-h")

    assert done.returncode == 0, done.stderr
    options = "--store URL|--prefix P|--concurrency N|--lease-ttl SECONDS|--queues A,B"
    options += "|--grace SECONDS|--partitions N|--log-level LEVEL"
    for option in options.split("|"):
        assert option in done.stdout, option
    assert "$STEADYFLOW_STORE" in done.stdout
    assert "$STEADYFLOW_PREFIX" in done.stdout


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (("nope",), "No such command 'nope'"),
        (("worker",), "Missing argument 'MODULE...'"),
        (("worker", "examples.hello", "--concurrency", "0"), "0 is not in the range x>=1"),
        (("worker", "examples.hello", "--lease-ttl", "soon"), "'soon' is not a valid float"),
        (("worker", "examples.hello", "--log-level", "LOUD"), "'LOUD' is not one of"),
        (
            ("worker", "examples.hello", "--store", "memory://", "--lease-ttl", "nan"),
            "Worker: lease_ttl must be a finite number of seconds above 0, got nan",
        ),
        (
            ("worker", "examples.hello", "--store", "memory://", "--queues", "a,b\x01"),
            "Worker: a queue must not hold control characters",
        ),
        (
            ("worker", "examples.hello", "--no-such-flag"),
            "--no-such-flag",
        ),  # wording varies by click
    ],
    ids=[
        "command",
        "modules",
        "concurrency",
        "lease-ttl",
        "log-level",
        "lease-ttl-nan",
        "queue-name",
        "flag",
    ],
)
def test_bad_usage_exits_2_with_the_error_on_stderr(argv: tuple[str, ...], error: str) -> None:
    done = run(STEADYFLOW, *argv)

    assert done.returncode == 2
    assert error in done.stderr
    assert "Usage: steadyflow" in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize("command", [(STEADYFLOW, "worker"), PYTHON_M_WORKER], ids=["script", "m"])
def test_a_flow_module_that_does_not_exist_exits_1_naming_it(command: tuple[str, ...]) -> None:
    done = run(*command, "examples.no_such_module", "--store", "memory://")

    assert done.returncode == 1
    assert "Error: cannot import the flow module 'examples.no_such_module'" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_import_error_inside_a_flow_module_keeps_its_traceback(tmp_path: Path) -> None:
    (tmp_path / "broken_flows.py").write_text("import no_such_dependency_of_the_flows\n")

    done = run(STEADYFLOW, "worker", "broken_flows", "--store", "memory://", cwd=tmp_path)

    assert done.returncode == 1
    assert "Traceback" in done.stderr  # the user's bug, with where it is
    assert "No module named 'no_such_dependency_of_the_flows'" in done.stderr


def test_python_m_sdk_worker_is_the_same_command() -> None:
    script = run(STEADYFLOW, "worker", "--help")
    module = run(*PYTHON_M_WORKER, "--help")

    assert module.returncode == 0, module.stderr
    assert module.stdout == script.stdout.replace(
        "Usage: steadyflow worker", "Usage: python -m sdk.worker"
    )
    bad = run(*PYTHON_M_WORKER, "examples.hello", "--concurrency", "0")
    assert bad.returncode == 2
    assert "Usage: python -m sdk.worker" in bad.stderr


def test_python_m_sdk_cli_runs_the_console_script() -> None:
    done = run(sys.executable, "-m", "sdk.cli", "--help")

    assert done.returncode == 0, done.stderr
    assert done.stdout == run(STEADYFLOW, "--help").stdout


def test_importing_sdk_does_not_import_the_command_line() -> None:
    code = "import sys, sdk; print([m for m in sys.modules if m.startswith(('sdk.cli', 'click'))])"
    done = run(sys.executable, "-c", code)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
