"""What one activation holds, and the small operations every part of it shares.

An activation (`sdk.engine._activation.Activation`) executes a claimed run: its
flow machine (`sdk.engine._machine.FlowMachine`) runs the flow's code, and the
activation does the I/O the flow's calls ask for. The parts that do it (steps
in `sdk.engine._steprun`, waits in `sdk.engine._waits`, the end in
`sdk.engine._ending`, children in `sdk.engine._children`, run-ahead in
`sdk.engine._ahead`, cancels in `sdk.engine._cancelling`) work on this state;
the driver that sequences them is `Activation`, which is this state too.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from sdk._core._journal import Journal, Kind, Record, State
from sdk._core._retry import RetryPolicy
from sdk.engine._machine import FlowMachine
from sdk.engine._observing import Hooks
from sdk.engine._ops import Op, due
from sdk.engine._writes import Writes
from sdk.errors import LeaseLost
from sdk.runtime._runtime import run_var

if TYPE_CHECKING:
    from sdk.engine._engine import Engine
    from sdk.model._flowdef import FlowDef
    from sdk.model._intercept import ActivationOutcome
    from sdk.store import Mailbox, StoredRun

__all__ = ["ActivationState", "log"]

log = logging.getLogger("steadyflow.worker")


class ActivationState:
    """One activation's state (see the module docstring)."""

    def __init__(
        self,
        engine: Engine,
        stored: StoredRun,
        journal: Journal,
        flow: FlowDef,
        mail: frozenset[Mailbox] | None = None,
        lineage: dict[str, str] | None = None,
        *,
        claimed_at: float | None = None,
    ) -> None:
        self.engine = engine
        self.store = engine.store
        self.clock = engine.clock
        self.serializer = engine.serializer
        self.stored = stored
        self.run_id = stored.run_id
        self.fence = stored.fence
        self.journal = journal
        self.flow = flow
        self.log = log
        self.hooks = Hooks(engine.interceptors, self.run_id, self.clock, self.abandon)
        self._lineage_raw = lineage or {}  # a replay's or fork's reusable results
        self.has_lineage = bool(self._lineage_raw)
        # the flow's side: its code, calls and their outcomes (no I/O)
        self.machine = FlowMachine(
            stored, journal, flow, clock=self.clock, serializer=self.serializer,
            registry=engine.registry, hooks=self.hooks, client=engine.client,
            lineage=self._lineage_raw,
        )  # fmt: skip
        self.cursor = self.machine.cursor  # (shared: the rounds of writes are the cursor's)
        self.loop = self.machine.loop
        self.waiting = self.machine.waiting  # (shared: waits are started and parked here)
        # Mailboxes that held signals at claim time (None: unknown). A wait on
        # another one parks without a consume; the park script re-checks them all.
        self.mail = set(mail) if mail is not None else None
        self.key_root = stored.root_run_id or self.run_id
        if stored.generation:  # idempotency keys differ between generations
            self.key_root += f"~g{stored.generation}"
        self.claimed_at = claimed_at  # the claiming poll's time (what a first claim records)
        self.ended: ActivationOutcome | None = None  # how it ended (sdk.engine._ending sets it)
        self.retry_override = RetryPolicy.from_json(stored.retry) if stored.retry else None
        self.abandoned = False
        self.parking = False
        self.kept = False  # parked, and kept by the worker (its sticky cache), not unwound
        self.store_error: Exception | None = None
        self.lost: LeaseLost | None = None
        self.resolving: Op | None = None  # the one wait being completed
        # work to launch (see `Activation._launch`), and whether each is a step's attempts
        self._queued: list[tuple[Coroutine[Any, Any, None], bool]] = []
        self.running: set[asyncio.Task[None]] = set()  # work running on the worker's loop
        self.writes = Writes(self)
        self._kick_fut: asyncio.Future[None] | None = None
        self.backing_off = 0  # step executions waiting in place for their retry time
        # A cancel request not given to the flow yet: its reason (from the claim, or
        # from the heartbeat: `request_cancel`). Given: the journal's ~cancel record.
        self.cancel_reason = stored.cancel_reason
        if self.cursor.cancel is not None:
            self.cancel_reason = self.cursor.cancel_reason
        self.cut: set[asyncio.Task[Any]] = set()  # work cut off to give the cancel
        self._task: asyncio.Task[Any] | None = None  # the task that runs `execute`
        self._ctx = contextvars.copy_context()
        self._ctx.run(run_var.set, self.machine)

    # -- what the worker reads ------------------------------------------------------

    @property
    def crashed(self) -> bool:
        return self.abandoned

    @property
    def suspending(self) -> bool:
        return self.parking or self.machine.discarding

    @property
    def cancel_pending(self) -> bool:
        """A cancel request waits to be given to the flow."""
        return self.cancel_reason is not None and not self.machine.cancel_given

    def request_cancel(self, reason: str) -> None:
        """The heartbeat found a cancel request for this run: cut off the step
        executions in flight, and give the flow the cancel once nothing is written."""
        if self.machine.cancel_given or self.abandoned:
            return
        self.cancel_reason = reason
        self.cut_work()
        self.kick()

    def cut_work(self) -> None:
        """Cancel the step executions in flight that are not in a write (a write in
        flight completes; the cancel waits for it): they record nothing."""
        writing = self.writes.writing
        for task in self.running:
            if task not in writing and task not in self.cut:
                self.cut.add(task)
                task.cancel()
        # the one piece of work that runs inline runs in `execute`'s task
        inline = self._task
        if self.writes.inline and inline is not None and inline not in writing | self.cut:
            self.cut.add(inline)
            inline.cancel()

    @property
    def holding(self) -> bool:
        """Whether only the clock can move this activation on: no write is in flight,
        every execution in flight (inline or as a task) waits in place for its retry
        time, and the driver waits or runs one of them. The worker's
        `run_until_idle` counts it as idle."""
        writes = self.writes
        if writes.batches or (self._kick_fut is None and not writes.inline):
            return False  # a write in flight, or the driver is busy
        if len(self.running) + writes.inline != self.backing_off:
            return False  # an execution that is not waiting for its retry time
        return self.backing_off > 0 or self.next_due() is not None

    def maybe_held(self) -> None:
        """Tell the worker's `run_until_idle` when this activation starts `holding`
        (only while one is looking: nothing to work out otherwise)."""
        if self.engine.holding is not None and self.holding:
            self.engine.held()

    def next_due(self) -> float | None:
        """The earliest due time of the calls the flow still waits for (None: none)."""
        if self.resolving is not None or not self.waiting:
            return None  # waits complete one at a time
        wanted = self.machine.wanted
        dues = [d for op in self.waiting.values() if (d := due(op)) is not None and wanted(op)]
        return min(dues) if dues else None

    def kick(self) -> None:
        """Wake the driver: a write or a piece of work ended."""
        fut = self._kick_fut
        if fut is not None and not fut.done():
            fut.set_result(None)

    # -- work on the worker's loop -----------------------------------------------------

    def spawn(self, coro: Coroutine[Any, Any, None], *, step: bool = False) -> None:
        """Queue `coro` (a step execution, a write) to run on the worker's loop;
        `step`: it is a step's attempts (what may run ahead: `sdk.engine._ahead`)."""
        self._queued.append((coro, step))

    def park_op(self, op: Op) -> None:
        """`op` waits for a signal or a time (see `sdk.engine._waits`)."""
        self.waiting[op.pos] = op

    def abandon(self, *, error: Exception | None = None, lost: LeaseLost | None = None) -> None:
        """Stop at once, as a dead process would: no step body goes on, nothing more is
        written (writes already sent complete); the lease is left to expire."""
        if error is not None and self.store_error is None:
            self.store_error = error
        if lost is not None and self.lost is None:
            self.lost = lost
        if self.abandoned:
            return
        self.abandoned = self.machine.halted = True
        for task in list(self.running):
            if task not in self.writes.writing:
                task.cancel()
        self.kick()

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

    # -- the end ---------------------------------------------------------------------

    async def settle(self) -> None:
        """Cut off step bodies still running; let writes in flight complete."""
        for task in list(self.running):
            if task not in self.writes.writing:
                task.cancel()
        while self.running:
            await asyncio.wait(list(self.running))

    def discard(self) -> None:
        """Unwind the flow (see the module docstring): nothing it calls runs or records."""
        if self.machine.discarding:
            return
        self.kept = False
        left = self.machine.discard()
        if left:
            log.warning(
                "run %s: %d task(s) of the flow would not unwind (they catch BaseException)",
                self.run_id, left,
            )  # fmt: skip

    def release_on_cancel(self) -> Coroutine[Any, Any, None]:
        return self.store.release(self.run_id, self.fence)
