"""The calls a flow makes, as its activation takes them (the flow's side of
`sdk.engine._activation.Activation`): each gets a key and a position when it is made,
and is replayed from the journal or started live by the activation's driver.

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
from sdk.engine._children import ChildWaitOp, make_child_op
from sdk.engine._ops import (
    EventWaitOp,
    NowOp,
    Op,
    PatchOp,
    SleepOp,
    StepOp,
    TimerOp,
    UuidOp,
    WaitOp,
)
from sdk.errors import NonDeterminismError

if TYPE_CHECKING:
    from sdk._core._clock import Clock
    from sdk._core._values import Serializer
    from sdk.engine._aio import FlowLoop
    from sdk.engine._cursor import ReplayCursor
    from sdk.model._flowdef import FlowDef
    from sdk.model._stepspec import StepSpec
    from sdk.runtime._runtime import ChildHandle
    from sdk.store import EventWatch, NewRun, StoredRun

__all__ = ["FlowCalls"]

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


class FlowCalls:
    """The flow-facing half of an activation (see `sdk.engine._activation.Activation`)."""

    run_id: str
    stored: StoredRun
    cursor: ReplayCursor
    clock: Clock
    serializer: Serializer
    loop: FlowLoop
    discarding: bool
    abandoned: bool
    _lineage_raw: dict[str, str]
    continuing: str | None
    waiting: dict[int, Op]
    last_round: int

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
        if self.discarding or self.abandoned:
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
        if answer is None or self.discarding or self.abandoned:
            raise _Evicted(_TOKEN)
        if self.continuing is not None:
            raise _ContinueAsNew(_TOKEN)
        return answer

    def deprecate_patch(self, change_id: str) -> None:
        if self.discarding or self.abandoned:
            raise _Evicted(_TOKEN)
        self.cursor.deprecate(change_id)

    def start_child(
        self, new: NewRun, fd: FlowDef | None, own_id: bool
    ) -> Coroutine[Any, Any, Any]:
        key, pos = self.cursor.alloc(f"~child:{new.flow}")
        base = self.run_id + (f"~g{self.stored.generation}" if self.stored.generation else "")
        return self._await(make_child_op(base, key, pos, new, fd, own_id))

    def child_result(self, handle: ChildHandle) -> Coroutine[Any, Any, Any]:
        key, pos = self.cursor.alloc(f"~result:{handle.flow}")
        op = ChildWaitOp(
            key, pos, name=f"~child:{handle.run_id}", human=False, approvers=None, timeout=None,
            child=handle, serializer=self.serializer,
        )  # fmt: skip
        return self._await(op)

    async def continue_as_new(self, args: str) -> NoReturn:
        if self.discarding or self.abandoned:
            raise _Evicted(_TOKEN)
        if self.continuing is None:
            self.continuing = args  # the first call wins (one under gather, say)
        raise _ContinueAsNew(_TOKEN)

    async def _await(self, op: Op) -> Any:
        if self.discarding or self.abandoned:
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
        if self.discarding or self.abandoned:
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
