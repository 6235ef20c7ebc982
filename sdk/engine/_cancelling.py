"""How an activation gives its flow a cancel request (the "Cancel" part of
`sdk.engine._activation`'s docstring): once, at the live frontier, after cutting off
the step executions in flight (nothing of them is recorded) and journalling a
``~cancel`` record for the round it is given in."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from sdk.engine._ops import Op
from sdk.engine._writes import Stop

if TYPE_CHECKING:
    from sdk.engine._aio import FlowLoop
    from sdk.engine._cursor import ReplayCursor
    from sdk.engine._machine import FlowMachine
    from sdk.engine._writes import Writes

__all__ = ["Cancelling"]


class Cancelling:
    """The cancel half of an activation (see `sdk.engine._activation.Activation`)."""

    cancel_reason: str | None
    abandoned: bool
    machine: FlowMachine
    cut: set[asyncio.Task[Any]]
    running: set[asyncio.Task[None]]
    resolving: Op | None
    waiting: dict[int, Op]
    cursor: ReplayCursor
    writes: Writes
    loop: FlowLoop
    _task: asyncio.Task[Any] | None

    if TYPE_CHECKING:

        def kick(self) -> None: ...  # the Activation's

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
        self.machine.give_cancel()
        self.loop.run_ready()
