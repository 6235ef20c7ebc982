"""The run lifecycle: the one transition table, and its check.

The table itself, `TRANSITIONS`, is the store protocol's (`sdk.store`):
stores enforce the same one (the Redis store generates its Lua copy from it),
so there is exactly one source.
"""

from __future__ import annotations

from sdk.errors import InvalidTransition
from sdk.store import RESUMABLE, TRANSITIONS, RunStatus

__all__ = ["RESUMABLE", "TRANSITIONS", "check_transition"]


def check_transition(
    run_id: str, current: RunStatus, requested: RunStatus, *, resume: bool = False
) -> None:
    """Raise `InvalidTransition` unless ``current -> requested`` is allowed.

    ``resume=True`` also admits the explicit resume of a failed or canceled run.
    """
    if requested in TRANSITIONS[current]:
        return
    if resume and current in RESUMABLE and requested is RunStatus.RUNNING:
        return
    raise InvalidTransition(run_id, current, requested)
