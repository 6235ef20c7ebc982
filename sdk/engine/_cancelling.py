"""How an activation gives its flow a cancel request (the "Cancel" part of
`sdk.engine._activation`'s docstring): once, at the live frontier, after cutting off
the step executions in flight (nothing of them is recorded; `ActivationState.cut_work`)
and journalling a ``~cancel`` record for the round it is given in. The flow machine
delivers it (`FlowMachine.give_cancel`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sdk.engine._writes import Stop

if TYPE_CHECKING:
    from sdk.engine._state import ActivationState

__all__ = ["give", "ready"]


def ready(act: ActivationState) -> bool:
    """Whether the cancel may be given now: nothing runs, nothing is in flight."""
    return not (act.running or act.writes.batches or act.resolving is not None)


async def give(act: ActivationState) -> None:
    """Journal the cancel for the next round, then give it to the flow."""
    reason = act.cancel_reason
    assert reason is not None
    try:
        act.cursor.round = await act.writes.cancel_given(reason)
    except Stop:
        return  # the activation stopped (lost lease, store error): `abandoned`
    act.machine.give_cancel()
    act.loop.run_ready()
