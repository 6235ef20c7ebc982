"""The run lifecycle: the one transition table, and its check.

The Lua scripts enforce the same table: `stores._scripts` generates their
Lua copy from `TRANSITIONS`, so there is exactly one source.
"""

from __future__ import annotations

from collections.abc import Mapping

from sdk._types import RunStatus
from sdk.errors import InvalidTransition

__all__ = ["RESUMABLE", "TRANSITIONS", "check_transition"]

S = RunStatus

#: Allowed moves the engine makes on its own.
TRANSITIONS: Mapping[RunStatus, frozenset[RunStatus]] = {
    S.PENDING: frozenset({S.RUNNING, S.CANCELED}),
    S.RUNNING: frozenset(
        {S.WAITING_FOR_HUMAN, S.WAITING_FOR_SIGNAL, S.REPLAYING, S.COMPLETED, S.FAILED, S.CANCELED}
    ),
    S.WAITING_FOR_HUMAN: frozenset({S.RUNNING, S.CANCELED, S.FAILED}),
    S.WAITING_FOR_SIGNAL: frozenset({S.RUNNING, S.CANCELED, S.FAILED}),
    S.REPLAYING: frozenset({S.RUNNING, S.FAILED, S.CANCELED}),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELED: frozenset(),
}

#: The one way out of a terminal status: an explicit `Client.resume` (→ running).
RESUMABLE: frozenset[RunStatus] = frozenset({S.FAILED, S.CANCELED})


def check_transition(
    run_id: str, current: RunStatus, requested: RunStatus, *, resume: bool = False
) -> None:
    """Raise `InvalidTransition` unless ``current -> requested`` is allowed.

    ``resume=True`` also admits the explicit resume of a failed or canceled run.
    """
    if requested in TRANSITIONS[current]:
        return
    if resume and current in RESUMABLE and requested is S.RUNNING:
        return
    raise InvalidTransition(run_id, current, requested)
