"""The runnable snippets of a docs page: what the docs tests execute."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def section_code(page: Path, title: str) -> str:
    """The ```python blocks of `page`'s section `title` (its subsections too), in
    order, as one module."""
    text = page.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    blocks = re.findall(r"^```python\n(.*?)^```$", section, re.S | re.M)
    assert blocks, f"no python snippet under {title!r} in {page.name}"
    return "\n".join(blocks)
