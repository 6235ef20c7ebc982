"""The snippets of docs/queues-and-schedules.md "Schedules" run and do what the page says.

They run in a process of their own: the page's flow is ``@scheduled`` in the
default registry, and every `FlowTestEnv` of a test process that had it would
create its schedule.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "queues-and-schedules.md"


def section_code(title: str) -> str:
    """The ```python blocks of the page's section `title` (its subsections too), in order."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    blocks = re.findall(r"^```python\n(.*?)^```$", section, re.S | re.M)
    assert blocks, f"no python snippet under {title!r}"
    return "\n".join(blocks)


def test_the_schedules_snippets_run() -> None:
    code = section_code("Schedules") + "\nimport asyncio\nasyncio.run(main())\nprint('ok')\n"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
