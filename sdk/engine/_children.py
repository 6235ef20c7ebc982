"""How the engine starts child runs and gives a parent its child's outcome.

**Starting.** Live, the activation starts every ``start_child`` call of a round
together (`start_all`): one pipeline creates the child runs, one more journals
their handles, so a fan-out of 1,000 children costs two round trips, not 2,000.
A child's run id is its parent's id (and generation) plus the call's key
(`sdk._core._keys.child_run_id`), so an activation that dies between the two
writes starts nothing twice: the next one derives the same ids and finds the
runs (``create_run`` answers "exists" with the same arguments).

**Waiting.** ``await handle.result()`` is a wait (key ``~result:<flow>#n``) on the
reserved mailbox ``~child:<child id>``: the parent parks and holds no worker. The
child's end reaches that mailbox through the outbox (`sdk.worker._family`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from sdk._core._journal import Kind, Record, State
from sdk._core._keys import child_run_id
from sdk._core._serde import dumps, encode_exception
from sdk._core._types import Reason, RunStatus
from sdk.client._treecopy import SourceChild, copy_child
from sdk.engine._ops import ChildOp, Outcome, tag
from sdk.errors import (
    CorruptRecord,
    IdempotencyConflict,
)
from sdk.runtime._runtime import ChildHandle
from sdk.store import EventType, NewRun, StartOutcome, StepEvent

if TYPE_CHECKING:
    from sdk.engine._state import ActivationState

__all__ = ["start_all"]


async def start_all(act: ActivationState, ops: list[ChildOp]) -> None:
    """Start the children of one round: one pipeline of starts, one of records. In a
    replayed or forked run, a child its source started is reused or copied instead
    (`sdk.client._treecopy`): those starts cost a call each."""
    writes = act.writes
    batch = writes.batch()
    try:
        now = act.clock.time()
        news = [attrs.evolve(op.new, created_at=now) for op in ops]
        copied = [_source_child(act, op) for op in ops]
        for i, (op, src) in enumerate(zip(ops, copied, strict=True)):
            if src is not None and src.run_id == op.new.run_id:  # the source's own id: taken
                base = act.run_id + (f"~g{act.stored.generation}" if act.stored.generation else "")
                news[i] = attrs.evolve(news[i], run_id=child_run_id(base, op.key))
        fresh = [i for i, src in enumerate(copied) if src is None or src.how == "rerun"]
        data = [
            dumps({"flow": news[i].flow, "queue": news[i].queue, "priority": news[i].priority,
                   "parent_run_id": act.run_id, "step": ops[i].key})
            for i in fresh
        ]  # fmt: skip
        started: list[StartOutcome | None] = [None] * len(ops)
        if fresh:
            created = await writes.guard(act.store.create_runs([news[i] for i in fresh], data))
            for i, out in zip(fresh, created, strict=True):
                started[i] = out
        for i, src in enumerate(copied):
            if src is not None and src.how == "replay":
                started[i] = await _replayed(act, news[i], src)
        for op in ops:  # the children exist, the parent's journal does not say so yet
            act.hooks.call_finished(op)
        r = batch.round
        recs: list[Record] = []
        events: list[StepEvent | None] = []
        outcomes: list[Outcome] = []
        for op, n, out, src in zip(ops, news, started, copied, strict=True):
            conflict = None
            if out is not None and out.conflict:
                conflict = IdempotencyConflict(
                    f"run {act.run_id!r}: start_child({n.flow!r}) at {op.key!r}: run "
                    f"{n.run_id!r} already exists with different arguments or flow"
                )
            elif out is None and src is not None and src.args_hash not in (None, n.args_hash):
                conflict = IdempotencyConflict(
                    f"run {act.run_id!r}: start_child({n.flow!r}) at {op.key!r}: the source "
                    f"run's child {src.run_id!r} was started with other arguments; its recorded "
                    "result is not reused, and it is not run again"
                )
            if conflict is not None:
                exc = conflict
                error = encode_exception(exc)
                recs.append(Record(op.key, op.pos, Kind.CHILD, State.FAILED, error=error,
                                   reason=Reason.FLOW_ERROR, r=r))  # fmt: skip
                events.append(None)
                outcomes.append(Outcome(error=tag(exc, op.key, Reason.FLOW_ERROR)))
                continue
            if out is None:  # reused: the source's child, whose outcome is in the mailbox
                assert src is not None
                child = src.run_id
                events.append(StepEvent(EventType.SIDE_EFFECT_REUSED, dumps(
                    {"child_run_id": child, "source_run_id": act.stored.source_run_id}
                )))  # fmt: skip
            else:
                child = n.run_id
                said: dict[str, Any] = {"child_run_id": child, "flow": n.flow,
                                        "created": out.created}  # fmt: skip
                if src is not None:
                    said["source_run_id"] = src.run_id
                events.append(StepEvent(EventType.CHILD_STARTED, dumps(said)))
            recs.append(Record(op.key, op.pos, Kind.CHILD, State.OK, value=child, r=r))
            outcomes.append(Outcome(ChildHandle(child, n.flow, op.fd)))
        written = await writes.guard(
            act.store.record_many(
                act.run_id, act.fence, [(rec.key, rec.to_json()) for rec in recs],
                now=act.clock.time(), events=events,
            )
        )  # fmt: skip
        if not written:
            writes.fenced(f"child flows started at {ops[0].key!r} were not recorded")
        for op, rec, outcome in zip(ops, recs, outcomes, strict=True):
            op.record = rec
            act.journal.put(rec)
            batch.outcomes.append((op, outcome))
    finally:
        writes.leave(batch)


def _source_child(act: ActivationState, op: ChildOp) -> SourceChild | None:
    """What a replayed or forked run does at this ``start_child`` call, when its source
    made it (`sdk.client._treecopy`); None: start it as any run would."""
    if not act.has_lineage:
        return None
    rec = act.lineage_record(op.key, op.pos, Kind.CHILD)
    return SourceChild.of(rec) if rec is not None else None


async def _replayed(act: ActivationState, new: NewRun, src: SourceChild) -> StartOutcome:
    """Create the child `new` as a replay of the source's child `src`."""
    stored = await act.writes.guard(act.store.get_run(src.run_id))
    if stored is None:  # deleted meanwhile: started afresh
        outs: list[StartOutcome] = await act.writes.guard(act.store.create_runs([new], [""]))
        return outs[0]
    got = await act.writes.guard(
        copy_child(act.store, new, stored, src.children, act.engine.registry)
    )
    if got is not None and got is not True:
        raise CorruptRecord(new.run_id, got.key or "", got.detail or str(got.why))
    return StartOutcome(created=got is None, status=RunStatus.PENDING)
