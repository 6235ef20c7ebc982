"""The flow machine: a run's flow code against its journal, with no I/O.

It runs the flow function on its own deterministic loop (`sdk.engine._aio.FlowLoop`)
and is the `sdk.runtime.Runtime` the flow's calls go to: each call gets a key
and a position when it is made (`sdk.engine._cursor`), becomes an op, and waits
for its outcome. The machine owns replay (recorded outcomes delivered in their
rounds), keys and positions, non-determinism detection, the delivery of
outcomes and of a cancel to the flow, and the unwinding of a flow whose
activation ended. It awaits nothing from the store: the activation
(`sdk.engine._activation`) takes the ops the flow made (`take_new`), does what
they ask (runs steps, writes records, waits), and `deliver`s their outcomes.

Also the signals that unwind a flow (`_Evicted`, `_ContinueAsNew`): BaseExceptions
only the engine can construct, so ``except Exception`` in a flow cannot swallow
them, and every call made while unwinding raises at once (it runs nothing).
"""

from __future__ import annotations

import asyncio
import contextvars
import uuid
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, NoReturn

from sdk._core._keys import patch_key
from sdk.engine._aio import FlowLoop, FlowTask, interested
from sdk.engine._cursor import ReplayCursor
from sdk.engine._ops import (
    ChildOp,
    ChildWaitOp,
    EventWaitOp,
    NowOp,
    Op,
    Outcome,
    PatchOp,
    SleepOp,
    StepOp,
    TimerOp,
    UuidOp,
    ValueOp,
    WaitOp,
    make_child_op,
)
from sdk.errors import NonDeterminismError, NotInStepError
from sdk.runtime._runtime import RunInfo, Runtime

if TYPE_CHECKING:
    from sdk._core._clock import Clock
    from sdk._core._journal import Journal
    from sdk._core._values import Serializer
    from sdk.client._client import Client
    from sdk.engine._observing import Hooks
    from sdk.model._flowdef import FlowDef
    from sdk.model._registry import Registry
    from sdk.model._stepspec import StepSpec
    from sdk.runtime._runtime import ChildHandle
    from sdk.store import EventWatch, NewRun, StoredRun

__all__ = ["FlowMachine", "evicted"]

_TOKEN = object()


class _Evicted(BaseException):
    """Unwinds a flow whose activation ended. A BaseException, so ``except
    Exception`` cannot swallow it; only the engine can construct it."""

    def __init__(self, token: object) -> None:
        if token is not _TOKEN:
            raise TypeError("the eviction signal is raised by Steadyflow only")
        super().__init__("this activation of the run ended (it parked, finished or stopped)")


class _ContinueAsNew(BaseException):
    """Unwinds a flow that called `continue_as_new`: like `_Evicted`, nothing the
    unwinding calls runs; the activation then ends the generation (`sdk.engine._ending`)."""

    def __init__(self, token: object) -> None:
        if token is not _TOKEN:
            raise TypeError("the continue-as-new signal is raised by Steadyflow only")
        super().__init__("the flow continues as new (this generation of the run ended)")


def evicted() -> _Evicted:
    """The signal that unwinds a flow whose activation ended."""
    return _Evicted(_TOKEN)


class _DurableTimer(asyncio.TimerHandle):
    op: TimerOp


