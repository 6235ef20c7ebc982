"""A worker's heartbeat: it renews the leases of its activations, interrupts the
ones whose lease was lost (a cancel, a takeover, a fired run timeout all move the
fencing token), gives a cancel request (`Client.cancel` with a grace period) to
the activation of its run, and keeps the worker's registration on the store
alive. The renewal reports both, so a cancel costs no poll per step."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import TYPE_CHECKING

from sdk._core._types import served_name
from sdk.store import PartitionsMismatch, WorkerBeat

if TYPE_CHECKING:
    from sdk._core._clock import Clock
    from sdk.engine._activation import Activation
    from sdk.store import Store
    from sdk.worker._dispatch import Dispatcher

__all__ = ["Heartbeat"]

log = logging.getLogger("steadyflow.worker")


class Heartbeat:
    """The heartbeat half of a `sdk.Worker`."""

    clock: Clock
    store: Store
    dispatcher: Dispatcher
    owner: str
    queues: list[str] | None
    concurrency: int
    lease_ttl: float
    _started_at: float
    _stop: asyncio.Event
    #: What stopped the worker from its heartbeat (`Worker.run` raises it).
    _fatal: PartitionsMismatch | None = None
    _inflight: dict[str, tuple[asyncio.Task[None], Activation]]
    _lost: set[str]

    if TYPE_CHECKING:

        def _served(self) -> list[tuple[str, str | None]]: ...  # the Worker's flows

    def _beat(self) -> WorkerBeat:
        now = self.clock.time()
        return WorkerBeat(
            worker_id=self.owner, host=socket.gethostname(), pid=os.getpid(),
            flows=tuple(sorted(served_name(n, v) for n, v in self._served())),
            queues=None if self.queues is None else tuple(self.queues),
            concurrency=self.concurrency, in_flight=len(self._inflight),
            started_at=self._started_at, beat_at=now, expires_at=now + self.lease_ttl,
        )  # fmt: skip

    async def _register(self) -> None:
        """Tell the store this worker is alive and what it serves (clients look)."""
        try:
            await self.store.beat(self._beat())
        except PartitionsMismatch as exc:  # found again at a beat: no retry mends it
            log.error("worker %s stops: %s", self.owner, exc)
            self._fatal = exc
            self._stop.set()
        except Exception:
            log.exception("worker heartbeat failed; will try again")

    async def _heartbeat(self, register: bool = False) -> None:
        interval = max(self.lease_ttl / 3, 0.05)
        while True:
            await asyncio.sleep(interval)
            await self._renew_leases()
            if register:  # after the leases: they are what a late heartbeat costs
                await self._register()

    async def _renew_leases(self, now: float | None = None) -> None:
        """Extend the leases held here to a TTL after `now` (default: the clock's now)."""
        expiry = (self.clock.time() if now is None else now) + self.lease_ttl
        leases = [
            (run_id, act.fence)
            for run_id, (_, act) in self._inflight.items()
            if act is not None and not act.crashed
        ]
        fences = dict(leases)
        try:
            await self.dispatcher.renew(expiry)
            if not leases:
                return
            lost = await self.store.renew(leases, expiry)
        except Exception:
            log.exception("lease heartbeat failed; will try again")
            return
        for run_id, reason in lost.cancel_requested.items():
            entry = self._inflight.get(run_id)
            if entry is None or entry[1] is None or entry[1].fence != fences.get(run_id):
                continue
            if not entry[1].suspending:  # parking: the park script sees the request
                entry[1].request_cancel(reason)
        for run_id in lost:
            entry = self._inflight.get(run_id)
            if entry is None or entry[1] is None or entry[1].fence != fences.get(run_id):
                continue  # ended meanwhile (perhaps claimed again, with a new fence)
            if entry[1].suspending:
                continue  # parking or ending: its own writes say how it went
            # A cancel bumps the fence, and so does a takeover: every write of this
            # activation would be refused, so interrupt it now (the step executing
            # gets CancelledError and records nothing) and free its slot, rather
            # than let a step run on for nothing.
            log.warning(
                "run %s: lease lost (canceled or taken over); interrupting its activation",
                run_id,
            )
            self._lost.add(run_id)
            entry[0].cancel()
