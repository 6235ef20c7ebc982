"""The reserved names of the ``~`` namespace that more than one part of `sdk` uses.

No step, signal or channel name a user gives may contain ``~``, so these never
meet a user's: the journal keys of the engine's own records (a cancel given to
the flow, a patch marker), the default ids of child runs, and the outbox
channels every worker serves for the engine (a child's end, a parent's cancel).
"""

from __future__ import annotations

import hashlib

from sdk._core._checks import MAX_ID

__all__ = [
    "CANCEL_KEY",
    "CANCEL_POS",
    "CASCADE_CHANNEL",
    "CHILD_CHANNEL",
    "child_run_id",
    "patch_key",
]

#: The journal key of a cancel given to the flow (reserved: no step name has "~").
CANCEL_KEY = "~cancel"
#: Its position: before every call of the flow, so never one of them.
CANCEL_POS = -1

#: The engine-internal outbox channels every worker serves: a child's end
#: (delivered to its parent's mailbox), a canceled run's unfinished children.
CHILD_CHANNEL = "~child"
CASCADE_CHANNEL = "~cascade"


def patch_key(change_id: str) -> str:
    """The journal key of a patch marker (reserved namespace, one per change id)."""
    return f"~patch:{change_id}"


def child_run_id(base: str, key: str) -> str:
    """The default id of the child started by the call `key` of the run (and
    generation: ``"<run id>~g<n>"`` after the first) `base`."""
    cid = f"{base}~{key[1:]}"
    if len(cid) <= MAX_ID:
        return cid
    digest = hashlib.sha256(f"{base}\n{key}".encode()).hexdigest()
    return f"{digest[:40]}~child"
