"""How an activation gives its flow a cancel request (the "Cancel" part of
`sdk.engine._activation`'s docstring): once, at the live frontier, after cutting off
the step executions in flight (nothing of them is recorded) and journalling a
``~cancel`` record for the round it is given in."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from sdk.engine._children import ChildOp
from sdk.engine._ops import Op, StepOp, ValueOp
from sdk.engine._writes import Stop

if TYPE_CHECKING:
    from sdk.engine._aio import FlowLoop, FlowTask
    from sdk.engine._cursor import ReplayCursor
    from sdk.engine._writes import Writes

__all__ = ["Cancelling"]


class Cancelling:
    """The cancel half of an activation (see `sdk.engine._activation.Activation`)."""

    cancel_reason: str | None
    cancel_given: bool
    abandoned: bool
    cut: set[asyncio.Task[Any]]
    running: set[asyncio.Task[None]]
    resolving: Op | None
    waiting: dict[int, Op]
    last_round: int
    cursor: ReplayCursor
    writes: Writes
    loop: FlowLoop
    main: FlowTask | None
    _task: asyncio.Task[Any] | None

    if TYPE_CHECKING:

        def kick(self) -> None: ...  # the Activation's

    @property
    def cancel_pending(self) -> bool:
        """A cancel request waits to be given to the flow."""
        return self.cancel_reason is not None and not self.cancel_given

    def request_cancel(self, reason: str) -> None:
        """The heartbeat found a cancel request for this run: cut off the step
        executions in flight, and give the flow the cancel once nothing is written."""
        if self.cancel_given or self.abandoned:
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

    def _cancel_ready(self) -> bool:
        return not (self.running or self.writes.batches or self.resolving is not None)

    async def _cancel_live(self) -> None:
        """Journal the cancel for the next round, then give it to the flow."""
        reason = self.cancel_reason
        assert reason is not None
        try:
            self.cursor.round = await self.writes.cancel_given(reason)
        except Stop:
            return  # the activation stopped (lost lease, store error): `abandoned`
        self._give_cancel()
        self.loop.run_ready()

    def _give_cancel(self) -> None:
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
