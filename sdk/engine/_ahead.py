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

from typing import TYPE_CHECKING

from sdk.engine._ops import StepOp

if TYPE_CHECKING:
    from sdk.engine._state import ActivationState

__all__ = ["ahead", "one_step_next"]


def ahead(act: ActivationState) -> bool:
    """Whether the activation may start the flow's next calls with the last
    step's write on the wire."""
    cursor = act.cursor
    main = act.machine.main
    return (
        bool(cursor.new)
        and cursor.fatal is None
        and act.machine.continuing is None
        and not act.cancel_pending
        and main is not None
        and not main.done()
        and (not act.engine.interceptors or all(type(op) is StepOp for op in cursor.new))
    )


def one_step_next(act: ActivationState) -> bool:
    """Whether all that was started is one step's attempts, to launch inline."""
    queued = act._queued
    return (
        len(queued) == 1 and queued[0][1] and not (act.waiting or act.running or act.writes.batches)
    )
