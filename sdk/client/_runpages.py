"""Pages of runs with filters and cursors, for the operator surfaces (CLI, HTTP API).

`Client.list_runs` filters by status, flow, parent (in the store) and what a
waiting run waits on, and returns the newest runs; `page_runs` adds the
filters operators ask for (queue, tenant, created since) and cursor paging on
top of it. Order: newest first, by
``(created_at, run_id)``; a cursor is that pair of the last run of a page, so
a run created while an operator pages does not shift the pages (it sorts
before the cursor and shows up on a fresh first page).

The cost: every page reads the newest runs of the store's status/flow/parent
filter up to the cursor again, so a deep page of a large store is slow; filter
by status, parent or `since` to narrow what is read. Only the newest
`MAX_PAGE` (100,000) runs of that filter are reachable.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import TYPE_CHECKING

import attrs

from sdk._core._checks import (
    MAX_PAGE,
    check_count,
    check_optional_id,
    check_status,
    check_wait_kind,
    show,
)  # fmt: skip
from sdk._core._clock import in_range, instant
from sdk._core._types import RunRecord, RunStatus, WaitKind
from sdk._core._waiting import matches
from sdk.errors import InvalidArgument

if TYPE_CHECKING:
    from sdk.client._client import Client

__all__ = ["RunFilter", "RunPage", "cursor_after", "decode_cursor", "encode_cursor", "page_runs"]

_Key = tuple[float, str]


def _status(value: RunStatus | str | None) -> RunStatus | None:
    return None if value is None else check_status(value)


def _kind(value: WaitKind | str | None) -> WaitKind | None:
    return None if value is None else check_wait_kind(value, "run filter: waiting_on")


@attrs.frozen
class RunFilter:
    """Which runs a page holds; None matches every value.

    Attributes:
        status: a `RunStatus` (or its string).
        flow: a flow name.
        queue: a queue name.
        tenant_id: a tenant id.
        parent_run_id: only the child flows this run started.
        since: only runs created at or after this aware datetime.
        waiting_on: a `WaitKind` (or its string): only runs waiting on one.
        top_level: only runs that neither another run (a child flow) nor a
            schedule's tick started.
    """

    status: RunStatus | None = attrs.field(default=None, converter=_status)
    flow: str | None = None
    queue: str | None = None
    tenant_id: str | None = None
    parent_run_id: str | None = None
    since: datetime | None = None
    waiting_on: WaitKind | None = attrs.field(default=None, converter=_kind)
    top_level: bool = False

    def __attrs_post_init__(self) -> None:
        for name in ("flow", "queue", "tenant_id", "parent_run_id"):
            check_optional_id(getattr(self, name), f"run filter: {name}")
        if self.since is not None:
            instant(self.since, "run filter: since")

    def matches(self, run: RunRecord) -> bool:
        """Whether `run` passes the filters the store did not apply."""
        return (
            (self.queue is None or run.queue == self.queue)
            and (self.tenant_id is None or run.tenant_id == self.tenant_id)
            and (self.status is None or run.status is self.status)
            and (self.since is None or run.created_at >= self.since)
            and (self.waiting_on is None or matches(run, self.waiting_on))
            and (not self.top_level or (run.parent_run_id is None and run.schedule_id is None))
        )


@attrs.frozen
class RunPage:
    """A page of runs, newest first; `next_cursor` None on the last page."""

    runs: list[RunRecord]
    next_cursor: str | None


def _key(run: RunRecord) -> _Key:
    return (run.created_at.timestamp(), run.run_id)


def encode_cursor(run: RunRecord) -> str:
    """The cursor of the page that follows `run` (opaque to callers)."""
    return cursor_after(*_key(run))


def cursor_after(ts: float, run_id: str) -> str:
    """The cursor of the page that starts after the position ``(ts, run_id)``."""
    return base64.urlsafe_b64encode(json.dumps([ts, run_id]).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> _Key:
    """The position a cursor of `encode_cursor` stands for. Raises `InvalidArgument`."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        ts, run_id = json.loads(raw)
        if isinstance(ts, bool) or not isinstance(ts, int | float) or not isinstance(run_id, str):
            raise ValueError(cursor)
        if not in_range(float(ts)):  # no run was created then: a cursor made by hand
            raise ValueError(cursor)
    except (ValueError, TypeError, OverflowError, binascii.Error, UnicodeDecodeError):
        raise InvalidArgument(
            f"cursor: {show(cursor)} is not a cursor of a run listing (pass the next_cursor "
            "of the previous page as it is)"
        ) from None
    return (float(ts), run_id)


async def page_runs(
    client: Client, where: RunFilter | None = None, *, limit: int = 50, cursor: str | None = None
) -> RunPage:
    """The runs matching `where`, newest first, `limit` at most, after `cursor`.

    Raises `InvalidArgument` for a bad limit or cursor.

    Example::

        page = await page_runs(client, RunFilter(status="failed", queue="emails"))
        while page.next_cursor:
            page = await page_runs(client, RunFilter(status="failed"), cursor=page.next_cursor)
    """
    where = where or RunFilter()
    check_count(limit, "runs page: limit")
    after = None if cursor is None else decode_cursor(cursor)
    fetch = min(max(2 * (limit + 1), 100), MAX_PAGE)
    while True:
        rows = await client.list_runs(
            where.status, where.flow, fetch, parent_run_id=where.parent_run_id,
            waiting_on=where.waiting_on,
        )  # fmt: skip
        exhausted = len(rows) < fetch
        rows.sort(key=_key, reverse=True)
        # Runs created at the same instant as the oldest row read may be cut off by
        # the store's limit: the next, larger read decides about them.
        certain = rows if exhausted else [r for r in rows if r.created_at > rows[-1].created_at]
        picked: list[RunRecord] = []
        done = exhausted
        for run in certain:
            if after is not None and _key(run) >= after:
                continue
            if where.since is not None and run.created_at < where.since:
                done = True  # every row after this one is older still
                break
            if where.matches(run):
                picked.append(run)
                if len(picked) > limit:
                    return RunPage(picked[:limit], encode_cursor(picked[limit - 1]))
        if done or fetch >= MAX_PAGE:
            return RunPage(picked, None)
        fetch = min(fetch * 4, MAX_PAGE)
