"""The snippets of docs/queues-and-schedules.md "Schedules" run and do what the page says.

They run in a process of their own: the page's flow is ``@scheduled`` in the
default registry, and every `FlowTestEnv` of a test process that had it would
create its schedule.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.docsnippets import section_code as snippets

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "queues-and-schedules.md"


def section_code(title: str) -> str:
    return snippets(PAGE, title)


def test_the_schedules_snippets_run() -> None:
    code = section_code("Schedules") + "\nimport asyncio\nasyncio.run(main())\nprint('ok')\n"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
