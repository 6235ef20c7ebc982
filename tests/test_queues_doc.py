"""The snippets of docs/queues-and-schedules.md ("Queues") run and do what the page says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.docsnippets import section_code as snippets

PAGE = Path(__file__).resolve().parent.parent / "docs" / "queues-and-schedules.md"


def section_code(title: str) -> str:
    return snippets(PAGE, title)


@pytest.mark.xdist_group("docs-queues")  # the snippets register flows once per process
async def test_the_queues_snippets_run() -> None:
    namespace: dict[str, Any] = {"__name__": "docs_queues"}
    exec(compile(section_code("Queues"), str(PAGE), "exec"), namespace)
    await namespace["main"]()
    assert namespace["SENT"] == ["ann@example.com", "bob@example.com"]
