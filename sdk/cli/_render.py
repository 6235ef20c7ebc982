"""Output of the operator commands: JSON (``--json``) and rich tables and trees.

JSON goes to stdout as the shapes of `sdk.client._jsonshapes` (one document, or one
object per line for a live feed). Tables and trees are for people: their
layout may change between releases; scripts read ``--json``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from sdk.client._timeline import TimelineEntry

__all__ = [
    "compact", "console", "duration", "echo_json", "fields", "status", "table", "timeline_tree",
    "when",
]  # fmt: skip

# A terminal gets its own width; a pipe or file gets wide lines rather than
# ids cut short.
_PIPE_WIDTH = 200

STATUS_STYLE = {
    "completed": "green", "failed": "red", "canceled": "yellow", "running": "cyan",
    "replaying": "cyan", "pending": "blue", "waiting_for_signal": "magenta",
    "waiting_for_human": "magenta", "waiting": "magenta", "retrying": "yellow",
    "timed_out": "red",
}  # fmt: skip


def console() -> Console:
    """A console on the current stdout (click's test runner swaps it)."""
    terminal = sys.stdout.isatty()
    return Console(
        file=sys.stdout,
        width=None if terminal else _PIPE_WIDTH,
        highlight=False,
        no_color=not terminal,
        soft_wrap=False,
    )


def echo_json(data: Any, *, lines: bool = False) -> None:
    """`data` as JSON on stdout: indented, or one line (`lines`, for a live feed)."""
    text = json.dumps(data, ensure_ascii=False, indent=None if lines else 2, default=str)
    click.echo(text)


def when(value: datetime | None) -> str:
    """A time for a table: ISO 8601 in UTC, to the second; ``-`` for none."""
    if value is None:
        return "-"
    return value.isoformat(timespec="seconds").replace("+00:00", "Z")


def duration(seconds: float | None) -> str:
    """``1.25s``, ``3m05s``, ``2h10m``; ``-`` for none."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.3g}s" if seconds < 10 else f"{seconds:.0f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours < 48 else f"{hours // 24}d{hours % 24:02d}h"


def status(text: str | None) -> Text:
    """A status, coloured on a terminal."""
    if text is None:
        return Text("-")
    return Text(text, style=STATUS_STYLE.get(text, ""))


def compact(value: Any) -> str:
    """A JSON value on one line (a result, an event's data)."""
    return json.dumps(value, ensure_ascii=False, default=str)


def _cell(value: Any) -> Text:
    # Text, never markup: a run id or a message with "[...]" in it prints as it is
    if isinstance(value, Text):
        return value
    return Text("-" if value is None else str(value))


def table(
    columns: Sequence[str], rows: Iterable[Sequence[Any]], *, title: str | None = None
) -> None:
    """A table on stdout; cells are shown as their text (`status` ones coloured)."""
    t = Table(title=title, show_edge=False, pad_edge=False, box=None, header_style="bold")
    for name in columns:
        t.add_column(name, overflow="fold")
    for row in rows:
        t.add_row(*(_cell(cell) for cell in row))
    console().print(t)


def fields(pairs: Iterable[tuple[str, Any]]) -> None:
    """``name  value`` lines, skipping values that are None or empty."""
    t = Table(show_header=False, show_edge=False, pad_edge=False, box=None)
    t.add_column(style="bold")
    t.add_column(overflow="fold")
    for name, value in pairs:
        if value is not None and value != "":
            t.add_row(name, _cell(value))
    console().print(t)


def timeline_tree(root: TimelineEntry) -> None:
    """The timeline as a tree: each line ``+offset  kind label  status  duration  detail``."""
    origin = root.started_at
    tree = Tree(_line(root, origin))
    _add(tree, root.entries, origin)
    console().print(tree)


def _add(tree: Tree, entries: list[TimelineEntry], origin: datetime | None) -> None:
    for entry in entries:
        branch = tree.add(_line(entry, origin))
        _add(branch, entry.entries, origin)


def _line(entry: TimelineEntry, origin: datetime | None) -> str:
    offset = "-"
    if origin is not None and entry.started_at is not None:
        offset = "+" + duration((entry.started_at - origin).total_seconds())
    parts = [f"[dim]{offset:>8}[/]", f"{escape(entry.kind)} [bold]{escape(entry.label)}[/]"]
    if entry.status is not None:
        parts.append(status(entry.status).markup)
    if entry.duration is not None:
        parts.append(duration(entry.duration))
    elif entry.status in ("running", "waiting", "retrying", "pending") or (
        entry.kind in ("run", "child") and entry.ended_at is None
    ):
        parts.append("…")  # goes on
    if entry.detail:  # its first line: `runs show` has a long error whole
        first, _, more = entry.detail.partition("\n")
        parts.append(f"[dim]{escape(first)}{' …' if more else ''}[/]")
    return "  ".join(parts)
