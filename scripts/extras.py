"""Which extras of steadyflow scripts/env.sh must install into .venv, and what it has.

    python scripts/extras.py PYPROJECT STAMP EXTRA    # prints the extras to install, or nothing
    python scripts/extras.py PYPROJECT STAMP --done EXTRAS   # records them as installed

The stamp lists the extras installed in .venv, one a line, each with the extras
it includes (``dev`` includes ``test``, which includes ``embedded``, as
pyproject.toml says with ``steadyflow[...]``). A script whose extra is there
installs nothing: the demo after the tests, the tests after each other. One
whose extra is missing installs it on top (the tests after the demo). When
pyproject.toml is newer than the stamp, everything the stamp lists is
installed again with the new bounds.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

NAME = "steadyflow"


def extras_of(pyproject: Path) -> dict[str, list[str]]:
    with pyproject.open("rb") as f:
        project = tomllib.load(f)["project"]
    return dict(project.get("optional-dependencies", {}))


def closure(extras: dict[str, list[str]], wanted: set[str]) -> set[str]:
    """`wanted` and every extra they include through ``steadyflow[...]``."""
    unknown = wanted - set(extras)
    if unknown:
        raise SystemExit(f"env.sh: no extra {sorted(unknown)} in pyproject.toml: {sorted(extras)}")
    seen: set[str] = set()
    todo = list(wanted)
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for requirement in extras[extra]:
            match = re.fullmatch(rf"\s*{NAME}\[([\w,\s-]+)\]\s*", requirement)
            if match:
                todo += [e.strip() for e in match.group(1).split(",")]
    return seen


def installed(pyproject: Path, stamp: Path) -> tuple[set[str], bool]:
    """The extras the stamp lists, and whether pyproject.toml changed since."""
    if not stamp.exists():
        return set(), True
    have = {line.strip() for line in stamp.read_text().splitlines() if line.strip()}
    return have, pyproject.stat().st_mtime > stamp.stat().st_mtime


def to_install(pyproject: Path, stamp: Path, wanted: str) -> list[str]:
    extras = extras_of(pyproject)
    need = closure(extras, {wanted})
    have, stale = installed(pyproject, stamp)
    if stale:
        return sorted((have & set(extras)) | {wanted})
    return [] if need <= have else [wanted]


def main(argv: list[str]) -> int:
    pyproject, stamp = Path(argv[1]), Path(argv[2])
    if argv[3] == "--done":
        extras = extras_of(pyproject)
        have, stale = installed(pyproject, stamp)
        done = closure(extras, set(filter(None, argv[4].split(","))))
        stamp.write_text("".join(f"{e}\n" for e in sorted(done | (set() if stale else have))))
        return 0
    print(",".join(to_install(pyproject, stamp, argv[3])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
