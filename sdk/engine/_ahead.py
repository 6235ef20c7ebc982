"""How far an activation goes while a step's write is on the wire.

A step that runs inline (the flow's next step, nothing else in flight: see
`Activation._launch`) has its outcome written with `Writes.send`: the write
goes out, the outcome is delivered at once, and the flow's own code runs on
to its next calls while the write travels to Redis and back. Then, in
`Activation._inline`:

- the activation goes on only to start the calls the flow made (`ahead`): ops
  and futures, nothing that leaves the process. Interceptors are told of a
  wait, a sleep or a child as it starts, so with interceptors only steps go
  ahead;
- if all that was started is one step (`one_step_next`), it runs inline there
  too: its attempt computes what it needs (its request hash) and then awaits
  the write (`sdk.engine._steprun`) before its body runs;
- anything else is left to the driver, which awaits the write before all else
  (`Writes.landed`): a write, a wait, a child, the run's end or park, a cancel, a
  timeout.

So the engine's Python of one step (the reply's way up, the flow's code, the
next step's start) overlaps the round trip of the one before, and nothing
with an effect happens before that write is back. A write the store refused
(a lost lease) or that failed stops the activation there (`Writes.landed`), as
it would have before the flow went on; the flow's code that ran ahead is
discarded with the activation and runs again in the next one, as on any
replay.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from sdk.engine import _steprun
from sdk.engine._ops import StepOp

if TYPE_CHECKING:
    import asyncio

    from sdk.engine._cursor import ReplayCursor
    from sdk.engine._engine import Engine
    from sdk.engine._machine import FlowMachine
    from sdk.engine._ops import Op
    from sdk.engine._writes import Writes

__all__ = ["Ahead"]


class Ahead:
    """The run-ahead half of an activation (see the module docstring)."""

    cursor: ReplayCursor
    writes: Writes
    engine: Engine
    machine: FlowMachine
    waiting: dict[int, Op]
    running: set[asyncio.Task[None]]
    _queued: list[Coroutine[Any, Any, None]]

    if TYPE_CHECKING:

        @property
        def cancel_pending(self) -> bool: ...  # Cancelling's

    def ahead(self) -> bool:
        """Whether the activation may start the flow's next calls with the last
        step's write on the wire."""
        cursor = self.cursor
        return (
            bool(cursor.new)
            and cursor.fatal is None
            and self.machine.continuing is None
            and not self.cancel_pending
            and self.machine.main is not None
            and not self.machine.main.done()
            and (not self.engine.interceptors or all(type(op) is StepOp for op in cursor.new))
        )

    def one_step_next(self) -> bool:
        """Whether all that was started is one step, to launch inline."""
        queued = self._queued
        return (
            len(queued) == 1
            and getattr(queued[0], "cr_code", None) is _steprun.ATTEMPTS
            and not (self.waiting or self.running or self.writes.batches)
        )
