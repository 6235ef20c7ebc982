"""The worker: claims ready runs, executes activations, keeps leases, fires timers.

A `Worker` is made of parts, each with its own state, that it builds and holds:
what it serves (`sdk.worker._serving`), the activations in flight
(`sdk.worker._inflight`), its passes (`sdk.worker._poller`), its heartbeat
(`sdk.worker._heartbeat`), the schedules' ticker (`sdk.worker._ticker`) and the
outbox dispatcher (`sdk.worker._dispatch`). The worker runs the loops that drive
them: `run` (until `stop`) and `run_until_idle` (tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import cattrs

from sdk._core._checks import check_id, check_int, check_optional_id, check_seconds, show
from sdk._core._clock import Clock, SystemClock
from sdk._core._tasks import cancel_and_wait
from sdk._core._values import Serializer
from sdk.engine._engine import Engine
from sdk.errors import InvalidArgument
from sdk.model._intercept import Interceptor
from sdk.model._registry import Registry
from sdk.store import PartitionsMismatch
from sdk.worker import _quarantine
from sdk.worker._dispatch import Dispatcher
from sdk.worker._family import internal_channels
from sdk.worker._heartbeat import Heartbeat
from sdk.worker._inflight import InFlight
from sdk.worker._poller import Poller
from sdk.worker._serving import Serving, served_channel, served_flow
from sdk.worker._sticky import StickyCache
from sdk.worker._ticker import Ticker

if TYPE_CHECKING:
    from sdk.store import Store

__all__ = ["Worker"]

log = logging.getLogger("steadyflow.worker")

_MAX_IDLE = 5.0  # longest a worker blocks without looking at timers and leases


class Worker:
    """Executes runs. Run as many as you like against one store.

    Args:
        store: the store (see `stores.open_store`).
        flows: the flows to serve (functions, or names in `registry`); default every
            flow of `registry` (looked up at each poll). A worker claims only runs of
            flows it serves, at a version it serves (a run executes on the version
            it started on): others stay queued for a worker that serves them. A
            name serves every version of it in `registry`; a function, only its own.
        concurrency: activations executing at once.
        clock: injected clock (tests pass a `FakeClock`).
        lease_ttl: seconds a claimed run stays owned without a heartbeat.
        queues: queue names to serve; default every queue.
        max_recoveries: lease expiries without progress before a run fails with
            reason ``max_recoveries_exceeded``.
        grace_period: seconds `stop()` lets in-flight activations finish
            (default: `lease_ttl`); the rest are interrupted and handed back.
        inline_backoff_max: a retry backoff, sleep or asyncio timer that ends
            within this many seconds is waited for in the activation, holding
            its slot (for a sleep or timer: when the flow waits for nothing a
            signal, decision or child could end); a longer one parks the run on
            a durable timer. 0: every one parks.
        name: the lease owner's name (default ``host:pid:random``).
        channels: the outbox channels to deliver (names or `channel` handlers);
            default every channel of `registry`. The worker's dispatcher
            delivers their intents, up to `concurrency` at once.
        registry: where flow and channel names are looked up (default:
            `Registry.default()`, where `@flow` and `@channel` register); its
            queues' limits (`Queue`) go with every claim.
        converter: how values become JSON: a `Serializer`, or a cattrs converter
            (wrapped in one); the same as the clients' (default:
            `Serializer.default()`).
        interceptors: hooks around step attempts, waits, sleeps and child starts
            (`sdk.model._intercept.Interceptor`);
            the test kit's crash injection is one.
        sticky_cache: parked runs kept in memory (an LRU; 0: none). A kept run's
            wake-up continues its flow where it waits instead of replaying the
            journal (see docs/operations.md, "Sticky activations").
        sticky_delay: seconds a kept run's wake-up waits for this worker before
            any worker may take it (and replay it).

    Example::

        worker = Worker(open_store("redis://localhost:6379/0"), concurrency=32)
        await worker.run()          # until worker.stop()
    """

    def __init__(
        self,
        store: Store,
        flows: Iterable[Callable[..., Any] | str] | None = None,
        *,
        concurrency: int = 16,
        clock: Clock | None = None,
        lease_ttl: float = 30.0,
        queues: Sequence[str] | None = None,
        max_recoveries: int = 10,
        grace_period: float | None = None,
        inline_backoff_max: float = 1.0,
        name: str | None = None,
        channels: Iterable[Callable[..., Any] | str] | None = None,
        interceptors: Sequence[Interceptor] = (),
        registry: Registry | None = None,
        converter: Serializer | cattrs.Converter | None = None,
        sticky_cache: int = 1000,
        sticky_delay: float = 1.0,
    ) -> None:
        sticky = StickyCache(sticky_cache, sticky_delay)  # checks both
        check_int(concurrency, "Worker: concurrency", range(1, 100_001))
        check_seconds(lease_ttl, "Worker: lease_ttl", positive=True)
        check_int(max_recoveries, "Worker: max_recoveries", range(0, 1_000_001))
        if grace_period is not None:
            check_seconds(grace_period, "Worker: grace_period")
        check_seconds(inline_backoff_max, "Worker: inline_backoff_max")
        check_optional_id(name, "Worker: name")
        if isinstance(queues, str):
            raise InvalidArgument(
                f"Worker: queues must be a list of queue names, got {show(queues)}"
            )
        for q in queues or ():
            check_id(q, "Worker: a queue")
        self.store = store
        self.clock: Clock = clock or SystemClock()
        self.concurrency = concurrency
        self.lease_ttl = float(lease_ttl)
        self.queues = list(queues) if queues else None
        self.max_recoveries = max_recoveries
        self.grace_period = lease_ttl if grace_period is None else grace_period
        self.owner = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.registry = registry if registry is not None else Registry.default()
        served = None if flows is None else [served_flow(f) for f in flows]
        self.engine = Engine(
            store=store,
            clock=self.clock,
            owner=self.owner,
            inline_backoff_max=inline_backoff_max,
            interceptors=list(interceptors),
            serializer=Serializer.of(converter),
            registry=self.registry,
            keeping=sticky.keeping if sticky.size else None,
        )
        #: the activations this worker keeps once parked (None: it keeps none)
        self._sticky = sticky if sticky.size else None
        if self._sticky is not None:
            # A worker dropped with runs still kept (driven by run_until_idle, never
            # stopped): their flows are unwound properly, recording nothing, instead of
            # being closed by the garbage collector outside their run, where a step
            # their cleanup calls would run as a plain function.
            weakref.finalize(self, self._sticky.clear)
        delivered = None if channels is None else [served_channel(c) for c in channels]
        # child flows' ends and cascading cancels: served by every worker
        internal = internal_channels(store, self.clock)
        self._serving = Serving(self.registry, served, delivered, internal)
        self._inflight = InFlight(store, self.clock, self.engine, self._serving.flow, self._sticky)
        self._ticker = Ticker(store, self.clock, self.engine.serializer, self._serving.current)
        self.dispatcher = Dispatcher(
            store, self.clock, self._serving.channels,
            concurrency=concurrency, lease_ttl=self.lease_ttl,
        )  # fmt: skip
        self.dispatcher.interceptors = self.engine.interceptors  # deliveries too
        self._stop = asyncio.Event()
        self._poller = Poller(
            store, self.clock, self._serving, self._inflight, self._ticker,
            self.engine.interceptors, owner=self.owner, queues=self.queues,
            concurrency=concurrency, lease_ttl=self.lease_ttl, max_recoveries=max_recoveries,
        )  # fmt: skip
        self._heartbeat = Heartbeat(
            store, self.clock, self._inflight, self.dispatcher, self._stop,
            owner=self.owner, queues=self.queues, concurrency=concurrency,
            lease_ttl=self.lease_ttl, served=self._serving.pairs,
        )  # fmt: skip

    # -- loops -----------------------------------------------------------------------

    async def run_until_idle(self) -> None:
        """Execute until no run is ready and none is in flight, then return.

        Runs parked on a timer that is not due yet do not count. With a
        `FakeClock`, advance it and call this again: on such a clock (one whose
        time moves only when its owner moves it) an activation that waits in
        place for a short sleep or retry backoff (``inline_backoff_max``), and
        for nothing else, does not count either; on the real clock it does
        (it goes on by itself).
        """
        hb = asyncio.create_task(self._heartbeat.run())
        try:
            while True:
                # Idle only after a pass that started with nothing in flight and
                # claimed nothing: work that ends during a pass's awaits (a run
                # holding the only slot, a run re-queued as it parks, a step
                # recording intents) can leave something ready behind it.
                was_busy = bool(self._inflight.busy()) or bool(self.dispatcher.tasks())
                # both on the wire at once: one round trip's wait, not two
                (claimed, _), (sending, _) = await asyncio.gather(
                    self._poller.poll(), self.dispatcher.poll()
                )
                # A claim that filled every slot may have left more behind: look
                # again now. One that had room took all that was ready: what is
                # ready next comes from work in flight (a run parking, a child it
                # starts, a delivery), so wait for some of it to end first. An
                # activation waiting on a child parks once nothing else of it runs
                # (its task ends), so the child is claimed then, and ends the wait.
                if (claimed and not self._poller.drained) or (
                    sending and not self.dispatcher.drained
                ):
                    continue
                busy = self._inflight.busy() + self.dispatcher.tasks()
                if busy:
                    # ... or until one of them waits for its (fake) clock alone
                    held = self.engine.holding = asyncio.get_running_loop().create_future()
                    try:
                        await asyncio.wait([*busy, held], return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        self.engine.holding = None
                elif not (was_busy or claimed or sending):
                    return
        finally:
            await cancel_and_wait(hb)  # (on 3.11 a cancellation can be lost: see it)

    async def run(self) -> None:
        """Serve until `stop()`: claim, execute, heartbeat, fire timers, recover."""
        self._stop.clear()
        self._heartbeat.begin()
        if self._sticky is not None:
            self._sticky.keeping.serving = True  # kept runs' wake-ups wait for it (sticky_delay)
        await self._heartbeat.register()
        hb = asyncio.create_task(self._heartbeat.run(register=True))
        outbox = asyncio.create_task(self.dispatcher.serve(self._stop))
        log.info("worker %s started (%s)", self.owner, self.store.describe())
        backoff = 0.1
        try:
            while not self._stop.is_set():
                try:
                    # cleared before the poll: a slot freed during it is not missed
                    self._inflight.slot_freed.clear()
                    _, next_due = await self._poller.poll()
                    backoff = 0.1
                except (asyncio.CancelledError, PartitionsMismatch):
                    raise  # (another partition count than the deployment's: no retry mends it)
                except Exception as exc:
                    if _quarantine.unavailable(self.store, exc):
                        log.exception("store unavailable; retrying in %.1fs", backoff)
                    else:  # not an outage: say what it is (damaged data is per run)
                        log.exception(
                            "worker pass failed (%s, not a store outage); retrying in %.1fs",
                            type(exc).__name__, backoff,
                        )  # fmt: skip
                    await self._sleep_or_stop(backoff)
                    backoff = min(backoff * 2, _MAX_IDLE)
                    continue
                # A poll takes every ready run that fits: with slots left, the
                # queue is empty (and its wake-up tokens are gone), so block:
                # until the earliest timer or lease it knows of is due, and at
                # most one lease TTL. A lease taken after this poll expires no
                # sooner than one TTL from now (with the same TTL), so this
                # worker looks again before it can expire, and then wakes when
                # it does: a dead worker's run is recovered within one TTL of
                # its last renewal (not up to _MAX_IDLE later).
                idle = min(_MAX_IDLE, self.lease_ttl)
                timeout = idle
                if next_due is not None:
                    timeout = min(max(next_due - self.clock.time(), 0.001), idle)
                if len(self._inflight) < self.concurrency and not self._poller.capped:
                    await self._wait_ready(timeout)
                else:
                    await self._sleep_or_stop(timeout, self._inflight.slot_freed)
        finally:
            self._stop.set()  # ends the dispatcher's loop too
            with contextlib.suppress(asyncio.CancelledError):
                await outbox
            await cancel_and_wait(hb)
            await asyncio.gather(
                self._inflight.drain(self.grace_period), self.dispatcher.drain(self.grace_period)
            )
            if self._sticky is not None:
                self._sticky.keeping.serving = False
                self._sticky.clear()  # their wake-ups go to any worker after the delay
            with contextlib.suppress(Exception):  # else its registration just expires
                await self.store.forget_worker(self.owner)
            log.info("worker %s stopped", self.owner)
        if self._heartbeat.fatal is not None:
            raise self._heartbeat.fatal  # (the heartbeat found another partition count)

    async def _wait_ready(self, timeout: float) -> None:
        owner = self.owner if self._sticky is not None else None
        waiter = asyncio.create_task(self.store.wait_ready(self.queues, timeout, owner=owner))
        stopper = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (waiter, stopper):
                if not t.done():
                    t.cancel()
            for t in (waiter, stopper):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
        if waiter.done() and not waiter.cancelled() and waiter.exception() is not None:
            # e.g. Redis down, or an ACL without BLPOP: do not spin on it
            log.error("waiting for work failed: %r; retrying in 1s", waiter.exception())
            await self._sleep_or_stop(1.0)

    async def _sleep_or_stop(self, timeout: float, event: asyncio.Event | None = None) -> None:
        waits = [asyncio.create_task(self._stop.wait())]
        if event is not None:
            waits.append(asyncio.create_task(event.wait()))
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in waits:
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await t

    async def stop(self) -> None:
        """Stop claiming; `run()` then lets in-flight work finish (within the grace
        period), hands back what is left, and returns."""
        self._stop.set()
