"""The snippets of docs/changing-flows.md run and do what the page says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.docsnippets import section_code

PAGE = Path(__file__).resolve().parent.parent / "docs" / "changing-flows.md"


async def test_the_patching_example_runs_the_whole_lifecycle() -> None:
    # Each deployment is a Registry of its own: the snippet can run in any process.
    namespace: dict[str, Any] = {"__name__": "docs_changing_patching"}
    exec(compile(section_code(PAGE, "Patching"), str(PAGE), "exec"), namespace)
    await namespace["main"]()


async def test_the_version_routing_example_serves_each_run_on_its_version() -> None:
    namespace: dict[str, Any] = {"__name__": "docs_changing_routing"}
    exec(compile(section_code(PAGE, "Version routing"), str(PAGE), "exec"), namespace)
    await namespace["main"]()
