"""What resuming a canceled run discards (docs/lifecycle.md, "Resume").

A run whose flow was given its cancel holds the ``~cancel`` record
(`sdk.engine._cursor.CANCEL_KEY`) and whatever its cleanup recorded after it. A
resume continues the run from before the cancel: the cancel and the cleanup's
records go, so the flow is not canceled again and its cleanup is not replayed.

Which records the cleanup wrote is read from the journal's write numbers (the
store's, `Lineage.written`) and the calls' positions: a record written after
the cancel is the cleanup's unless its call was made before the cancel was
given (positions are taken in call order, and the cleanup's calls come after
every call made before the cancel). Such a call (a wait of a task the cancel
did not reach, completed during the cleanup) keeps its record, as its outcome
was recorded and consumed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sdk._core._journal import Record
from sdk._core._keys import CANCEL_KEY
from sdk.errors import CorruptRecord, RunNotFound
from sdk.store import CorruptData, Lineage, Rewind

if TYPE_CHECKING:
    from sdk.store import Store

__all__ = ["cancel_rewind", "read_rewind"]


async def read_rewind(store: Store, run_id: str) -> Rewind | None:
    """`cancel_rewind` of the canceled run `run_id`, as the store holds it now."""
    try:
        source = await store.read_lineage(run_id)
    except CorruptData as e:  # a damaged journal is not rewound
        raise CorruptRecord(e.run_id, e.key, e.detail) from None
    if source is None:
        raise RunNotFound(run_id)
    return cancel_rewind(source)


def cancel_rewind(source: Lineage) -> Rewind | None:
    """The records a resume of canceled run `source` drops, and the checkpoint it
    continues from (the newest taken before the cancel was given); None when the
    flow was not given its cancel (a forced cancel): then nothing is dropped."""
    journal, written = source.journal, source.written
    if CANCEL_KEY not in journal:
        return None
    last = max(written.values(), default=0)
    given = written.get(CANCEL_KEY, last)  # (no write number: nothing after it)
    records = {key: Record.from_json(raw) for key, raw in journal.items() if key != CANCEL_KEY}
    # the last call the flow made before the cancel: one with a record written before it
    made = max((rec.pos for key, rec in records.items() if written.get(key, 0) < given), default=-1)
    cleanup = sorted(
        key for key, rec in records.items() if written.get(key, 0) > given and rec.pos > made
    )
    before = [c.checkpoint_id for c in source.checkpoints if c.seq < given]
    return Rewind(source.run.fence, (CANCEL_KEY, *cleanup), max(before, default=0))
