"""The benchmark flows again, with ``@flow(optional_checkpoints=True)``.

Apart from `bench.flows` because the option does not exist in engines before
the event log (``bench.events_overhead`` runs `bench.flows` on such an engine).
Each step also takes the optional ``step_started`` checkpoint: one more round
trip per step.
"""

from __future__ import annotations

from bench.flows import noop, timed_calls
from sdk import flow

__all__ = ["chain", "overhead"]


@flow(name="bench.overhead_checkpointed", optional_checkpoints=True)
async def overhead(n: int) -> list[list[float]]:
    """`bench.flows.overhead` with optional checkpoints."""
    return await timed_calls(n)


@flow(name="bench.chain_checkpointed", optional_checkpoints=True)
async def chain(n: int) -> int:
    """`bench.flows.chain` with optional checkpoints."""
    for i in range(n):
        await noop(i)
    return n
