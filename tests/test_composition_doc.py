"""The snippets of docs/composition.md run and do what the page says."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

PAGE = Path(__file__).resolve().parent.parent / "docs" / "composition.md"


def section_code(title: str) -> str:
    """The ```python blocks of the page's section `title`, in order, as one module."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    blocks = re.findall(r"^```python\n(.*?)^```$", section, re.S | re.M)
    assert blocks, f"no python snippet under {title!r}"
    return "\n".join(blocks)


@pytest.mark.xdist_group("docs-composition")  # the snippets register flows once per process
async def test_the_child_flows_snippets_run() -> None:
    namespace: dict[str, Any] = {"__name__": "docs_composition_children"}
    exec(compile(section_code("Child flows"), str(PAGE), "exec"), namespace)
    await namespace["main"]()


@pytest.mark.xdist_group("docs-composition")
async def test_the_events_matched_by_a_key_snippets_run() -> None:
    namespace: dict[str, Any] = {"__name__": "docs_composition_events"}
    exec(compile(section_code("Events matched by a key"), str(PAGE), "exec"), namespace)
    await namespace["main"]()


@pytest.mark.xdist_group("docs-composition")
async def test_the_continue_as_new_snippets_run() -> None:
    namespace: dict[str, Any] = {"__name__": "docs_composition_continue"}
    exec(compile(section_code("Continue-as-new"), str(PAGE), "exec"), namespace)
    await namespace["main"]()
