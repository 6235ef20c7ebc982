"""The snippets of docs/composition.md run and do what the page says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.docsnippets import section_code as snippets

PAGE = Path(__file__).resolve().parent.parent / "docs" / "composition.md"


def section_code(title: str) -> str:
    return snippets(PAGE, title)


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
