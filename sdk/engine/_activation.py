"""One activation: a worker executing a run's flow against its journal, a round at a time.

The flow machine (`sdk.engine._machine.FlowMachine`) runs the flow's code on its
own deterministic loop and turns its calls into ops; it does no I/O. The
activation is the driver around it: it runs the machine until every task of
the flow is blocked (a *round*), does the I/O the new ops ask for (steps,
writes, waits, children), and gives the machine what comes next in the next
round. Its state, and the operations its parts share, are in
`sdk.engine._state`:

- **Replay.** The journal says in which round each recorded outcome was
  delivered; they are delivered in those rounds again (`sdk.engine._cursor`), so
  concurrent code (``gather``, ``asyncio.wait``, timeouts) takes the same path.
- **Live.** Calls the journal has no outcome for start at the *live frontier*:
  a step's body runs on the worker's loop (`sdk.engine._steprun`) and its outcome is
  written with one fenced write. Writes that are in flight together form a
  *batch*; its number is written into each record, and the batch is
  delivered as one round once all of its writes are back. A step run on its
  own is delivered as soon as its write is sent: the flow runs on to its next
  calls meanwhile, and nothing with an effect happens before the write is
  back (`sdk.engine._ahead`).
- **Waits** complete one at a time, and only while the flow still waits for
  them (`sdk.engine._waits`); with nothing else to do, the run parks (`sdk.engine._ending`).
- **Cancel.** A cancel request (`Client.cancel` with a grace period) is given to
  the flow once, at the live frontier: step executions in flight are cut off
  (nothing of them is recorded), a ``~cancel`` record is written for the round it
  is given in, and the flow's main task is cancelled, so ``asyncio.CancelledError``
  reaches the await it is parked on. A replay gives it in that round again
  (`sdk.engine._cursor`). The run then ends ``canceled`` however the flow ends
  (`sdk.engine._ending`).
- **Discard.** Whenever the activation ends (parked, finished, crashed, lease
  lost), the flow's remaining tasks are unwound with `_Evicted` (`sdk.engine._machine`), a
  `BaseException`: ``finally`` blocks and ``__aexit__`` run, but every call
  they make to a step, a wait or a timer raises `_Evicted` at once, so the
  unwinding runs no step and writes nothing. They run for real when a later
  activation reaches them.
- **Keep.** With the worker's sticky cache on (`sdk.worker._sticky`), a parked
  activation is kept as it is instead, and `proceed` continues it from its live
  frontier when its run is claimed again with its journal unchanged. It is
  discarded as above when the cache drops it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from sdk._core._clock import wait_until
from sdk._core._journal import Record, State
from sdk._core._types import Reason
from sdk.engine import _ahead, _cancelling, _children, _ending, _steprun, _waits
from sdk.engine._ops import (
    ChildOp,
    EventWaitOp,
    Op,
    Outcome,
    SleepOp,
    StepOp,
    TimerOp,
    ValueOp,
    WaitOp,
)
from sdk.engine._state import ActivationState, log
from sdk.engine._writes import Stop
from sdk.model._intercept import Abandon, ActivationInfo, ActivationOutcome, ActivationReason
from sdk.runtime._runtime import run_var
from sdk.store import Mailbox, StoredRun

if TYPE_CHECKING:
    pass

__all__ = ["Activation"]


class Activation(ActivationState):
    """Executes one claimed run until it parks, ends, or stops: the driver over its
    state (`sdk.engine._state`)."""

    # -- driving ------------------------------------------------------------------

    async def execute(self) -> None:
        """Run the flow until it parks or ends, and write that; or stop (crash, lost lease).

        Runs in a task of its own: work launched inline (see `_launch`) sees the run.
        """
        self.machine.start(self._ctx.copy())
        await self._activate()

    async def proceed(self, stored: StoredRun, mail: frozenset[Mailbox], claimed_at: float) -> None:
        """Continue this kept activation (`sdk.worker._sticky`) where it parked: its run was
        claimed again (`stored`, `mail`) and its journal is as this activation left it.

        Its state is made what a replay of that journal would reach at the live
        frontier, so the flow goes on exactly as it would after a replay.
        """
        self.stored = stored
        self.fence = stored.fence
        self.mail = set(mail)
        self.claimed_at = claimed_at
        self.kept = self.parking = False
        self.ended = None
        if not self.machine.cancel_given:
            self.cancel_reason = stored.cancel_reason
        # an empty consume opens a round that records nothing: a replay skips it
        self.cursor.round = self.writes._last = self.machine.last_round
        for op in self.waiting.values():
            if isinstance(op, EventWaitOp):
                op.armed = False  # a wait_for_event listens again in each activation
        await self._activate(proceeding=True)

    async def _activate(self, proceeding: bool = False) -> None:
        run_var.set(self.machine)
        self._task = asyncio.current_task()
        info = self._activation_info(proceeding) if self.engine.interceptors else None
        if info is not None:
            for hook in self.engine.interceptors:
                hook.activation_started(info)
        try:
            self.loop.run_ready()
            await self._drive()
        finally:
            try:
                await self._close()
            finally:
                if info is not None:
                    outcome = ActivationOutcome.ABANDONED if self.abandoned else self.ended
                    for hook in self.engine.interceptors:
                        hook.activation_finished(info, outcome or ActivationOutcome.INTERRUPTED)
        _ending.report(self)

    def _activation_info(self, proceeding: bool) -> ActivationInfo:
        """What interceptors are told of this activation, and why it runs."""
        s = self.stored
        replayed = len(self.journal.by_key)
        if proceeding:
            reason = ActivationReason.WAKE_UP  # a kept activation goes on (`proceed`)
            replayed = 0  # ...with nothing to replay
        elif s.recoveries:  # reset by every journal write: the last activation was lost
            reason = ActivationReason.RECOVERY
        elif s.source_run_id is not None and s.started_at == self.claimed_at:
            reason = ActivationReason.REPLAY  # a derived run's first claim records its start
        elif replayed or self.cursor.cancel is not None:
            reason = ActivationReason.WAKE_UP
        else:
            reason = ActivationReason.START
        return ActivationInfo(
            s.run_id, s.flow, s.flow_version, s.tenant_id, s.trace_id or s.run_id,
            s.schedule_id, s.parent_run_id, s.queue, reason, replayed, s.recoveries,
            s.generation, s.created_at, self.clock.time(),
        )  # fmt: skip

    async def _drive(self) -> None:
        cursor = self.cursor
        writes = self.writes
        machine = self.machine
        assert machine.main is not None
        while not self.abandoned:
            if writes.pending is not None:  # a step's write still out (`_inline`): first
                with contextlib.suppress(Stop):  # refused or failed: abandoned, the drive ends
                    await writes.landed()
                continue
            err = machine.fatal
            if err is not None:
                await self.settle()
                await _ending.fail(self, type(err), str(err), err.called, Reason.NON_DETERMINISM)
                return
            if machine.continuing is not None and not machine.cancel_given:
                self.ended = ActivationOutcome.CONTINUED_AS_NEW
                await _ending.continue_as_new(self)
                return
            if machine.finished:
                await _ending.conclude(self)  # sets `ended`
                return
            if machine.replay_round() or machine.fatal is not None:
                continue  # (recorded rounds first: the live frontier comes after them)
            if self.cancel_pending and not self._queued:
                # outcomes already written are delivered first, in their rounds
                if self.writes.batches and self._deliver_batches():
                    continue
                if _cancelling.ready(self):
                    await _cancelling.give(self)
                    continue
                if self.running or self.writes.batches or self.resolving is not None:
                    self.cut_work()
                    await self._wait_event()
                    continue
            if cursor.new:
                self._start_new()
                if self.abandoned:  # an interceptor's simulated crash
                    continue
            if writes.batches and self._deliver_batches():
                continue
            if self.waiting and self.resolving is None:
                _waits.start_next(self)
            if self._queued:
                await self._launch()
                continue
            if self.running or writes.batches or self._holds():
                await self._wait_event()
                continue
            await _ending.park(self)
            self.ended = ActivationOutcome.PARKED if self.parking else ActivationOutcome.FAILED
            return

    def _start_new(self) -> None:
        """Start the calls made so far that the journal has no outcome for."""
        now = self.clock.time()
        hooked = bool(self.engine.interceptors)
        children: list[ChildOp] = []
        for op in self.cursor.take_new():
            if op.done or (op.fut is not None and op.fut.cancelled()):
                continue  # canceled by the flow before it started
            if hooked and isinstance(op, (WaitOp, SleepOp, ChildOp)):
                try:
                    self.hooks.call(op)
                except Abandon:
                    return
            if isinstance(op, ChildOp):
                children.append(op)  # started together: one batch (see sdk.engine._children)
            elif isinstance(op, StepOp):
                _steprun.start(self, op)
            elif isinstance(op, (WaitOp, SleepOp, TimerOp)):
                _waits.start(self, op, now)
            elif isinstance(op, ValueOp):
                self.spawn(self._make_value(op))
        if children:
            self.spawn(_children.start_all(self, children))

    def _deliver_batches(self) -> bool:
        """Deliver every batch whose writes are all back, in order, a round each."""
        delivered = False
        while (batch := self.writes.ready()) is not None:
            self.cursor.round = batch.round
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
        if self.resolving is op:
            self.resolving = None
        self.machine.deliver(op, outcome)

    async def _wait_event(self) -> None:
        """Until a write or an execution ends, or the clock reaches a wait's due time."""
        fut = self._kick_fut = asyncio.get_running_loop().create_future()
        try:
            due = self.next_due()
            self.maybe_held()
            if due is None:
                await fut
            else:
                await wait_until(self.clock, fut, due)
        finally:
            self._kick_fut = None

    def _holds(self) -> bool:
        """Whether to wait here for the next due time rather than park (`_waits.holds`)."""
        due = self.next_due()
        return due is not None and _waits.holds(self, due)

    # -- work on the worker's loop: executions and writes ------------------------------

    async def _launch(self) -> None:
        """Run the queued work: one piece with nothing else going on runs inline (the
        common case, a flow's next step: no task, no extra turn of the loop); more
        run as tasks, side by side."""
        writes = self.writes
        queued, self._queued = self._queued, []
        if len(queued) == 1 and not (
            self.running or writes.batches or (self.waiting and self.next_due())
        ):
            await self._inline(queued[0][0])
            return
        loop = asyncio.get_running_loop()
        for coro, _ in queued:
            task = loop.create_task(coro, context=self._ctx.copy())
            self.running.add(task)
            task.add_done_callback(self._task_done)

    async def _inline(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` in this task and deliver its outcome. A step's write is left on
        the wire meanwhile (`Writes.send`): while all the flow does next is call one
        more step, that step is started here too, and the write is awaited before
        its body runs (`sdk.engine._ahead`); else the driver awaits it first."""
        writes = self.writes
        while True:
            writes.inline = True
            try:
                await work
            except (Exception, Stop, Abandon) as exc:
                self._failed_work(exc)
            except asyncio.CancelledError:
                if self._task not in self.cut:
                    raise
            finally:
                writes.inline = False
            task = self._task
            if task is not None and task in self.cut:  # cut off to give a cancel
                self.cut.discard(task)
                if task.uncancel() > 0:  # cancelled from elsewhere too (lost lease, stop)
                    raise asyncio.CancelledError
            direct, writes.direct = writes.direct, None
            if direct is None or self.abandoned:
                return
            self.cursor.round, op, outcome = direct
            self._deliver(op, outcome)
            self.loop.run_ready()
            if writes.pending is None or not _ahead.ahead(self):
                return
            self._start_new()
            if self.abandoned or not _ahead.one_step_next(self):
                return
            work = self._queued.pop()[0]

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.running.discard(task)
        if not task.cancelled():
            exc = task.exception()
            if exc is not None:
                self._failed_work(exc)
        self.kick()

    def _failed_work(self, exc: BaseException) -> None:
        if isinstance(exc, Abandon):
            self.abandon()
        elif not isinstance(exc, Stop):
            log.error("run %s: engine error", self.run_id, exc_info=exc)
            self.abandon(error=exc if isinstance(exc, Exception) else None)

    async def _make_value(self, op: ValueOp) -> None:
        lin = self.lineage_record(op.key, op.pos, op.kind)
        value = str(lin.value) if lin is not None else op.make()
        await self.writes.resolve(
            op, lambda r: Record(op.key, op.pos, op.kind, State.OK, value=value, r=r),
            Outcome(op.parse(value)),
        )  # fmt: skip

    # -- the end ---------------------------------------------------------------------

    async def _close(self) -> None:
        self.writes.drop()  # stopped with a write on the wire (abandoned, cancelled)
        for coro, _ in self._queued:  # never launched: the activation ended first
            coro.close()
        self._queued.clear()
        if self.kept and not self.abandoned:
            await self.settle()  # nothing runs at a park: this returns at once
            if not self.abandoned:
                return  # the flow stays where it waits: the worker keeps it (`kept`)
        self.discard()
        await self.settle()
