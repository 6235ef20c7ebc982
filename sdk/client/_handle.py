"""`RunHandle`: a started run, and waiting for its end (`RunHandle.result`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from sdk._core._checks import check_seconds
from sdk._core._types import Reason, RunStatus
from sdk.errors import RunNotFound

if TYPE_CHECKING:
    from sdk.client._clientcore import ClientCore

__all__ = ["RunHandle"]

log = logging.getLogger("steadyflow.client")

#: Seconds `RunHandle.result` waits on a pending run before it checks, once,
#: that some live worker serves it (and logs a warning if none does).
PENDING_HINT_AFTER = 5.0

#: How long after its deadline `RunHandle.result` ends a wait the store has not
#: ended itself. Redis ends a blocking read at its next cron tick (every 100 ms
#: with its default ``hz 10``) when nothing else wakes it, so the last wait of a
#: ``result(timeout=)`` is cut here instead (the read's connection is closed,
#: as after any cancelled read, and the next read opens another).
RESULT_CUT_AFTER = 0.005


class RunHandle:
    """A started run. `result()` waits for it; it does not drive a worker."""

    __slots__ = ("_core", "run_id")

    def __init__(self, core: ClientCore, run_id: str) -> None:
        self._core = core
        self.run_id = run_id

    def __repr__(self) -> str:
        return f"RunHandle({self.run_id!r})"

    async def status(self) -> RunStatus:
        """The run's current status."""
        return (await self._core.stored(self.run_id)).status

    async def result(self, timeout: float | None = None) -> Any:
        """Wait until the run ends and return its result.

        Raises:
            RunFailed: the run failed (`.error` has type, message, step key, reason).
            RunCanceled: the run was canceled.
            TimeoutError: `timeout` seconds passed first.
            RunNotFound: no such run (or it was deleted; a run of a
                ``delete_on_success`` flow still returns its result for
                300 seconds after it completed).
        """
        if timeout is not None:
            timeout = check_seconds(timeout, "result(): timeout")
        store = self._core.store
        loop = asyncio.get_running_loop()
        began = loop.time()
        deadline = None if timeout is None else began + timeout
        warned = False
        run_id = self.run_id
        while True:
            stored = await store.get_run(run_id)
            if stored is None:
                # deleted on success: its tombstone holds the result for a while
                stored = await store.get_tombstone(run_id)
            if stored is None:
                raise RunNotFound(run_id)
            if stored.status.is_terminal:
                if stored.reason == Reason.CONTINUED_AS_NEW and "~g" in run_id:
                    # an archived generation ("<run id>~g<n>"): the result is the run's
                    run_id = run_id.rpartition("~g")[0]
                    continue
                return self._core.outcome(stored)
            wait = 5.0 if deadline is None else deadline - loop.time()
            if wait <= 0:
                hint = await self._core.unserved(stored)
                raise TimeoutError(
                    f"run {run_id!r} is still {stored.status.value} after {timeout}s"
                    + (f": {hint}" if hint else "")
                )
            if (
                not warned
                and stored.status is RunStatus.PENDING
                and loop.time() - began >= PENDING_HINT_AFTER
            ):
                warned = True  # once: pending for a while may just be a busy deployment
                hint = await self._core.unserved(stored)
                if hint:
                    log.warning("run %s is still pending: %s", run_id, hint)
            if deadline is None or wait > 5.0:
                await store.wait_finished(run_id, min(wait, 5.0))
            else:  # the last wait: it ends at the deadline, whenever the store would
                with contextlib.suppress(TimeoutError):  # the next pass reads it, then raises
                    await asyncio.wait_for(
                        store.wait_finished(run_id, wait), wait + RESULT_CUT_AFTER
                    )
