"""Turning records into HTML: the Jinja environment, its filters, and the Gantt rows.

Templates are package data (``sdk/console/templates``), autoescaped: every
value a flow produced (arguments, results, errors, run ids) is text, never
markup.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import attrs
import jinja2
from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from sdk._core._waiting import groups, key_label, summary
from sdk.client._timeline import TimelineEntry
from sdk.console._auth import ui_of

__all__ = ["GanttRow", "gantt", "page", "pretty"]

#: Pretty JSON longer than this (characters) is shown collapsed.
COLLAPSE_AT = 1_200

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("sdk.console", "templates"),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
)


def pretty(value: Any) -> str:
    """`value` as indented JSON (anything JSON cannot hold as its ``repr``)."""
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def when(value: datetime | float | str | None) -> str:
    """A UTC time to the millisecond; '' for None."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    elif not isinstance(value, datetime):
        value = datetime.fromtimestamp(float(value), UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def duration(secs: float | None) -> str:
    """Seconds, readably: ``12 ms``, ``3.4 s``, ``5 min 2 s``, ``2 h 5 min``."""
    if secs is None:
        return ""
    if secs < 1:
        return f"{secs * 1000:.0f} ms"
    if secs < 60:
        return f"{secs:.1f} s"
    if secs < 3600:
        return f"{int(secs // 60)} min {int(secs % 60)} s"
    return f"{int(secs // 3600)} h {int(secs % 3600 // 60)} min"


def span(secs: float) -> str:
    """A setting's length of time: ``30 minutes``, ``12 hours``, else as `duration`."""
    for unit, size in (("hour", 3600), ("minute", 60)):
        if secs >= size and secs % size == 0:
            count = int(secs // size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return duration(secs)


#: Where a long name may wrap: after these characters (a flow, queue or run id never
#: breaks mid-word: ``shop.order_fulfillment`` wraps after its dot, if at all).
_BREAKS = re.compile(r"([.:@~#/_-]+)")


def breakable(text: Any) -> Markup:
    """`text`, escaped, with a line-break opportunity (``<wbr>``) after each separator."""
    if text is None:
        return Markup("")
    out = []
    for i, part in enumerate(_BREAKS.split(str(text))):  # word, separators, word...
        out.append(str(escape(part)))
        if i % 2:
            out.append("<wbr>")
    return Markup("".join(out))


def short(value: datetime | float | str | None) -> str:
    """A UTC time to the second (``2026-05-01 10:42:03Z``); '' for None."""
    full = when(value)
    return f"{full[:19]}Z" if full else ""


def waiting_summary(entries: Any) -> str:
    """What a waiting run waits on, in a few words (`sdk._core._waiting.summary`)."""
    return summary(tuple(entries or ()))


def ago(value: datetime | None, now: datetime) -> str:
    """``12 s ago``, ``3 min ago``; '' for None."""
    if value is None:
        return ""
    return f"{duration(max((now - value).total_seconds(), 0.0))} ago"


_ENV.filters.update(
    pretty=pretty, when=when, duration=duration, span=span, breakable=breakable, short=short,
    waiting=waiting_summary, wait_groups=lambda e: groups(tuple(e or ())), step_label=key_label,
)  # fmt: skip


def until(value: datetime | None, now: datetime) -> str:
    """``in 12 s``, ``in 3 min``; ``due`` once passed; '' for None."""
    if value is None:
        return ""
    left = (value - now).total_seconds()
    return f"in {duration(left)}" if left > 0 else "due"


_ENV.globals.update(COLLAPSE_AT=COLLAPSE_AT, ago=ago, until=until)


@attrs.frozen
class GanttRow:
    """One bar of the timeline: where it sits on the run's time axis, in percent."""

    depth: int
    kind: str
    label: str
    status: str | None
    left: float
    width: float
    started_at: datetime | None
    ended_at: datetime | None
    duration: float | None
    detail: str | None


def gantt(root: TimelineEntry, now: datetime) -> list[GanttRow]:
    """The timeline's entries, depth first, each placed on the run's span.

    An entry still going on reaches to `now`; an event (no duration) is a
    thin mark at its instant.
    """
    flat: list[tuple[int, TimelineEntry]] = []

    def walk(entry: TimelineEntry, depth: int) -> None:
        flat.append((depth, entry))
        for sub in entry.entries:
            walk(sub, depth + 1)

    walk(root, 0)
    starts = [e.started_at for _, e in flat if e.started_at is not None]
    ends = [e.ended_at for _, e in flat if e.ended_at is not None] + starts
    t0 = min(starts, default=now)
    running = root.ended_at is None
    t1 = max([*ends, now] if running else ends, default=now)
    span = max((t1 - t0).total_seconds(), 1e-6)

    def pct(at: datetime) -> float:
        return min(max((at - t0).total_seconds() / span * 100, 0.0), 100.0)

    rows = []
    for depth, e in flat:
        start = e.started_at or t0
        if e.kind == "event":
            end = start
        else:
            end = e.ended_at or (now if running or e.status == "waiting" else start)
        left = pct(start)
        width = max(pct(end) - left, 0.0)
        rows.append(GanttRow(depth, e.kind, e.label, e.status, round(left, 3), round(width, 3),
                             e.started_at, e.ended_at, e.duration, e.detail))  # fmt: skip
    return rows


def page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """Render `template` with `context` plus what every page needs (its root path)."""
    ui = ui_of(request)
    html = _ENV.get_template(template).render(ui=ui, request=request, **context)
    return HTMLResponse(
        html,
        status_code=status,
        headers={
            # scripts, styles and images from the console itself only; no framing
            "Content-Security-Policy": "default-src 'self'; style-src 'self'; "
            "style-src-attr 'unsafe-inline'; frame-ancestors 'none'; "
            "base-uri 'none'; form-action 'self'",
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "same-origin",
            "Cache-Control": "no-store",
        },
    )
