"""Starting runs: one (`create_run`), a batch of children (`create_runs`), or a
replay or fork of another run (`derive_run`).

A flow that fans out (``asyncio.gather`` of 1,000 ``run_child`` calls) starts
its children in one batch (and journals their handles in another:
`stores._writes.FencedWrites.record_many`): each is a pipeline of the same
script a single start (``start``) runs, so each run's write stays one atomic
script on its own partition (a child may live on another partition, or
another cluster node, than its parent), and the batch costs one round trip
per pipeline (on Redis Cluster, one per node, concurrently) instead of one
per child.
"""

from __future__ import annotations

from collections.abc import Sequence

from sdk.store import EventType, Mailbox, NewRun, Refused, RunStatus, StartOutcome
from stores import _codec, _decode
from stores._codec import mailbox_name
from stores._keys import Keys
from stores._storecore import StoreCore

__all__ = ["Starts"]


class Starts:
    """`create_run`, `create_runs` and `derive_run`."""

    def __init__(self, core: StoreCore) -> None:
        self._core = core
        self._keys = core.keys

    async def create_run(
        self, new: NewRun, event_data: str = "", *, max_pending: int | None = None
    ) -> StartOutcome:
        reply = await self._core.call(
            "start",
            [self._keys.run(new.run_id)],
            _start_args(self._keys, new, event_data, max_pending),
        )
        code, status = _decode.corrupt(new.run_id, reply)  # an existing record may be damaged
        if code == -2:  # the queue is full: nothing written
            return StartOutcome(created=False, status=RunStatus.PENDING, full=int(status))
        return StartOutcome(created=code == 1, status=RunStatus(status), conflict=code == -1)

    async def create_runs(
        self, news: Sequence[NewRun], event_data: Sequence[str]
    ) -> list[StartOutcome]:
        k = self._keys
        calls = [
            ([k.run(n.run_id)], _start_args(k, n, data, None))
            for n, data in zip(news, event_data, strict=True)
        ]
        out = []
        for n, reply in zip(news, await self._core.pipelined("start", calls), strict=True):
            code, status = _decode.corrupt(n.run_id, reply)
            out.append(
                StartOutcome(created=code == 1, status=RunStatus(status), conflict=code == -1)
            )
        return out

    async def derive_run(
        self,
        new: NewRun,
        journal: Sequence[tuple[str, str]],
        lineage: Sequence[tuple[str, str]],
        event_type: EventType,
        event_data: str,
        mail: Sequence[tuple[Mailbox, str, str]] = (),
    ) -> Refused | None:
        k = self._keys
        fields = _codec.run_fields(new)
        reply = await self._core.call(
            "derive",
            [k.run(new.run_id), k.journal(new.run_id)],
            [
                k.base_of(new.run_id), new.run_id, new.args_hash, str(event_type), event_data,
                str(len(fields) // 2), *fields,
                str(len(journal)), *(x for pair in journal for x in pair),
                str(len(mail)),
                *(x for box, payload, dedup in mail for x in (mailbox_name(box), payload, dedup)),
                *(x for pair in lineage for x in pair),
            ],
        )  # fmt: skip
        return _codec.refused(reply)


def _start_args(k: Keys, new: NewRun, event_data: str, max_pending: int | None) -> list[str]:
    """The ``start`` script's arguments (one start, or one of a batch: no queue cap)."""
    return [
        k.base_of(new.run_id), new.run_id, new.args_hash, event_data,
        "" if max_pending is None else str(max_pending), *_codec.run_fields(new),
    ]  # fmt: skip
