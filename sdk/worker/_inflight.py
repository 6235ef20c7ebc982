"""The activations a worker has in flight: one task per claimed run, from its
claim until its activation ends (parks, ends the run, or is interrupted).

Each task holds a slot of the worker's ``concurrency``; its run's lease is
renewed by the heartbeat (`sdk.worker._heartbeat`) while it is here. A run whose
stored data cannot be read is failed here too, by a task of its own
(`sdk.worker._quarantine`), so that its slot is counted like any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from sdk._core._clock import moves_by_itself
from sdk.engine._activation import Activation
from sdk.store import CorruptData, Damaged
from sdk.worker import _quarantine
from sdk.worker._sticky import StickyCache
from sdk.worker._sticky import reload as sticky_reload

if TYPE_CHECKING:
    from sdk._core._clock import Clock
    from sdk.engine._engine import Engine
    from sdk.model._flowdef import FlowDef
    from sdk.store import Claim, Store

__all__ = ["InFlight"]

log = logging.getLogger("steadyflow.worker")


class InFlight:
    """The activations in flight of one worker, by run id (see the module).

    Args:
        store: the worker's store.
        clock: the worker's clock.
        engine: what the activations share.
        flow: the definition of a flow at a version the worker serves, or None.
        sticky: the activations the worker keeps once parked (None: it keeps none).
    """

    def __init__(
        self,
        store: Store,
        clock: Clock,
        engine: Engine,
        flow: Callable[[str, str | None], FlowDef | None],
        sticky: StickyCache | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.engine = engine
        self._flow = flow
        self._sticky = sticky
        # None for a task that fails a damaged run (it has no activation)
        self._tasks: dict[str, tuple[asyncio.Task[None], Activation | None]] = {}
        # the queue of each run executing here: its Queue(worker_concurrency=) room
        self._queue_of: dict[str, str] = {}
        # runs whose activation was interrupted because the heartbeat found the
        # lease lost (canceled, or taken over): nothing to hand back for them
        self._lost: set[str] = set()
        #: set whenever a task here ends: its slot is free
        self.slot_freed = asyncio.Event()

    def __len__(self) -> int:
        return len(self._tasks)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._tasks

    def tasks(self) -> list[asyncio.Task[None]]:
        return [t for t, _ in self._tasks.values()]

    def activation(self, run_id: str) -> Activation | None:
        """The activation in flight for `run_id`, if any."""
        entry = self._tasks.get(run_id)
        return None if entry is None else entry[1]

    def leases(self) -> list[tuple[str, int]]:
        """The (run id, fence) of each lease held here (a crashed activation's: not)."""
        return [
            (run_id, act.fence)
            for run_id, (_, act) in self._tasks.items()
            if act is not None and not act.crashed
        ]

    def executing(self) -> dict[str, int]:
        """How many runs of each queue execute here."""
        executing: dict[str, int] = {}
        for q in self._queue_of.values():
            executing[q] = executing.get(q, 0) + 1
        return executing

    def busy(self) -> list[asyncio.Task[None]]:
        """The activations in flight that go on without the clock's owner moving it."""
        if moves_by_itself(self.clock):
            return self.tasks()
        return [t for t, act in self._tasks.values() if act is None or not act.holding]

    def interrupt(self, run_id: str) -> None:
        """Cancel the activation of `run_id`, whose lease is lost: it hands nothing back."""
        self._lost.add(run_id)
        self._tasks[run_id][0].cancel()

    def spawn(self, claim: Claim, polled_at: float) -> None:
        """Start the activation of a claimed run (claimed at `polled_at`)."""
        run_id = claim.run.run_id
        if claim.damage is not None:
            self.fail_damaged(claim.damage)
            return
        fd = self._flow(claim.run.flow, claim.run.flow_version)
        sticky = self._sticky
        kept = None if sticky is None or fd is None else sticky.claimed(claim, fd)
        act: Activation | None
        if fd is None:
            task = asyncio.create_task(self._unknown_flow(claim))
            act = None
        elif kept is not None:
            act = kept
            task = asyncio.create_task(self._execute(act, (claim, polled_at)))
        elif claim.cached:  # its activation is no longer kept here: read the journal
            act = None
            task = asyncio.create_task(self._reload(claim, polled_at))
        else:
            try:
                journal = _quarantine.decode(claim, self.store)
            except _quarantine.Undecodable as bad:
                self.fail_damaged(Damaged(run_id, bad.key, bad.detail, claim.run.fence))
                return
            act = Activation(
                self.engine, claim.run, journal, fd, claim.mail, claim.lineage,
                claimed_at=polled_at,
            )  # fmt: skip
            task = asyncio.create_task(self._execute(act))
        self._lost.discard(run_id)  # a new activation: whatever befell an earlier one
        self._tasks[run_id] = (task, act)
        self._queue_of[run_id] = claim.run.queue
        task.add_done_callback(functools.partial(self._done, run_id))

    def fail_damaged(self, damaged: Damaged) -> None:
        """Fail a run whose stored data cannot be read, alone (`sdk.worker._quarantine`)."""
        if damaged.run_id in self._tasks:
            return  # its activation here reports it at its next write
        task = asyncio.create_task(_quarantine.fail(self.store, self.clock, damaged))
        self._tasks[damaged.run_id] = (task, None)
        task.add_done_callback(functools.partial(self._done, damaged.run_id))

    def _done(self, run_id: str, task: asyncio.Task[None]) -> None:
        # Only if it is still the run's current task: a run re-queued as its
        # activation ends (continue_as_new, a wake-up that was already there) can
        # be claimed again before that activation's task is done, and the new
        # activation must stay tracked (its lease renewed, its slot counted).
        entry = self._tasks.get(run_id)
        if entry is not None and entry[0] is task:
            del self._tasks[run_id]
            self._queue_of.pop(run_id, None)
            self._lost.discard(run_id)
        self.slot_freed.set()

    async def _unknown_flow(self, claim: Claim) -> None:
        # Only reachable if a flow left the registry between poll and spawn:
        # hand the run back for a worker that serves its flow.
        run = claim.run
        log.warning(
            "run %s: flow %r at version %r is not served here; handing it back",
            run.run_id, run.flow, run.flow_version,
        )  # fmt: skip
        await self.store.release(run.run_id, run.fence)

    async def _reload(self, claim: Claim, polled_at: float) -> None:
        full = await sticky_reload(self.store, claim)
        if full is None:
            return
        entry = self._tasks.get(claim.run.run_id)
        if entry is None or entry[0] is not asyncio.current_task():
            return  # stopped meanwhile
        self.spawn(full, polled_at)  # tracked under its new task from here

    async def _execute(self, act: Activation, resumed: tuple[Claim, float] | None = None) -> None:
        try:
            if resumed is None:
                await act.execute()
            else:
                claim, polled_at = resumed
                await act.proceed(claim.run, claim.mail, polled_at)
            if act.kept and self._sticky is not None:  # parked, the flow where it waits
                self._sticky.keep(act)
        except asyncio.CancelledError:
            act.discard()  # (kept or not, nothing of it goes on)
            if act.run_id in self._lost:  # by the heartbeat: the run is no longer ours
                raise
            # Interrupted by stop(): hand the run back so another worker continues it.
            with contextlib.suppress(Exception):
                await asyncio.shield(act.release_on_cancel())
            raise
        except Exception:
            act.discard()
            log.exception(
                "run %s: activation failed inside the engine; its lease will expire "
                "and another activation will retry it", act.run_id,
            )  # fmt: skip
        error = act.store_error
        if isinstance(error, CorruptData):  # a write found the run's data damaged
            await _quarantine.fail(
                self.store, self.clock, Damaged(act.run_id, error.key, error.detail, act.fence)
            )

    async def drain(self, grace: float) -> None:
        """Let the activations in flight finish within `grace` seconds; interrupt the
        rest (each hands its run back)."""
        tasks = self.tasks()
        if not tasks:
            return
        log.info("waiting up to %.1fs for %d activation(s)", grace, len(tasks))
        _, late = await asyncio.wait(tasks, timeout=grace)
        for t in late:
            t.cancel()
        if late:
            await asyncio.wait(late)
            log.warning("handed %d unfinished run(s) back to the queue", len(late))
