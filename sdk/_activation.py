"""One activation: a worker executing a run's flow against its journal, a round at a time.

The flow's code runs on its own deterministic loop (`sdk._aio.FlowLoop`).
The activation runs it until every task of the flow is blocked (a *round*),
then works out what comes next and delivers it in the next round:

- **Replay.** The journal says in which round each recorded outcome was
  delivered (`Record.r`). They are delivered in those rounds again, so
  concurrent code (``gather``, ``asyncio.wait``, timeouts) takes the same path;
  a call made in another order than recorded is a `NonDeterminismError`.
- **Live.** Calls the journal has no outcome for start at the *live frontier*:
  a step's body runs on the worker's loop (`sdk._steprun`) and its outcome is
  written with one fenced write. Writes that are in flight together form a
  *batch*; the batch's number is written into each record, and the batch is
  delivered as one round once all of its writes are back.
- **Waits** (``wait_for``, ``sleep``, asyncio timers, retry backoffs) complete
  one at a time, in call order, and only while the flow still waits for them
  (`sdk._aio.interested`): when one of several raced waits wins, the others
  are withdrawn instead of consuming a later signal.
- **Park.** With nothing running and nothing that can complete now, one
  script parks the run on the waits the flow still waits for (re-checking
  their mailboxes, so a signal that landed meanwhile is not lost).
- **Discard.** Whenever the activation ends (parked, finished, crashed, lease
  lost), the flow's remaining tasks are unwound with `_Evicted`, a
  `BaseException`: ``finally`` blocks and ``__aexit__`` run, but every call
  they make to a step, a wait or a timer raises `_Evicted` at once, so the
  unwinding runs no step and writes nothing. They run for real when a later
  activation reaches them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from sdk import _steprun
from sdk._aio import FlowLoop, FlowTask, interested
from sdk._clock import Clock
from sdk._context import RunContext, _run_var
from sdk._flowdef import RESULT_GRACE
from sdk._intercept import Abandon, Interceptor
from sdk._journal import Journal, Kind, Record, State, StepEvent
from sdk._ops import STEP_TAG, NowOp, Op, Outcome, SleepOp, StepOp, TimerOp, UuidOp, ValueOp, WaitOp
from sdk._registry import same_function
from sdk._retry import RetryPolicy
from sdk._serde import converter, dumps, loads, type_path
from sdk._types import ErrorInfo, Reason, RunStatus
from sdk._values import Serializer
from sdk.errors import (
    FlowBlocked,
    LeaseLost,
    NonDeterminismError,
    RegistryConflict,
    SerializationError,
)

if TYPE_CHECKING:
    from sdk._flowdef import FlowDef
    from sdk._outbox import NewIntent
    from sdk._step import StepSpec
    from stores._protocol import Store, StoredRun

__all__ = ["Activation", "Engine"]

log = logging.getLogger("steadyflow.worker")

_TOKEN = object()


class _Evicted(BaseException):
    """Unwinds a flow whose activation ended. A BaseException, so ``except
    Exception`` cannot swallow it; only the engine can construct it."""

    def __init__(self, token: object) -> None:
        if token is not _TOKEN:
            raise TypeError("the eviction signal is raised by Steadyflow only")
        super().__init__("this activation of the run ended (it parked, finished or stopped)")


class _Stop(BaseException):
    """Unwinds a step execution or a write of an activation that stopped."""


@attrs.define
class Engine:
    """What every activation of a worker shares."""

    store: Store
    clock: Clock
    owner: str
    inline_backoff_max: float = 1.0
    interceptors: list[Interceptor] = attrs.field(factory=list)
    serializer: Serializer = attrs.field(factory=Serializer.default)


@attrs.define(eq=False)
class _Batch:
    """Outcome writes in flight together; delivered as one round (`round`)."""

    round: int
    inflight: int = 0
    closed: bool = False  # one of its writes is back: later writes open the next batch
    outcomes: list[tuple[Op, Outcome]] = attrs.field(factory=list)


class _DurableTimer(asyncio.TimerHandle):
    op: TimerOp


def _due(op: Op) -> float | None:
    if isinstance(op, WaitOp):
        return op.deadline
    if isinstance(op, (SleepOp, TimerOp)):
        return op.due
    if isinstance(op, StepOp):
        return op.retry_due
    return None


def _pos(op: Op) -> int:
    return op.pos


class Activation:
    """Executes one claimed run until it parks, ends, or stops."""

    def __init__(
        self,
        engine: Engine,
        stored: StoredRun,
        journal: Journal,
        flow: FlowDef,
        mail: frozenset[str] | None = None,
        lineage: dict[str, str] | None = None,
    ) -> None:
        self.engine = engine
        self.store = engine.store
        self.clock = engine.clock
        self.serializer = engine.serializer
        self.stored = stored
        self.run_id = stored.record.run_id
        self.fence = stored.fence
        self.journal = journal
        self.flow = flow
        self.context = RunContext(self)
        self.log = log
        # Mailboxes that held signals at claim time (None: unknown). A wait on
        # another one parks without a consume; the park script re-checks them all.
        self.mail = set(mail) if mail is not None else None
        self._lineage_raw = lineage or {}  # a replay's or fork's reusable results
        self.has_lineage = bool(self._lineage_raw)
        self.key_root = stored.record.root_run_id or self.run_id
        self.retry_override = RetryPolicy.from_json(stored.retry) if stored.retry else None
        self.round = 0  # the last round delivered
        self.live = not journal.by_pos  # past the last recorded round
        self.discarding = False
        self.abandoned = False
        self.parking = False
        self.store_error: Exception | None = None
        self.lost: LeaseLost | None = None
        self.fatal: NonDeterminismError | None = None
        self._pos = 0
        self._counts: dict[str, int] = {}
        self._specs: dict[str, StepSpec] = {}  # step name -> the step using it in this run
        self._ops: dict[int, Op] = {}  # calls made and not delivered yet, by position
        self._asap: list[Op] = []  # format-1 outcomes: delivered as soon as called
        self._new: list[Op] = []  # calls to start at the live frontier
        self._waiting: dict[int, Op] = {}  # live calls waiting for a signal or a time
        self._resolving: Op | None = None  # the one wait being completed
        self._queued: list[Coroutine[Any, Any, None]] = []  # work to launch (see _launch)
        self._tasks: dict[asyncio.Task[None], Op | None] = {}  # on the worker's loop
        self._writing: set[asyncio.Task[Any]] = set()
        self._batches: collections.deque[_Batch] = collections.deque()
        self._inline = False  # work runs inline (the only work in flight)
        self._direct: tuple[int, Op, Outcome] | None = None  # its outcome, for the next round
        self._last_batch = journal.max_round
        self._kick_fut: asyncio.Future[None] | None = None
        self._ctx = contextvars.copy_context()
        self._ctx.run(_run_var.set, self)
        # AbstractEventLoop is no ABC at run time; mypy sees the I/O methods that
        # FlowLoop refuses (set in a loop at import) as missing.
        self.loop = FlowLoop(self)  # type: ignore[abstract]
        self.main: FlowTask | None = None

    # -- what the worker and the run context read ---------------------------------

    @property
    def is_replaying(self) -> bool:
        """Re-walking recorded rounds (or unwinding a discarded flow)."""
        return self.discarding or not self.live

    @property
    def crashed(self) -> bool:
        return self.abandoned

    @property
    def suspending(self) -> bool:
        return self.parking or self.discarding

    # -- the flow's side: calls get a key and a position when they are made ---------

    def alloc(self, name: str) -> tuple[str, int]:
        """Next key for `name` and next position; synchronous, so gather is deterministic."""
        n = self._counts.get(name, 0) + 1
        self._counts[name] = n
        pos = self._pos
        self._pos = pos + 1
        return f"{name}#{n}", pos

    def step_call(
        self, spec: StepSpec, fn: Callable[..., Any], args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Coroutine[Any, Any, Any]:  # fmt: skip
        known = self._specs.setdefault(spec.name, spec)
        if known is not spec and not same_function(known.fn, spec.fn):
            raise RegistryConflict(
                f"run {self.run_id!r}: flow {self.flow.name!r} calls two different steps named "
                f"{spec.name!r} ({known.fn.__module__}.{known.fn.__qualname__} and "
                f"{spec.fn.__module__}.{spec.fn.__qualname__}); their journal keys would mix. "
                "Give one of them another name: @step(name=...)"
            )
        key, pos = self.alloc(spec.name)
        return self._await(StepOp(key, pos, spec=spec, fn=fn, args=args, kwargs=kwargs))

    def wait(
        self, name: str, timeout: float | None, human: bool, approvers: tuple[str, ...] | None
    ) -> Coroutine[Any, Any, Any]:
        key, pos = self.alloc(f"~wait:{name}")
        op = WaitOp(key, pos, name=name, human=human, approvers=approvers, timeout=timeout)
        return self._await(op)

    def sleep_until(self, until: float | None, duration: float | None) -> Coroutine[Any, Any, Any]:
        key, pos = self.alloc("~sleep")
        return self._await(SleepOp(key, pos, until=until, duration=duration))

    def now(self) -> Coroutine[Any, Any, Any]:
        key, pos = self.alloc("~now")
        return self._await(NowOp(key, pos, make=lambda: self.clock.now().isoformat()))

    def uuid4(self) -> Coroutine[Any, Any, Any]:
        key, pos = self.alloc("~uuid4")
        return self._await(UuidOp(key, pos, make=lambda: str(uuid.uuid4())))

    async def _await(self, op: Op) -> Any:
        self._begin(op)
        assert op.fut is not None
        return await op.fut

    def _begin(self, op: Op) -> None:
        if self.discarding or self.abandoned:
            raise _Evicted(_TOKEN)
        if self.fatal is not None:
            raise self.fatal
        op.owner = asyncio.current_task(self.loop)
        op.fut = self.loop.create_future()
        op.record = self._check(op.key, op.pos)
        self._register(op)

    def _register(self, op: Op) -> None:
        self._ops[op.pos] = op
        rec = op.delivery
        if rec is None:
            self._new.append(op)
        elif rec.r is None:
            self._asap.append(op)
        elif rec.r <= self.round:
            raise self._diverged(
                NonDeterminismError(
                    self.run_id, op.pos, rec.key, op.key,
                    detail=f"the journal records {op.key!r} as completed in round {rec.r}, "
                    "before the flow made this call (concurrent calls in another order)",
                )
            )  # fmt: skip

    def _check(self, key: str, pos: int) -> Record | None:
        """The record for this call, or None; `NonDeterminismError` if the journal disagrees."""
        rec = self.journal.by_pos.get(pos)
        if rec is not None:
            if rec.key != key:
                raise self._diverged(NonDeterminismError(self.run_id, pos, rec.key, key))
            return rec
        if key in self.journal.by_key:
            raise self._diverged(NonDeterminismError(self.run_id, pos, None, key))
        return None

    def _diverged(self, err: NonDeterminismError) -> NonDeterminismError:
        if self.fatal is None:
            self.fatal = err
        return err

    # -- the flow loop's timers (asyncio.sleep, asyncio.timeout...) -------------------

    def time(self) -> float:
        return self.clock.time()

    def timer(
        self,
        loop: FlowLoop,
        when: float,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: contextvars.Context | None,
    ) -> asyncio.TimerHandle:
        if self.discarding or self.abandoned:
            raise _Evicted(_TOKEN)
        if self.fatal is not None:
            raise self.fatal
        key, pos = self.alloc("~timer")
        handle = _DurableTimer(when, callback, args, loop, context)
        handle._scheduled = True  # type: ignore[attr-defined]  # cancel() tells the loop
        op = handle.op = TimerOp(key, pos, handle=handle, owner=asyncio.current_task())
        op.record = self._check(key, pos)
        self._register(op)
        return handle

    def timer_cancelled(self, handle: asyncio.TimerHandle) -> None:
        op = getattr(handle, "op", None)
        if isinstance(op, TimerOp) and not op.done:
            op.done = True  # withdrawn: it fires on no replay either
            self._waiting.pop(op.pos, None)

    # -- driving ------------------------------------------------------------------

    async def execute(self) -> None:
        """Run the flow until it parks or ends, and write that; or stop (crash, lost lease).

        Runs in a task of its own: work launched inline (see `_launch`) sees the run.
        """
        _run_var.set(self)
        self.main = self.loop.create_task(self._flow_main(), context=self._ctx.copy())
        try:
            self.loop.run_ready()
            await self._drive()
        finally:
            await self._close()
        self._report()

    async def _flow_main(self) -> Any:
        args, kwargs = self.flow.decode_args(self.stored.args, self.serializer)
        return await self.flow.fn(*args, **kwargs)

    async def _drive(self) -> None:
        assert self.main is not None
        while not self.abandoned:
            if self.fatal is not None:
                await self._settle()
                err = self.fatal
                await self._finish_failed(type(err), str(err), err.called, Reason.NON_DETERMINISM)
                return
            if self.main.done():
                await self._conclude()
                return
            if not self.live and self._replay_next():
                continue
            self.live = True
            if self._new:
                self._start_new()
            if self._batches and self._deliver_batches():
                continue
            if self._waiting and self._resolving is None:
                self._resolve_next()
            if self._queued:
                await self._launch()
                continue
            if self._tasks or self._batches:
                await self._wait_event()
                continue
            await self._park()
            return

    def _replay_next(self) -> bool:
        """Deliver the next recorded round, if the flow is still replaying."""
        if self.live:
            return False
        if self._asap:
            ops, self._asap = sorted(self._asap, key=_pos), []
            for op in ops:
                self._deliver(op, op.outcome(op.delivery, self.serializer))  # type: ignore[arg-type]
            self.loop.run_ready()
            return True
        later = [r for r in self.journal.rounds if r > self.round]
        if not later:
            return False
        r = min(later)
        positions = sorted(self.journal.rounds[r])
        missing = [p for p in positions if p not in self._ops]
        if missing:
            key = self.journal.by_pos[missing[0]].key
            self._diverged(
                NonDeterminismError(
                    self.run_id, missing[0], key, None,
                    detail=f"the journal records {key!r} there, completed in round {r}, "
                    "and the flow had not made that call by then",
                )
            )  # fmt: skip
            return False
        self.round = r
        for p in positions:
            op = self._ops[p]
            rec = op.delivery
            if rec is not None:
                self._deliver(op, op.outcome(rec, self.serializer))
        self.loop.run_ready()
        return True

    def _start_new(self) -> None:
        """Start the calls made so far that the journal has no outcome for."""
        if not self._new:
            return
        new, self._new = self._new, []
        if len(new) > 1:
            new.sort(key=_pos)
        now = self.clock.time()
        for op in new:
            rec = op.record
            if op.done or (op.fut is not None and op.fut.cancelled()):
                continue  # canceled by the flow before it started
            if isinstance(op, StepOp):
                _steprun.start(self, op)
            elif isinstance(op, WaitOp):
                if rec is not None:
                    op.deadline = rec.due
                elif op.timeout is not None:
                    op.deadline = now + op.timeout
                self._waiting[op.pos] = op
            elif isinstance(op, SleepOp):
                if rec is not None and rec.due is not None:
                    op.due = rec.due
                else:
                    op.due = op.until if op.until is not None else now + (op.duration or 0.0)
                self._waiting[op.pos] = op
            elif isinstance(op, TimerOp):
                assert op.handle is not None
                op.due = rec.due if rec is not None and rec.due is not None else op.handle.when()
                self._waiting[op.pos] = op
            elif isinstance(op, ValueOp):
                self.spawn(self._make_value(op), op)

    def _resolve_next(self) -> bool:
        """Start completing the first wait (in call order) that can complete now."""
        if not self._waiting:
            return False
        now = self.clock.time()
        for op in sorted(self._waiting.values(), key=_pos):
            if not self._wanted(op):
                continue  # withdrawn: nothing awaits it (e.g. a race's loser)
            if isinstance(op, StepOp):
                if op.approval:
                    if self.mail is None or _steprun.approval_mailbox(op) in self.mail:
                        self._resolving = self._waiting.pop(op.pos)
                        self.spawn(self._take_approval(op), op)
                        return True
                elif op.retry_due is not None and op.retry_due <= now:
                    del self._waiting[op.pos]
                    _steprun.retry_now(self, op)
                    return True
            elif isinstance(op, WaitOp):
                due = op.deadline is not None and op.deadline <= now
                if self.mail is None or op.mailbox in self.mail or due:
                    self._resolving = self._waiting.pop(op.pos)
                    self.spawn(self._consume(op), op)
                    return True
            else:
                due_at = _due(op)
                if due_at is not None and due_at <= now:
                    self._resolving = self._waiting.pop(op.pos)
                    self.spawn(self._fire(op), op)
                    return True
        return False

    def _deliver_batches(self) -> bool:
        """Deliver every batch whose writes are all back, in order, a round each."""
        delivered = False
        batches = self._batches
        while batches and batches[0].closed and not batches[0].inflight:
            batch = batches.popleft()
            self.round = batch.round
            outcomes = batch.outcomes
            if outcomes:
                if len(outcomes) > 1:
                    outcomes.sort(key=lambda x: x[0].pos)
                for op, outcome in outcomes:
                    self._deliver(op, outcome)
                self.loop.run_ready()
            delivered = True
        return delivered

    def _deliver(self, op: Op, outcome: Outcome) -> None:
        op.done = True
        self._ops.pop(op.pos, None)
        self._waiting.pop(op.pos, None)
        if self._resolving is op:
            self._resolving = None
        if isinstance(op, TimerOp):
            handle = op.handle
            if handle is not None and not handle.cancelled():
                self.loop.schedule(handle)
        elif op.fut is not None:
            outcome.apply(op.fut)

    async def _wait_event(self) -> None:
        """Until a write or an execution ends, or (on a real clock) a wait is due."""
        fut = self._kick_fut = asyncio.get_running_loop().create_future()
        try:
            due = self._next_due()
            if due is None:
                await fut
            else:
                await asyncio.wait({fut}, timeout=max(due - self.clock.time(), 0.0))
        finally:
            self._kick_fut = None

    def _next_due(self) -> float | None:
        if self._resolving is not None or not self._waiting:
            return None  # waits complete one at a time
        dues = [
            d for op in self._waiting.values() if (d := _due(op)) is not None and self._wanted(op)
        ]  # fmt: skip
        return min(dues) if dues else None

    def _wanted(self, op: Op) -> bool:
        """Whether the flow still waits for `op` (a canceled call or a race's loser: no)."""
        if op.fut is not None and op.fut.cancelled():
            return False
        return interested(op.owner, self.main)

    def _kick(self) -> None:
        fut = self._kick_fut
        if fut is not None and not fut.done():
            fut.set_result(None)

    # -- work on the worker's loop: executions and writes ------------------------------

    def spawn(self, coro: Coroutine[Any, Any, None], op: Op | None = None) -> None:
        """Queue `coro` (a step execution, a write) to run on the worker's loop."""
        self._queued.append(coro)

    async def _launch(self) -> None:
        """Run the queued work: one piece with nothing else going on runs inline (the
        common case, a flow's next step: no task, no extra turn of the loop); more
        run as tasks, side by side."""
        queued, self._queued = self._queued, []
        alone = not (self._tasks or self._batches or (self._waiting and self._next_due()))
        if len(queued) == 1 and alone:
            self._inline = True
            try:
                await queued[0]
            except Exception as exc:
                self._failed_work(exc)
            except (_Stop, Abandon) as exc:
                self._failed_work(exc)
            finally:
                self._inline = False
            direct, self._direct = self._direct, None
            if direct is not None and not self.abandoned:
                self.round, op, outcome = direct
                self._deliver(op, outcome)
                self.loop.run_ready()
            return
        loop = asyncio.get_running_loop()
        for coro in queued:
            task = loop.create_task(coro, context=self._ctx.copy())
            self._tasks[task] = None
            task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)
        if not task.cancelled():
            exc = task.exception()
            if exc is not None:
                self._failed_work(exc)
        self._kick()

    def _failed_work(self, exc: BaseException) -> None:
        if isinstance(exc, Abandon):
            self.abandon()
        elif not isinstance(exc, _Stop):
            log.error("run %s: engine error", self.run_id, exc_info=exc)
            self.abandon(error=exc if isinstance(exc, Exception) else None)

    def park_op(self, op: Op) -> None:
        """`op` waits for a signal or a time (see `_resolve_next`)."""
        self._waiting[op.pos] = op

    def abandon(self, *, error: Exception | None = None, lost: LeaseLost | None = None) -> None:
        """Stop at once, as a dead process would: no step body goes on, nothing more is
        written (writes already sent complete); the lease is left to expire."""
        if error is not None and self.store_error is None:
            self.store_error = error
        if lost is not None and self.lost is None:
            self.lost = lost
        if self.abandoned:
            return
        self.abandoned = True
        for task in list(self._tasks):
            if task not in self._writing:
                task.cancel()
        self._kick()

    def _batch(self) -> _Batch:
        batches = self._batches
        if batches and not batches[-1].closed:
            batch = batches[-1]
        else:
            self._last_batch = max(self._last_batch, self.round) + 1
            batch = _Batch(self._last_batch)
            batches.append(batch)
        batch.inflight += 1
        return batch

    def _leave(self, batch: _Batch) -> None:
        batch.inflight -= 1
        batch.closed = True
        self._kick()

    async def resolve(
        self,
        op: Op,
        make: Callable[..., Record],
        outcome: Outcome,
        event: StepEvent | None = None,
        intents: Sequence[NewIntent] = (),
    ) -> None:
        """Write `op`'s outcome (the record ``make(r=round)`` builds for the write's
        round); the flow gets `outcome` in that round."""
        if self.abandoned:
            raise _Stop
        if self._inline and self._direct is None:
            # the only work in flight: its outcome is the next round on its own
            r = self._last_batch = max(self._last_batch, self.round) + 1
            rec = make(r=r)
            await self._store_write(rec, event, intents)
            op.record = rec
            self._direct = (r, op, outcome)
            return
        batch = self._batch()
        try:
            rec = make(r=batch.round)
            await self._store_write(rec, event, intents)
            op.record = rec
            batch.outcomes.append((op, outcome))
        finally:
            self._leave(batch)

    async def write(
        self, rec: Record, event: StepEvent | None = None, intents: Sequence[NewIntent] = ()
    ) -> None:
        """A fenced journal write that delivers nothing (a failed attempt, an approval)."""
        if self.abandoned:
            raise _Stop
        await self._store_write(rec, event, intents)

    async def mark(self, key: str) -> None:
        """The optional ``step.started`` event and checkpoint."""
        if self.abandoned:
            raise _Stop
        await self._guard(self.store.mark(self.run_id, self.fence, key, self.clock.time()))

    async def _store_write(
        self, rec: Record, event: StepEvent | None, intents: Sequence[NewIntent]
    ) -> None:
        if intents:  # the step's outbox intents, in the same script as its result
            call = self.store.record_out(
                self.run_id, self.fence, rec.key, rec.to_json(), intents,
                now=self.clock.time(), event=event,
            )  # fmt: skip
        else:
            call = self.store.record(
                self.run_id, self.fence, rec.key, rec.to_json(), now=self.clock.time(), event=event
            )
        await self._guard(call)
        self.journal.put(rec)

    async def _guard(self, call: Awaitable[Any]) -> Any:
        """Await a fenced store call: a lost lease or a store error stops the activation
        (a write whose outcome is unknown is left to recovery, as after a crash)."""
        # Work that runs as a task is cut off by `abandon` unless it is writing.
        task = asyncio.current_task() if self._tasks else None
        if task is not None:
            self._writing.add(task)
        try:
            return await call
        except LeaseLost as exc:
            self.abandon(lost=exc)
            raise _Stop from None
        except Exception as exc:
            self.abandon(error=exc)
            raise _Stop from exc
        finally:
            if task is not None:
                self._writing.discard(task)

    async def _make_value(self, op: ValueOp) -> None:
        lin = self.lineage_record(op.key, op.pos, op.kind)
        value = str(lin.value) if lin is not None else op.make()
        await self.resolve(
            op, lambda r: Record(op.key, op.pos, op.kind, State.OK, value=value, r=r),
            Outcome(op.parse(value)),
        )  # fmt: skip

    async def _fire(self, op: Op) -> None:
        due = _due(op)
        await self.resolve(
            op, lambda r: Record(op.key, op.pos, op.kind, State.OK, due=due, r=r), Outcome(None)
        )

    async def _consume(self, op: WaitOp) -> None:
        """Take a signal (or the deadline) for `op`, in one script; delivered in its batch."""
        batch = self._batch()
        try:
            r = batch.round
            code, payload = await self._guard(
                self.store.consume(
                    self.run_id, self.fence, op.key, op.mailbox, self.clock.time(), op.deadline,
                    Record(op.key, op.pos, Kind.WAIT, State.OK, r=r).splice_prefix(),
                    Record(op.key, op.pos, Kind.WAIT, State.TIMEOUT, due=op.deadline,
                           r=r).to_json(),
                )
            )  # fmt: skip
            if code == 1:
                value = loads(payload or "null")
                op.record = Record(op.key, op.pos, Kind.WAIT, State.OK, value=value, r=r)
                try:
                    outcome = Outcome(op.payload(value))
                except Exception as exc:
                    outcome = Outcome(error=exc)
            elif code == 2:
                op.record = Record(op.key, op.pos, Kind.WAIT, State.TIMEOUT, due=op.deadline, r=r)
                outcome = Outcome(error=op.timed_out())
            else:  # the mailbox was empty after all: wait on
                if self.mail is not None:
                    self.mail.discard(op.mailbox)
                self._resolving = None
                self._waiting[op.pos] = op
                return
            self.journal.put(op.record)
            batch.outcomes.append((op, outcome))
        finally:
            self._leave(batch)

    async def _take_approval(self, op: StepOp) -> None:
        """Take the approval a ``require_human`` step waits for (it delivers nothing)."""
        box = _steprun.approval_mailbox(op)
        rec = Record(op.key, op.pos, Kind.WAIT, State.OK)
        code, payload = await self._guard(
            self.store.consume(
                self.run_id, self.fence, op.key, box, self.clock.time(), None,
                rec.splice_prefix(), Record(op.key, op.pos, Kind.WAIT, State.TIMEOUT).to_json(),
            )
        )  # fmt: skip
        self._resolving = None
        if code != 1:
            if self.mail is not None:
                self.mail.discard(box)
            self._waiting[op.pos] = op
            return
        value = loads(payload or "null")
        op.record = attrs.evolve(rec, value=value)
        self.journal.put(op.record)
        _steprun.decided(self, op, value)

    # -- steps' helpers ----------------------------------------------------------------

    def lineage_record(self, key: str, pos: int, kind: Kind) -> Record | None:
        """The source runs' completed record for this call, if it is the same call."""
        raw = self._lineage_raw.get(key)
        if raw is None:
            return None
        rec = Record.from_json(raw)
        if rec.pos != pos or rec.kind is not kind or rec.state is not State.OK:
            return None
        return rec

    def step_started(self, op: StepOp, attempt: int) -> None:
        try:
            for hook in self.engine.interceptors:
                hook.step_started(self.run_id, op.key, attempt)
        except Abandon:
            self.abandon()  # at once: no sibling goes on (as if the process died here)
            raise

    def step_finished(self, op: StepOp, attempt: int) -> None:
        try:
            for hook in self.engine.interceptors:
                hook.step_finished(self.run_id, op.key, attempt)
        except Abandon:
            self.abandon()
            raise

    # -- the end: finish, park, or stop -----------------------------------------------

    async def _conclude(self) -> None:
        """The flow's main task ended: record the run's outcome."""
        main = self.main
        assert main is not None
        await self._settle()  # background steps are cut off (as asyncio.run does)
        if self.abandoned:
            return
        if main.cancelled():
            await self._finish_failed(
                asyncio.CancelledError, "the flow's main task was canceled", None,
                Reason.FLOW_ERROR,
            )  # fmt: skip
            return
        failure = main.exception()
        if failure is not None:
            key, reason = getattr(failure, STEP_TAG, (None, Reason.FLOW_ERROR))
            if isinstance(failure, SerializationError) and key is None:
                reason = Reason.SERIALIZATION_ERROR
            await self._finish_failed(type(failure), str(failure), key, reason)
            return
        left = [pos for pos in self.journal.by_pos if pos >= self._pos]
        if left:
            # The flow returned before reaching calls the journal holds: the
            # code changed (e.g. a step was removed), just as a changed call is.
            rec = self.journal.by_pos[min(left)]
            err = NonDeterminismError(self.run_id, rec.pos, rec.key, None)
            await self._finish_failed(type(err), str(err), None, Reason.NON_DETERMINISM)
            return
        try:
            data, tpath = self.serializer.encode(
                main.result(), self.flow.return_type(), f"result of flow {self.flow.name!r}"
            )
        except SerializationError as exc:
            await self._finish_failed(type(exc), str(exc), None, Reason.SERIALIZATION_ERROR)
            return
        fields = {"result": dumps(data)}
        if tpath:
            fields["result_type"] = tpath
        now = self.clock.time()
        grace = now + RESULT_GRACE if self.flow.delete_on_success else None
        await self._end(
            self.store.finish(
                self.run_id, self.fence, RunStatus.COMPLETED, now, fields,
                retention=self.flow.retention, delete_until=grace,
            )
        )  # fmt: skip

    async def _finish_failed(
        self, etype: type[BaseException], message: str, key: str | None, reason: Reason
    ) -> None:
        text = dumps(converter.unstructure(ErrorInfo(type_path(etype), message, key, reason)))
        await self._end(
            self.store.finish(
                self.run_id, self.fence, RunStatus.FAILED, self.clock.time(),
                {"error": text, "reason": str(reason)}, event_data=text,
            )
        )  # fmt: skip

    async def _end(self, call: Awaitable[Any]) -> None:
        with contextlib.suppress(_Stop):  # a lost lease or store error: logged by _report
            await self._guard(call)

    async def _park(self) -> None:
        """Nothing runs and nothing can complete now: park on what the flow waits for."""
        waiting = [
            op for op in sorted(self._waiting.values(), key=_pos)
            if op.fut is None or not op.fut.cancelled()
        ]  # fmt: skip
        alive = [op for op in waiting if self._wanted(op)]
        if not alive:
            err = FlowBlocked(
                f"run {self.run_id!r}: every task of the flow waits on something no signal, "
                "timer or step can complete (an asyncio.Event or future nothing sets, or a "
                "task whose wait was withdrawn), so the flow cannot go on"
            )
            await self._finish_failed(FlowBlocked, str(err), None, Reason.FLOW_ERROR)
            return
        records: list[tuple[str, str]] = []
        for op in waiting:
            rec = self._pending_record(op)
            if rec is not None and rec != op.record:
                records.append((op.key, rec.to_json()))
        mailboxes: set[str] = set()
        approvers: dict[str, tuple[str, ...]] = {}
        human = False
        for op in alive:
            if isinstance(op, WaitOp):
                mailboxes.add(op.mailbox)
                human = human or op.human
                if op.approvers is not None:
                    approvers[op.mailbox] = op.approvers
            elif isinstance(op, StepOp) and op.approval:
                mailboxes.add(_steprun.approval_mailbox(op))
                human = True
        dues = [d for op in alive if (d := _due(op)) is not None]
        status = RunStatus.WAITING_FOR_HUMAN if human else RunStatus.WAITING_FOR_SIGNAL
        self.parking = True
        await self._end(
            self.store.suspend(
                self.run_id, self.fence, self.clock.time(), min(dues) if dues else None,
                status, records, sorted(mailboxes), approvers=approvers,
            )
        )  # fmt: skip

    @staticmethod
    def _pending_record(op: Op) -> Record | None:
        """What the journal keeps of a waiting call: its deadline, stable across replays."""
        if isinstance(op, WaitOp):
            return Record(op.key, op.pos, Kind.WAIT, State.PENDING, due=op.deadline)
        if isinstance(op, (SleepOp, TimerOp)):
            return Record(op.key, op.pos, op.kind, State.PENDING, due=op.due)
        if isinstance(op, StepOp) and op.approval:
            return Record(op.key, op.pos, Kind.WAIT, State.PENDING)
        return None  # a retry: its RETRY record has the due time

    async def _settle(self) -> None:
        """Cut off step bodies still running; let writes in flight complete."""
        for task in list(self._tasks):
            if task not in self._writing:
                task.cancel()
        while self._tasks:
            await asyncio.wait(list(self._tasks))

    async def _close(self) -> None:
        for coro in self._queued:  # never launched: the activation ended first
            coro.close()
        self._queued.clear()
        self._evict()
        await self._settle()

    def _evict(self) -> None:
        """Unwind the flow's tasks without effects (see the module docstring).

        Top down: a task is unwound only once nothing that awaits it is still
        pending, so no flow code sees a task end and takes another branch (the
        loser of a race "winning" as the flow is discarded).
        """
        loop = self.loop
        self.discarding = True
        for _ in range(100):
            pending = loop.pending_tasks()
            if not pending:
                break
            alive = set(pending)
            roots = [t for t in pending if not any(o in alive for _, o in t._awaiters)]
            for task in roots or pending:
                waiter = getattr(task, "_fut_waiter", None)
                if (
                    isinstance(waiter, asyncio.Future)
                    and not isinstance(waiter, asyncio.Task)
                    and not waiter.done()
                ):
                    waiter.set_exception(_Evicted(_TOKEN))
                else:
                    task.cancel()  # about to start, or awaiting a task
            loop.run_ready()
        if loop.pending_tasks():
            log.warning(
                "run %s: %d task(s) of the flow would not unwind (they catch BaseException)",
                self.run_id, len(loop.pending_tasks()),
            )  # fmt: skip
        for task in loop.tasks:  # their exceptions are the eviction itself
            if task.done() and not task.cancelled():
                task.exception()
        loop.tasks.clear()

    def _report(self) -> None:
        if self.store_error is not None:
            log.error(
                "run %s: store error (%s: %s); activation abandoned, the run is recovered "
                "when its lease expires", self.run_id, type(self.store_error).__name__,
                self.store_error,
            )  # fmt: skip
        elif self.lost is not None:
            log.warning(
                "run %s: lease lost (another worker owns it now, or it was canceled); "
                "this worker stopped writing: %s", self.run_id, self.lost,
            )  # fmt: skip
        elif self.abandoned:
            log.warning("run %s: simulated crash; the lease is left to expire", self.run_id)

    def release_on_cancel(self) -> Coroutine[Any, Any, None]:
        return self.store.release(self.run_id, self.fence)
