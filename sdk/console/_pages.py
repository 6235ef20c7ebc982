"""The list pages: runs (filters, status counts, cursor paging), queues, schedules,
workers; and signing in and out."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from sdk._core._checks import check_optional_id
from sdk._core._clock import instant
from sdk._core._types import RunRecord, RunStatus, WaitKind
from sdk.client._runpages import RunFilter, cursor_after, page_runs
from sdk.client._timeline import run_duration
from sdk.console._auth import (
    COOKIE,
    LEGACY_COOKIE,
    csrf_ok,
    form_of,
    safe_next,
    session_of,
    token_actor,
    ui_of,
)
from sdk.console._render import page
from sdk.console._state import Console
from sdk.errors import InvalidArgument, SteadyflowError
from sdk.http._guard import cross_site

__all__ = ["queues", "runs", "schedules", "signin", "signin_form", "signout", "status_counts",
           "workers"]  # fmt: skip

#: Status counts stop at this many runs per status (shown as "1,000+").
COUNT_CAP = 1_000
#: Most runs one page of the list shows.
PAGE_MAX = 200
#: Runs a run-id search reads at most (newest first).
SEARCH_SCAN = 5_000
_FILTERS = ("status", "waiting_on", "flow", "queue", "tenant_id", "since", "until", "q",
            "children", "parent")  # fmt: skip


def _utc(text: str, what: str) -> datetime:
    """A time from a ``datetime-local`` field (read as UTC) or ISO 8601 text, in the
    range of times Steadyflow stores (`instant`)."""
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{what}: {text[:40]!r} is not a date and time") from None
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at
    instant(at, what)
    return at


def _before(at: datetime) -> str:
    """A runs-page cursor that starts the listing just after `at` (older runs only)."""
    return cursor_after(at.timestamp(), "\U0010ffff")  # after every run id of that instant


async def runs(request: Request, console: Console, actor: str) -> Response:
    """``GET /ui/runs``: a page of runs, newest first."""
    q = request.query_params
    given = {k: q[k].strip() for k in _FILTERS if q.get(k, "").strip()}
    error, found, next_cursor, note = None, list[RunRecord](), None, None
    limit = 50
    try:
        limit = _limit(q.get("limit", "").strip())
        since = _utc(given["since"], "since") if "since" in given else None
        cursor = q.get("cursor") or None
        if "until" in given and cursor is None:
            cursor = _before(_utc(given["until"], "until"))
        where = RunFilter(
            status=given.get("status"), flow=given.get("flow"), queue=given.get("queue"),
            tenant_id=given.get("tenant_id"), since=since, waiting_on=given.get("waiting_on"),
            parent_run_id=given.get("parent"),
            # the unfiltered list is an overview: child flows are on their parent's
            # page and schedule ticks on the Schedules page, unless asked for; any
            # filter searches every run
            top_level=not any(k in given for k in _FILTERS),
        )  # fmt: skip
        text = given.get("q")
        if text:
            found, note = await _search(console, where, text, limit)
            if len(found) == 1 and found[0].run_id == text:
                ui = ui_of(request)
                return RedirectResponse(f"{ui}/runs/{text}", status_code=303)
        else:
            got = await page_runs(console.client, where, limit=limit, cursor=cursor)
            found, next_cursor = got.runs, got.next_cursor
    except (SteadyflowError, ValueError) as exc:
        error = str(exc)
    return page(
        request, "runs.html", status=200 if error is None else 422, actor=actor,
        csrf=console.csrf_key.csrf(actor), runs=found, next_cursor=next_cursor, filters=given,
        statuses=[s.value for s in RunStatus], kinds=[k.value for k in WaitKind], error=error,
        note=note, limit=limit, first_page=not q.get("cursor"), now=datetime.now(UTC),
        tenants=any(r.tenant_id for r in found), run_duration=run_duration,
    )  # fmt: skip


def _limit(text: str) -> int:
    """Runs per page: 1..`PAGE_MAX` (a larger number is cut down; 50 if not given)."""
    if not text:
        return 50
    # ASCII digits only: "²" is a digit to str.isdigit, but no int
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"limit: {text[:20]!r} is not a number of runs (1..{PAGE_MAX})")
    return min(max(int(text), 1), PAGE_MAX) if len(text) < 10 else PAGE_MAX


async def _search(
    console: Console, where: RunFilter, text: str, limit: int
) -> tuple[list[RunRecord], str | None]:
    """Runs whose id holds `text`: the exact id at once, else a scan of the newest."""
    try:
        exact = await console.client.get(text)
    except SteadyflowError:
        exact = None
    if exact is not None and where.matches(exact):
        return [exact], None
    hits: list[RunRecord] = []
    cursor, read = None, 0
    while read < SEARCH_SCAN and len(hits) < limit:
        got = await page_runs(console.client, where, limit=500, cursor=cursor)
        read += len(got.runs)
        hits.extend(r for r in got.runs if text in r.run_id)
        cursor = got.next_cursor
        if cursor is None:
            return hits[:limit], None
    return hits[:limit], f"searched the newest {read:,} runs that match the other filters"


async def status_counts(request: Request, console: Console, actor: str) -> Response:
    """``GET /ui/counts``: how many runs each status has (up to `COUNT_CAP`)."""
    flow = request.query_params.get("flow") or None
    try:
        check_optional_id(flow, "flow")
    except InvalidArgument as exc:
        return Response(str(exc), status_code=422)
    counts = console.cached(("counts", flow))
    if counts is None:
        found = await asyncio.gather(
            *(console.client.list_runs(s, flow, COUNT_CAP + 1) for s in RunStatus)
        )
        counts = {s.value: len(rows) for s, rows in zip(RunStatus, found, strict=True)}
        console.remember(("counts", flow), counts)
    return page(request, "counts.html", counts=counts, cap=COUNT_CAP, flow=flow)


async def queues(request: Request, console: Console, actor: str) -> Response:
    """``GET /ui/queues``: depth, executing, limits of each queue."""
    error, found = None, []
    try:
        found = await console.client.queues()
    except SteadyflowError as exc:
        error = str(exc)
    return page(request, "queues.html", actor=actor, csrf=console.csrf_key.csrf(actor),
                queues=found, error=error)  # fmt: skip


async def schedules(request: Request, console: Console, actor: str) -> Response:
    """``GET /ui/schedules``: every schedule, its next tick and its last run's status."""
    error, found, last = None, [], {}
    try:
        found = await console.client.list_schedules()
        ran = [s for s in found if s.last_run_id]
        got = await asyncio.gather(
            *(console.client.get(s.last_run_id or "") for s in ran), return_exceptions=True
        )
        last = {
            s.schedule_id: r.status.value
            for s, r in zip(ran, got, strict=True)
            if isinstance(r, RunRecord)  # a run deleted since: no status
        }
    except SteadyflowError as exc:
        error = str(exc)
    return page(request, "schedules.html", actor=actor, csrf=console.csrf_key.csrf(actor),
                schedules=found, last=last, error=error)  # fmt: skip


