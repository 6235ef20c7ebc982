"""The snippets of docs/queues-and-schedules.md ("Queues") run and do what the page says."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

PAGE = Path(__file__).resolve().parent.parent / "docs" / "queues-and-schedules.md"


def section_code(title: str) -> str:
    """The ```python blocks of the page's section `title`, in order, as one module."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    blocks = re.findall(r"^```python\n(.*?)^```$", section, re.S | re.M)
    assert blocks, f"no python snippet under {title!r}"
    return "\n".join(blocks)


@pytest.mark.xdist_group("docs-queues")  # the snippets register flows once per process
async def test_the_queues_snippets_run() -> None:
    namespace: dict[str, Any] = {"__name__": "docs_queues"}
    exec(compile(section_code("Queues"), str(PAGE), "exec"), namespace)
    await namespace["main"]()
    assert namespace["SENT"] == ["ann@example.com", "bob@example.com"]
