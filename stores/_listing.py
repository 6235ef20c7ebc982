"""The newest runs of several partitions, merged: `list_runs` on a partitioned store.

Each partition keeps its runs in sorted sets scored by creation time (all runs,
by status, by parent). A listing reads each partition's index newest first, a
page at a time, keeps the runs that match, and merges the partitions by score
until it has `limit` runs. The first pages of every partition are read at once;
after that only a partition whose runs are being taken is read further. So a
listing reads about `limit` runs plus a page per partition, not `limit` per
partition.
"""

from __future__ import annotations

import asyncio
import heapq
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import ResponseError

from sdk.store._records import StoredRun
from stores import _decode
from stores._keys import Keys

__all__ = ["Partition", "merged"]

#: A run read from the index: (its score, the run).
_Scored = tuple[float, StoredRun]


class Partition:
    """One partition's index, read newest first, a page at a time: the runs that match."""

    def __init__(
        self,
        client: Any,
        keys: Keys,
        index: str,
        page: int,
        wanted: Callable[[StoredRun], bool],
        mistyped: Callable[[str, str, ResponseError], Awaitable[StoredRun]],
        unindexed: Callable[[str, ResponseError], Awaitable[Exception]],
    ) -> None:
        self._client = client
        self._keys = keys
        self._index = index
        self._page = page
        self._wanted = wanted
        self._mistyped = mistyped
        self._unindexed = unindexed
        self._start = 0
        self.done = False
        self.runs: deque[_Scored] = deque()

    async def fill(self) -> None:
        """Read pages until a matching run is buffered or the index is read to its end."""
        while not self.runs and not self.done:
            end = self._start + self._page - 1
            try:
                scored: Any = await self._client.zrevrange(
                    self._index, self._start, end, withscores=True
                )
            except ResponseError as e:  # the index itself cannot be read
                raise await self._unindexed(self._index, e) from None
            if len(scored) < self._page:
                self.done = True
            if not scored:
                return
            self._start += len(scored)
            async with self._client.pipeline(transaction=False) as pipe:
                for run_id, _ in scored:
                    pipe.hgetall(self._keys.run(run_id))
                # one damaged record must not fail the page: its error comes
                # back in its place, and the run is listed as damaged
                hashes = await pipe.execute(raise_on_error=False)
            for (run_id, score), h in zip(scored, hashes, strict=True):
                key = self._keys.run(run_id)
                if isinstance(h, ResponseError):
                    run = await self._mistyped(run_id, key, h)
                elif h:
                    run = _decode.stored_run(run_id, h, key)
                else:
                    continue  # a stale index entry: the run is gone
                if self._wanted(run):
                    self.runs.append((float(score), run))


async def merged(parts: list[Partition], limit: int) -> list[StoredRun]:
    """The newest `limit` matching runs of all `parts`, newest first (by creation time)."""
    await asyncio.gather(*(part.fill() for part in parts))
    heads = [(-part.runs[0][0], i) for i, part in enumerate(parts) if part.runs]
    heapq.heapify(heads)
    found: list[StoredRun] = []
    while heads and len(found) < limit:
        _, i = heapq.heappop(heads)
        part = parts[i]
        found.append(part.runs.popleft()[1])
        await part.fill()
        if part.runs:
            heapq.heappush(heads, (-part.runs[0][0], i))
    found.sort(key=lambda r: r.created_at, reverse=True)
    return found
