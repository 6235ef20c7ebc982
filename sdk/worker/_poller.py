"""A worker's pass: one store round trip fires due timers, recovers expired
leases, runs the maintenance pass (run timeouts, retention, repairs) and claims
the ready runs that fit; the claims become activations in flight, and due
schedules' ticks start their runs (`sdk.worker._ticker`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sdk._core._serde import converter as records
from sdk._core._serde import dumps
from sdk._core._types import ErrorInfo, Reason
from sdk.model._queues import claim_limits
from sdk.worker._undeclared import UndeclaredQueues

if TYPE_CHECKING:
    from sdk._core._clock import Clock
    from sdk.model._intercept import Interceptor
    from sdk.store import FailedRun, Store, TickResult
    from sdk.worker._inflight import InFlight
    from sdk.worker._serving import Serving
    from sdk.worker._ticker import Ticker

__all__ = ["Poller"]

log = logging.getLogger("steadyflow.worker")


class Poller:
    """Makes a worker's passes (see the module).

    Args:
        store: the worker's store.
        clock: the worker's clock.
        serving: the flows it serves (and their queues' limits, in its registry).
        inflight: where claimed runs go; how many slots are free.
        ticker: the served flows' schedules.
        interceptors: told of recovered leases.
        owner: the lease owner.
        queues: the queues served (None: all).
        concurrency: the activations in flight at most.
        lease_ttl: how long a claim's lease lasts.
        max_recoveries: lease expiries without progress before a run fails.
    """

    def __init__(
        self,
        store: Store,
        clock: Clock,
        serving: Serving,
        inflight: InFlight,
        ticker: Ticker,
        interceptors: Sequence[Interceptor],
        *,
        owner: str,
        queues: list[str] | None,
        concurrency: int,
        lease_ttl: float,
        max_recoveries: int,
    ) -> None:
        self.store = store
        self.clock = clock
        self.serving = serving
        self.inflight = inflight
        self.ticker = ticker
        self.interceptors = interceptors
        self.owner = owner
        self.queues = queues
        self.concurrency = concurrency
        self.lease_ttl = lease_ttl
        self.max_recoveries = max_recoveries
        self._queue_check = UndeclaredQueues()  # says so once per flow on an undeclared queue
        self._recovery_error = dumps(
            records.unstructure(
                ErrorInfo(
                    "sdk.errors:SteadyflowError",
                    f"the run's lease expired more than {max_recoveries} times without progress",
                    None,
                    Reason.MAX_RECOVERIES_EXCEEDED,
                )
            )
        )
        #: the last pass left a ready run for this worker's own cap (worker_concurrency):
        #: wait for a slot of its own, leaving the wake-up tokens to other workers
        self.capped = False
        #: the last pass took every ready run it could (it had room left over)
        self.drained = False

    async def poll(self) -> tuple[int, float | None]:
        """Fire due timers, recover expired leases and claim what fits: one round trip
        (and, when a served flow's schedule is due, its ticks' runs: see sdk.worker._ticker).

        Returns how many runs were claimed (and tick runs started), and when the
        next timer, lease or schedule is due.
        """
        free = max(self.concurrency - len(self.inflight), 0)
        registry = self.serving.registry
        served = self.serving.pairs()
        self._queue_check.check(
            [fd for name, v in served if (fd := self.serving.flow(name, v)) is not None],
            registry.queues(),
        )
        names = list(dict.fromkeys(name for name, _ in served))
        await self.ticker.ensure(names)  # the @scheduled flows' schedules (once)
        if not served:
            free = 0  # nothing to serve: keep timers and leases, claim nothing
        executing = self.inflight.executing()
        polled_at = self.clock.time()
        claims, tick = await self.store.poll(
            self.owner, self.queues, free, polled_at, self.lease_ttl,
            self.max_recoveries, self._recovery_error, flows=served,
            limits=claim_limits(registry.queues().values(), executing),
        )  # fmt: skip
        self.capped = tick.capped
        # the ready runs this pass could take were all taken: none is left behind
        self.drained = len(claims) < free and not tick.capped
        self._maintained(tick)
        for claim in claims:
            self.inflight.spawn(claim, polled_at)
        started, sched = 0, tick.schedules_due
        if sched is not None and sched <= self.clock.time():
            # their runs are queued (with wake-ups): the next pass claims them
            started, sched = await self.ticker.fire(names)
            self.drained = self.drained and not started  # their runs: the next pass
        due = [t for t in (tick.next_due, sched) if t is not None]
        return len(claims) + started, min(due, default=None)

    def _maintained(self, tick: TickResult) -> None:
        """Tell what the pass's maintenance did; fail the damaged runs it found."""
        if tick.recovered:
            log.warning("recovered %d run(s) whose lease expired", tick.recovered)
            for hook in self.interceptors:
                hook.leases_recovered(tick.recovered)
        for rebuilt in tick.rebuilt:
            log.error(
                "repair pass: %s could not be worked with (%s); deleted and rebuilt "
                "(docs/operations.md#damaged-runs)", rebuilt.key, rebuilt.detail,
            )  # fmt: skip
        if tick.repaired:
            log.warning(
                "repair pass: queued %d run(s) again that no index reached (see their "
                "run.repaired events)", tick.repaired,
            )  # fmt: skip
        for damaged in tick.damaged:
            self.inflight.fail_damaged(damaged)
        for failed in tick.failed:  # by the pass itself: no activation logs them
            _log_failed(failed)


def _log_failed(failed: FailedRun) -> None:
    """One WARNING line for a run the maintenance pass failed (timed out, or its
    lease expired too often), as `sdk.engine._ending` logs a run its activation failed."""
    said = {
        Reason.TIMED_OUT.value: "the run did not finish within its timeout",
        Reason.MAX_RECOVERIES_EXCEEDED.value: "its lease expired too many times without progress",
    }.get(failed.reason, failed.reason)
    log.warning(
        "run %s of flow %s failed: %s (reason %s)",
        failed.run_id, failed.flow or "?", said, failed.reason,
        extra={"run_id": failed.run_id, "flow": failed.flow, "reason": failed.reason},
    )  # fmt: skip