class FlowMachine(Runtime):
    """One activation's flow: its loop, its calls, their outcomes (see the module docstring).

    Args:
        stored: the run (its id, generation, arguments, tenant, trace).
        journal: what the run recorded (replayed first).
        flow: the flow's definition.
        clock: the worker's clock (the flow's `now()`, its asyncio timers' time).
        serializer, registry: as the worker's.
        hooks: the worker's interceptors, as this activation tells them.
        client: makes the worker's client (for `current_run().client`).
        lineage: a replayed or forked run's reusable records (key -> JSON).
    """

    def __init__(
        self,
        stored: StoredRun,
        journal: Journal,
        flow: FlowDef,
        *,
        clock: Clock,
        serializer: Serializer,
        registry: Registry,
        hooks: Hooks,
        client: Callable[[], Client],
        lineage: dict[str, str],
    ) -> None:
        self.run_id = stored.run_id
        self.flow = flow
        self.clock = clock
        self.serializer = serializer
        self.registry = registry
        self.hooks = hooks
        self._client = client
        self._args = stored.args
        # the base of default child run ids: the run (and its generation)
        self._child_base = self.run_id + (f"~g{stored.generation}" if stored.generation else "")
        self._info = RunInfo(
            run_id=stored.run_id, flow=flow.name, flow_version=stored.flow_version,
            tenant_id=stored.tenant_id, trace_id=stored.trace_id or stored.run_id,
            tree_root_run_id=stored.tree_root_run_id or stored.run_id,
        )  # fmt: skip
        self._lineage_raw = lineage
        self.cursor = ReplayCursor(self.run_id, flow.name, journal, stored.flow_version)
        # AbstractEventLoop is no ABC at run time; mypy sees the I/O methods that
        # FlowLoop refuses (set in a loop at import) as missing.
        self.loop = FlowLoop(self)  # type: ignore[abstract]
        self.main: FlowTask | None = None
        self.waiting: dict[int, Op] = {}  # live calls waiting for a signal or a time
        # The last round a recorded outcome was delivered in: where a replay of the
        # journal would stand at the live frontier (what `proceed` starts from).
        self.last_round = journal.max_round
        self.continuing: str | None = None  # the next generation's arguments (JSON)
        self.discarding = False  # unwinding: every call raises `_Evicted`
        self.halted = False  # the activation stopped: every call raises `_Evicted`
        self.cancel_given = False

    # -- the run, as the flow's code sees it (`sdk.runtime.Runtime`) ----------------------

    @property
    def info(self) -> RunInfo:
        return self._info

    @property
    def is_replaying(self) -> bool:
        """Re-walking recorded rounds (or unwinding a discarded flow)."""
        return self.discarding or not self.cursor.live

    def client(self) -> Client:
        if isinstance(asyncio._get_running_loop(), FlowLoop):
            raise NotInStepError(
                "current_run().client is for steps: a flow body does no I/O (what it did "
                "would not be journaled); call the client from a @step"
            )
        return self._client()

    def log_context(self, step_key: str | None) -> dict[str, str]:
        extra: dict[str, str] = {}
        for hook in self.hooks.interceptors:
            extra.update(hook.log_context(self.run_id, step_key))
        return extra

    def emitting(self, key: str, *, finished: bool) -> None:
        if self.hooks.interceptors:
            self.hooks.call_hooks(key, "emit", finished)

    def encode_args(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        return self.flow.encode_args(args, kwargs, self.serializer)

    # -- the flow's main task, the outcomes it is given ----------------------------------

    def start(self, context: contextvars.Context) -> None:
        """Create the flow's main task (it runs at the loop's next `run_ready`)."""
        self.main = self.loop.create_task(self._flow_main(), context=context)

    async def _flow_main(self) -> Any:
        args, kwargs = self.flow.decode_args(self._args, self.serializer)
        return await self.flow.fn(*args, **kwargs)

    @property
    def fatal(self) -> NonDeterminismError | None:
        """The non-determinism found (kept even if the flow caught it): the run fails."""
        return self.cursor.fatal

    @property
    def finished(self) -> bool:
        """Whether the flow function returned or raised."""
        return self.main is not None and self.main.done()

    def replay_round(self) -> bool:
        """Deliver the next round the journal recorded (and the cancel, in the round it
        was given in), and run the flow on to where it blocks. False: nothing is left to
        replay, and the machine is live (unless it found non-determinism)."""
        cursor = self.cursor
        if cursor.live:
            return False
        recorded = cursor.next_recorded()
        if recorded is None:
            if cursor.fatal is None:
                cursor.live = True
            return False
        for op in recorded:
            rec = op.delivery
            assert rec is not None
            self.deliver(op, op.outcome(rec, self.serializer))
        if cursor.cancel_due:  # the round the cancel was given in
            cursor.cancel_due = False
            self.give_cancel()
        self.loop.run_ready()
        return True

    def deliver(self, op: Op, outcome: Outcome) -> None:
        """Give the flow `op`'s outcome, in the cursor's current round."""
        op.done = True
        cursor = self.cursor
        if cursor.round > self.last_round:
            self.last_round = cursor.round
        cursor.delivered(op)
        self.waiting.pop(op.pos, None)
        if isinstance(op, TimerOp):
            handle = op.handle
            if handle is not None and not handle.cancelled():
                self.loop.schedule(handle)
        elif op.fut is not None:
            outcome.apply(op.fut)

    def give_cancel(self) -> None:
        """`asyncio.CancelledError` to the flow, where it waits. The step, value and
        child-start calls not delivered are withdrawn (their executions were cut off, or never
        started), live and in a replay alike; what the main task awaits is
        cancelled with it."""
        self.cancel_given = True
        cursor = self.cursor
        self.last_round = max(self.last_round, cursor.round)
        withdrawn = [
            op
            for op in cursor.ops.values()
            if isinstance(op, (StepOp, ValueOp, ChildOp)) and not op.done
        ]
        for op in withdrawn:
            op.done = True
            cursor.delivered(op)
            self.waiting.pop(op.pos, None)
        if withdrawn:
            cursor.new = [op for op in cursor.new if not op.done]
        main = self.main
        if main is not None and not main.done():
            main.cancel()
        for op in withdrawn:  # awaited by another task of the flow, or by none
            if op.fut is not None and not op.fut.done():
                op.fut.cancel()

    def wanted(self, op: Op) -> bool:
        """Whether the flow still waits for `op` (a canceled call or a race's loser: no)."""
        if op.fut is not None and op.fut.cancelled():
            return False
        return interested(op.owner, self.main)

    def discard(self) -> int:
        """Unwind the flow: nothing it calls runs or records. Returns how many of its
        tasks would not unwind (they catch BaseException)."""
        if self.discarding:
            return 0
        self.discarding = True
        return self.loop.unwind(evicted)

    # -- the flow's side: calls get a key and a position when they are made ---------

    def step_call(
        self, spec: StepSpec, fn: Callable[..., Any], args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Coroutine[Any, Any, Any]:  # fmt: skip
        self.cursor.check_step(spec)
        key, pos = self.cursor.alloc(spec.name)
        return self._await(StepOp(key, pos, spec=spec, fn=fn, args=args, kwargs=kwargs))

    def wait(
        self, name: str, timeout: float | None, human: bool, approvers: tuple[str, ...] | None
    ) -> Coroutine[Any, Any, Any]:
        key, pos = self.cursor.alloc(f"~wait:{name}")
        op = WaitOp(key, pos, name=name, human=human, approvers=approvers, timeout=timeout)
        return self._await(op)

    def wait_event(
        self, name: str, watch: EventWatch, timeout: float | None, match: dict[str, Any]
    ) -> Coroutine[Any, Any, Any]:
        key, pos = self.cursor.alloc(f"~event:{name}")
        op = EventWaitOp(
            key, pos, name=name, human=False, approvers=None, timeout=timeout, watch=watch,
            match=match,
        )  # fmt: skip
        return self._await(op)

    def sleep_until(self, until: float | None, duration: float | None) -> Coroutine[Any, Any, Any]:
        key, pos = self.cursor.alloc("~sleep")
        return self._await(SleepOp(key, pos, until=until, duration=duration))

    def now(self) -> Coroutine[Any, Any, Any]:
        key, pos = self.cursor.alloc("~now")
        return self._await(NowOp(key, pos, make=lambda: self.clock.now().isoformat()))

    def uuid4(self) -> Coroutine[Any, Any, Any]:
        key, pos = self.cursor.alloc("~uuid4")
        return self._await(UuidOp(key, pos, make=lambda: str(uuid.uuid4())))

    def patched(self, change_id: str) -> Coroutine[Any, Any, bool]:
        known = self.cursor.answered(change_id)
        if known is not None:  # the same change id again: the same answer, no call
            return self._answer(known)
        if self.discarding or self.halted:
            return self._answer(None)
        try:
            pos = self.cursor.patch(change_id, self._lineage_raw)
        except NonDeterminismError as exc:  # raised where it is awaited, as other calls'
            return self._answer(exc)
        if pos is None:  # the old path: no call, so later calls keep their positions
            return self._answer(False)
        return self._await(PatchOp(patch_key(change_id), pos, make=lambda: change_id))

    async def _answer(self, answer: bool | NonDeterminismError | None) -> bool:
        if isinstance(answer, NonDeterminismError):
            raise answer
        if answer is None or self.discarding or self.halted:
            raise _Evicted(_TOKEN)
        if self.continuing is not None:
            raise _ContinueAsNew(_TOKEN)
        return answer

    def deprecate_patch(self, change_id: str) -> None:
        if self.discarding or self.halted:
            raise _Evicted(_TOKEN)
        self.cursor.deprecate(change_id)

    def start_child(
        self, new: NewRun, fd: FlowDef | None, own_id: bool
    ) -> Coroutine[Any, Any, Any]:
        key, pos = self.cursor.alloc(f"~child:{new.flow}")
        return self._await(make_child_op(self._child_base, key, pos, new, fd, own_id))

    def child_result(self, handle: ChildHandle) -> Coroutine[Any, Any, Any]:
        key, pos = self.cursor.alloc(f"~result:{handle.flow}")
        op = ChildWaitOp(
            key, pos, name=f"~child:{handle.run_id}", human=False, approvers=None, timeout=None,
            child=handle, serializer=self.serializer,
        )  # fmt: skip
        return self._await(op)

    async def continue_as_new(self, args: str) -> NoReturn:
        if self.discarding or self.halted:
            raise _Evicted(_TOKEN)
        if self.continuing is None:
            self.continuing = args  # the first call wins (one under gather, say)
        raise _ContinueAsNew(_TOKEN)

    async def _await(self, op: Op) -> Any:
        if self.discarding or self.halted:
            raise _Evicted(_TOKEN)
        if self.continuing is not None:
            raise _ContinueAsNew(_TOKEN)
        cursor = self.cursor
        cursor.check(op)
        rec = op.delivery
        if rec is not None and self.loop.quiet() and cursor.take_alone(rec):
            # Replaying a round that delivers this call alone, and no other flow
            # code is ready to run first: the driver would deliver it next anyway.
            op.done = True
            if cursor.round > self.last_round:
                self.last_round = cursor.round
            return op.replayed(rec, self.serializer)
        op.owner = asyncio.current_task(self.loop)
        op.fut = self.loop.create_future()
        cursor.file(op)
        return await op.fut

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
        if self.discarding or self.halted:
            raise _Evicted(_TOKEN)
        key, pos = self.cursor.alloc("~timer")
        handle = _DurableTimer(when, callback, args, loop, context)
        handle._scheduled = True  # type: ignore[attr-defined]  # cancel() tells the loop
        op = handle.op = TimerOp(key, pos, handle=handle, owner=asyncio.current_task())
        self.cursor.admit(op)
        return handle

    def timer_cancelled(self, handle: asyncio.TimerHandle) -> None:
        op = getattr(handle, "op", None)
        if isinstance(op, TimerOp) and not op.done:
            op.done = True  # withdrawn: it fires on no replay either
            self.waiting.pop(op.pos, None)
