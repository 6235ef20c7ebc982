"""Child flows: ``start_child``, ``run_child``, `ChildHandle`, and how a child's end
reaches its parent.

**Starting.** ``start_child`` is a journaled call (key ``~child:<flow>#n``). Live,
the activation starts every child call of a round together (`start_all`): one
pipeline creates the child runs, one more journals their handles, so a fan-out
of 1,000 children costs two round trips, not 2,000. A child's run id is its
parent's id (and generation) plus the call's key, so an activation that dies
between the two writes starts nothing twice: the next one derives the same ids
and finds the runs (``create_run`` answers "exists" with the same arguments).

**Waiting.** ``await handle.result()`` is a wait (key ``~result:<flow>#n``) on the
reserved mailbox ``~child:<child id>``: the parent parks and holds no worker.

**The end.** Every script that ends a run (finish, cancel, a run timeout, too
many recoveries, quarantine) queues an engine-internal outbox intent on the
``~child`` channel when the run has a parent, in the same atomic write (the
intent lives in the child's partition: no cross-partition write). Every
worker's dispatcher serves that channel (`internal_channels`): it reads the
child's outcome and signals the parent's mailbox with the dedup id
``~child:<child id>``, so a delivery repeated after a crash adds nothing. A
canceled run's ``~cascade`` intent cancels its unfinished children (those not
started with ``parent_close="abandon"``), and theirs cancel theirs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from sdk._checks import MAX_ID, check_id, check_new_run_id, show
from sdk._journal import Kind, Record, State
from sdk._ops import Op, Outcome, WaitOp, tag
from sdk._outbox import ChannelDef, Intent
from sdk._retry import RetryPolicy
from sdk._runs import DEFAULT_CANCEL_GRACE, cancel_run
from sdk._serde import converter, dumps, encode_exception, rebuild_exception
from sdk._starting import new_run
from sdk._treecopy import SourceChild, copy_child, outcome_payload
from sdk._types import ErrorInfo, Reason, RunOptions, RunStatus
from sdk.errors import (
    ChildFailed,
    CorruptRecord,
    IdempotencyConflict,
    InvalidArgument,
    RunCanceled,
)
from stores.protocol import EventType, Mailbox, NewRun, StartOutcome, StepEvent

if TYPE_CHECKING:
    from sdk._activation import Activation
    from sdk._clock import Clock
    from sdk._flowdef import FlowDef
    from sdk._values import Serializer
    from stores.protocol import Store

__all__ = [
    "CASCADE_CHANNEL",
    "CHILD_CHANNEL",
    "ChildHandle",
    "ChildOp",
    "ChildWaitOp",
    "child_run_id",
    "internal_channels",
    "make_child_op",
    "run_child",
    "start_all",
    "start_child",
]

#: The engine-internal outbox channels every worker serves.
CHILD_CHANNEL = "~child"
CASCADE_CHANNEL = "~cascade"

_PARENT_CLOSE = ("cancel", "abandon")
_LISTED = 100_000  # the most children a cascade cancels (per canceled run)


class ChildHandle:
    """A child flow started by `start_child`: its run id, and its result.

    A handle is a value of the parent's journal: a replay gets an equal one.
    """

    __slots__ = ("_done", "_fd", "flow", "run_id")

    def __init__(self, run_id: str, flow: str, fd: FlowDef | None) -> None:
        self.run_id = run_id
        self.flow = flow
        self._fd = fd
        self._done: Outcome | None = None

    def __repr__(self) -> str:
        return f"ChildHandle({self.run_id!r}, flow={self.flow!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChildHandle) and other.run_id == self.run_id

    def __hash__(self) -> int:
        return hash(self.run_id)

    async def result(self) -> Any:
        """Wait durably until the child ends; return its result.

        The parent parks (``waiting_for_signal``) and holds no worker; the
        child's end wakes it. The outcome is journaled in the parent, so a
        replay returns (or raises) the same without waiting. Awaiting it
        again returns the same outcome.

        Raises:
            ChildFailed: the child failed (a `RunFailed`; ``.error`` is the
                child's error).
            RunCanceled: the child was canceled.
        """
        if self._done is None:
            act = _activation("ChildHandle.result()")
            try:
                value = await act.child_result(self)
            except (ChildFailed, RunCanceled) as exc:
                self._done = Outcome(error=exc)
                raise
            self._done = Outcome(value)
            return value
        if self._done.error is not None:
            raise self._done.error
        return self._done.value


def _activation(what: str) -> Activation:
    from sdk._primitives import _activation as check  # (the same rules as wait_for)

    return check(what)


def start_child(
    flow: Callable[..., Any] | str,
    *args: Any,
    run_id: str | None = None,
    priority: int = 0,
    queue: str | None = None,
    tenant_id: str | None = None,
    options: RunOptions | None = None,
    parent_close: str = "cancel",
    concurrency_key: str | None = None,
    start_at: datetime | None = None,
    start_in: float | timedelta | None = None,
    **kwargs: Any,
) -> Coroutine[Any, Any, ChildHandle]:
    """Start `flow` as a child of the current run; return its `ChildHandle`.

    Journaled: a replay returns the same handle and starts nothing. The child
    is a run of its own (any worker serving its flow runs it, on any partition)
    whose record names its parent (`RunRecord.parent_run_id`). The options are
    `Client.start`'s (their names are reserved: not passed to the flow).

    Args:
        flow: a ``@flow`` function, or the name of a flow defined elsewhere.
        run_id: the child's id. Default: the parent's id and this call's key
            (``"<parent>~child:<flow>#<n>"``), so a crash between starting the
            child and journaling it cannot start two. An id of your own must be
            just as deterministic (never random).
        priority, queue: as for `Client.start` (default: the flow's queue).
        tenant_id: default: the parent's tenant.
        options: `RunOptions`; the trace id defaults to the parent's, so a tree
            of runs shares one trace.
        parent_close: ``"cancel"`` (default): canceling the parent cancels this
            child if it has not ended; ``"abandon"``: the child runs on.
        concurrency_key, start_at, start_in: as for `Client.start` (a child is
            never refused by its queue's ``max_pending``: it is part of work
            already admitted).

    Example::

        handle = await start_child(charge_card, order_id, amount)
        receipt = await handle.result()
    """
    act = _activation("start_child()")
    if parent_close not in _PARENT_CLOSE:
        raise InvalidArgument(
            f"start_child(): parent_close must be 'cancel' or 'abandon', got {show(parent_close)}"
        )
    if run_id is not None:
        check_new_run_id(run_id, "start_child(): run_id")
    fd = (
        act.engine.registry.find_flow(check_id(flow, "start_child(): flow"))
        if isinstance(flow, str)
        else _flow_def(flow)
    )
    target: FlowDef | str = fd if fd is not None else str(flow)
    stored = act.stored
    opts = options
    if opts is None or opts.trace_id is None:
        opts = attrs.evolve(opts or RunOptions(), trace_id=stored.trace_id or act.run_id)
    new = new_run(
        target, args, kwargs, act.serializer, run_id=run_id or "", priority=priority,
        queue=queue, tenant_id=tenant_id if tenant_id is not None else stored.tenant_id,
        options=opts, now=0.0, parent_run_id=act.run_id,
        tree_root_run_id=stored.tree_root_run_id or act.run_id, abandon=parent_close == "abandon",
        concurrency_key=concurrency_key, start_at=start_at, start_in=start_in,
        queues=act.engine.registry.queues(),
    )  # fmt: skip
    return act.start_child(new, fd, run_id is not None)  # (the default id: from the key)


async def run_child(flow: Callable[..., Any] | str, *args: Any, **kwargs: Any) -> Any:
    """Start `flow` as a child and wait for its result: ``(await start_child(...)).result()``.

    Takes `start_child`'s options. Example::

        totals = await asyncio.gather(*(run_child(price, item) for item in cart))
    """
    handle = await start_child(flow, *args, **kwargs)
    return await handle.result()


def _flow_def(flow: Callable[..., Any]) -> FlowDef:
    from sdk._registry import flow_def_of

    fd = flow_def_of(flow)
    if fd is None:
        raise InvalidArgument(f"start_child(): {flow!r} is not a @flow function or a flow name")
    return fd


def child_run_id(base: str, key: str) -> str:
    """The default id of the child started by the call `key` of the run (and
    generation: ``"<run id>~g<n>"`` after the first) `base`."""
    cid = f"{base}~{key[1:]}"
    if len(cid) <= MAX_ID:
        return cid
    digest = hashlib.sha256(f"{base}\n{key}".encode()).hexdigest()
    return f"{digest[:40]}~child"


@attrs.define(eq=False)
class ChildOp(Op):
    """``start_child``: the child's run id once started (or why it could not start)."""

    kind: ClassVar[Kind] = Kind.CHILD

    new: NewRun = attrs.field(kw_only=True)
    fd: FlowDef | None = attrs.field(kw_only=True)

    def outcome(self, rec: Record, serializer: Serializer) -> Outcome:
        if rec.state is State.OK:
            return Outcome(ChildHandle(str(rec.value), self.new.flow, self.fd))
        exc = rebuild_exception(rec.error or {}, self.key)
        return Outcome(error=tag(exc, self.key, Reason.FLOW_ERROR))


@attrs.define(eq=False)
class ChildWaitOp(WaitOp):
    """``ChildHandle.result()``: a wait on the child's mailbox, whose payload is
    the child's outcome (see `_outcome_payload`)."""

    child: ChildHandle = attrs.field(kw_only=True)
    serializer: Serializer = attrs.field(kw_only=True)

    def payload(self, value: Any) -> Any:
        child = self.child
        status = value.get("status") if isinstance(value, dict) else None
        if status == RunStatus.COMPLETED:
            fd = child._fd
            declared = fd.return_type() if fd is not None else None
            return self.serializer.decode(
                value.get("result"), declared, value.get("result_type"),
                f"result of child run {child.run_id!r}",
            )  # fmt: skip
        if status == RunStatus.CANCELED:
            raise tag(RunCanceled(child.run_id, value.get("reason")), self.key, Reason.FLOW_ERROR)
        error = value.get("error") if isinstance(value, dict) else None
        if isinstance(error, dict):
            info = converter.structure(error, ErrorInfo)
        else:
            info = ErrorInfo("builtins:RuntimeError", f"unreadable child outcome: {show(value)}")
        raise tag(ChildFailed(child.run_id, info), self.key, Reason.FLOW_ERROR)


async def start_all(act: Activation, ops: list[ChildOp]) -> None:
    """Start the children of one round: one pipeline of starts, one of records. In a
    replayed or forked run, a child its source started is reused or copied instead
    (`sdk._treecopy`): those starts cost a call each."""
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
            act.call_finished(op)
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


def _source_child(act: Activation, op: ChildOp) -> SourceChild | None:
    """What a replayed or forked run does at this ``start_child`` call, when its source
    made it (`sdk._treecopy`); None: start it as any run would."""
    if not act.has_lineage:
        return None
    rec = act.lineage_record(op.key, op.pos, Kind.CHILD)
    return SourceChild.of(rec) if rec is not None else None


async def _replayed(act: Activation, new: NewRun, src: SourceChild) -> StartOutcome:
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


def make_child_op(base: str, key: str, pos: int, new: NewRun, fd: FlowDef | None,
                  own_id: bool) -> ChildOp:  # fmt: skip
    """The op of a ``start_child`` call of the run `base` (see `child_run_id`)."""
    if not own_id:
        new = attrs.evolve(new, run_id=child_run_id(base, key))
    return ChildOp(key, pos, new=new, fd=fd)


# -- the engine-internal channels: a child's end, a parent's cancel --------------------


def internal_channels(store: Store, clock: Clock) -> dict[str, ChannelDef]:
    """The channels every worker's dispatcher serves, whatever it is configured with."""

    async def child_ended(intent: Intent) -> None:
        await tell_parent(store, clock, intent.payload)

    async def parent_canceled(intent: Intent) -> None:
        await cancel_children(store, clock, intent.payload["run_id"])

    retry = RetryPolicy(max_attempts=1_000_000, initial_interval=0.5, max_interval=60.0)
    return {
        CHILD_CHANNEL: ChannelDef(CHILD_CHANNEL, child_ended, retry),
        CASCADE_CHANNEL: ChannelDef(CASCADE_CHANNEL, parent_canceled, retry),
    }


async def tell_parent(store: Store, clock: Clock, payload: dict[str, Any]) -> None:
    """Deliver a child's end to its parent's mailbox (once: a dedup id)."""
    parent, child = payload["parent"], payload["child"]
    stored = await store.get_run(child) or await store.get_tombstone(child)
    if stored is not None and not stored.status.is_terminal:
        return  # resumed meanwhile: it tells its parent again when it ends
    body = outcome_payload(stored, child)
    await store.signal(
        parent, Mailbox(payload["mailbox"], False), dumps(body), f"{CHILD_CHANNEL}:{child}",
        now=clock.time(), event_data=dumps({"child_run_id": child, "status": body["status"]}),
    )  # fmt: skip
    # refused (the parent ended, or is gone): nobody waits for the child any more


async def cancel_children(
    store: Store, clock: Clock, run_id: str, grace: float = DEFAULT_CANCEL_GRACE
) -> None:
    """Cancel the unfinished children of the canceled run `run_id` (not the abandoned):
    each gets a cancel request with `grace` seconds to clean up, as from `Client.cancel`."""
    parent = await store.get_run(run_id)
    why = f"parent run {run_id!r} was canceled"
    if parent is not None and parent.reason:
        why += f": {parent.reason}"
    for child in await store.list_runs(None, None, _LISTED, parent_run_id=run_id):
        if child.status.is_terminal or child.abandon:
            continue
        # a request, as Client.cancel makes: the child may clean up too
        said = {"reason": why, "actor": None, "parent_run_id": run_id}
        refused = await cancel_run(store, child.run_id, why, clock.time(), grace, said)
        if refused is None:
            await store.audit(
                run_id, EventType.CHILD_CANCELED, clock.time(),
                dumps({"child_run_id": child.run_id, "reason": why}),
            )  # fmt: skip
