"""The snippets of docs/testing.md on stubs, history, the fake clock and the crash check run."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from tests.docsnippets import section_code

PAGE = Path(__file__).resolve().parent.parent / "docs" / "testing.md"


@pytest.mark.xdist_group("docs-testing")  # the snippets register flows once per process
@pytest.mark.parametrize(
    "title", ["The fake clock", "Stubbing steps", "History", "Crash everywhere"]
)
async def test_the_testing_page_snippets_run(title: str) -> None:
    # A module in sys.modules, as a user's test file is: freezegun fakes the
    # `datetime` it imported only in modules it can find there.
    name = f"docs_testing_{title.lower().replace(' ', '_')}"
    module = types.ModuleType(name)
    sys.modules[name] = module
    try:
        exec(compile(section_code(PAGE, title), str(PAGE), "exec"), module.__dict__)
        await module.main()
    finally:
        del sys.modules[name]