async def workers(request: Request, console: Console, actor: str) -> Response:
    """``GET /ui/workers``: live workers, their slots and what they serve."""
    error, found = None, []
    try:
        found = await console.client.workers()
    except SteadyflowError as exc:
        error = str(exc)
    return page(request, "workers.html", actor=actor, csrf=console.csrf_key.csrf(actor),
                workers=found, error=error, now=datetime.now(UTC))  # fmt: skip


async def signin_form(request: Request, console: Console) -> Response:
    """``GET /ui/signin``: the token form."""
    return page(request, "signin.html", next=safe_next(request, request.query_params.get("next")),
                error=None, sessions=console.settings.sessions)  # fmt: skip


async def signin(request: Request, console: Console) -> Response:
    """``POST /ui/signin``: check the token as the API would, then open a session for its
    actor; the cookie holds the session's id, never the token."""
    form = await form_of(request, console.settings)
    token, target = str(form.get("token", "")).strip(), safe_next(request, str(form.get("next")))
    sessions = console.settings.sessions
    if cross_site(request.headers) is not None:  # no signing in from another site's form
        return page(request, "signin.html", status=403, next=target, sessions=sessions,
                    error="Sign in from this server's own sign-in page.")  # fmt: skip
    actor = await token_actor(request, console.settings, token) if token else None
    if actor is None:
        return page(request, "signin.html", status=401, next=target, sessions=sessions,
                    error="That token is not known to this server.")  # fmt: skip
    brought = session_of(request)
    if brought is not None:  # a sign-in opens a new session, never goes on with one it was given
        sessions.close(brought)
    ui = ui_of(request)
    answer = RedirectResponse(target, status_code=303)
    answer.set_cookie(
        COOKIE, sessions.open(actor, token), httponly=True, samesite="strict",
        secure=request.url.scheme == "https", path=ui,
    )  # fmt: skip
    if LEGACY_COOKIE in request.cookies:  # the token itself, kept by an older version
        answer.delete_cookie(LEGACY_COOKIE, path=ui)
    return answer


async def signout(request: Request, console: Console, actor: str) -> Response:
    """``POST /ui/signout``: end the session (its cookie no longer works, even replayed)
    and forget the cookie."""
    form = await form_of(request, console.settings)
    if not csrf_ok(request, console.csrf_key, actor, str(form.get("csrf", ""))):
        return Response("the form is stale: reload the page", status_code=403)
    session_id = session_of(request)
    if session_id is not None:
        console.settings.sessions.close(session_id)
    ui = ui_of(request)
    answer = RedirectResponse(f"{ui}/signin", status_code=303)
    answer.delete_cookie(COOKIE, path=ui)
    return answer
