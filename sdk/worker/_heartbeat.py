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
from collections.abc import Callable
from typing import TYPE_CHECKING

from sdk._core._types import served_name
from sdk.store import PartitionsMismatch, WorkerBeat

if TYPE_CHECKING:
    from sdk._core._clock import Clock
    from sdk.store import Store
    from sdk.worker._dispatch import Dispatcher
    from sdk.worker._inflight import InFlight

__all__ = ["Heartbeat"]

log = logging.getLogger("steadyflow.worker")


class Heartbeat:
    """Keeps a worker's leases and its registration (see the module).

    Args:
        store: the worker's store.
        clock: the worker's clock.
        inflight: the activations whose leases it renews (and interrupts).
        dispatcher: the deliveries whose leases it renews.
        stop: set when the worker must stop (`fatal` says why).
        owner: the lease owner (the worker's id).
        queues: the queues served (None: all), as registered.
        concurrency: the worker's, as registered.
        lease_ttl: how long a renewal keeps a lease, and a registration.
        served: the (flow, version) pairs served, as registered.
    """

    def __init__(
        self,
        store: Store,
        clock: Clock,
        inflight: InFlight,
        dispatcher: Dispatcher,
        stop: asyncio.Event,
        *,
        owner: str,
        queues: list[str] | None,
        concurrency: int,
        lease_ttl: float,
        served: Callable[[], list[tuple[str, str | None]]],
    ) -> None:
        self.store = store
        self.clock = clock
        self.inflight = inflight
        self.dispatcher = dispatcher
        self._stop = stop
        self.owner = owner
        self.queues = queues
        self.concurrency = concurrency
        self.lease_ttl = lease_ttl
        self._served = served
        #: when the worker started serving (registered)
        self.started_at = clock.time()
        #: what stopped the worker from its heartbeat (`Worker.run` raises it)
        self.fatal: PartitionsMismatch | None = None

    def begin(self) -> None:
        """The worker starts serving now: nothing has stopped it yet."""
        self.fatal = None
        self.started_at = self.clock.time()

    def beat(self) -> WorkerBeat:
        """What a registration says of the worker now (`Client.workers` reads it)."""
        now = self.clock.time()
        return WorkerBeat(
            worker_id=self.owner, host=socket.gethostname(), pid=os.getpid(),
            flows=tuple(sorted(served_name(n, v) for n, v in self._served())),
            queues=None if self.queues is None else tuple(self.queues),
            concurrency=self.concurrency, in_flight=len(self.inflight),
            started_at=self.started_at, beat_at=now, expires_at=now + self.lease_ttl,
        )  # fmt: skip

    async def register(self) -> None:
        """Tell the store this worker is alive and what it serves (clients look)."""
        try:
            await self.store.beat(self.beat())
        except PartitionsMismatch as exc:  # found again at a beat: no retry mends it
            log.error("worker %s stops: %s", self.owner, exc)
            self.fatal = exc
            self._stop.set()
        except Exception:
            log.exception("worker heartbeat failed; will try again")

    async def run(self, register: bool = False) -> None:
        """Renew every third of a lease TTL (and register: `register`), until canceled."""
        interval = max(self.lease_ttl / 3, 0.05)
        while True:
            await asyncio.sleep(interval)
            await self.renew()
            if register:  # after the leases: they are what a late heartbeat costs
                await self.register()

    async def renew(self, now: float | None = None) -> None:
        """Extend the leases held here to a TTL after `now` (default: the clock's now)."""
        expiry = (self.clock.time() if now is None else now) + self.lease_ttl
        leases = self.inflight.leases()
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
            act = self.inflight.activation(run_id)
            if act is None or act.fence != fences.get(run_id):
                continue
            if not act.suspending:  # parking: the park script sees the request
                act.request_cancel(reason)
        for run_id in lost:
            act = self.inflight.activation(run_id)
            if act is None or act.fence != fences.get(run_id):
                continue  # ended meanwhile (perhaps claimed again, with a new fence)
            if act.suspending:
                continue  # parking or ending: its own writes say how it went
            # A cancel bumps the fence, and so does a takeover: every write of this
            # activation would be refused, so interrupt it now (the step executing
            # gets CancelledError and records nothing) and free its slot, rather
            # than let a step run on for nothing.
            log.warning(
                "run %s: lease lost (canceled or taken over); interrupting its activation",
                run_id,
            )
            self.inflight.interrupt(run_id)
