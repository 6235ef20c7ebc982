"""The worker: claims ready runs, executes activations, keeps leases, fires timers."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import uuid
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import cattrs

from sdk._core._checks import check_id, check_int, check_optional_id, check_seconds
from sdk._core._clock import Clock, SystemClock, moves_by_itself
from sdk._core._serde import converter as records
from sdk._core._serde import dumps
from sdk._core._tasks import cancel_and_wait
from sdk._core._types import ErrorInfo, Reason
from sdk._core._values import Serializer
from sdk.engine._activation import Activation
from sdk.engine._engine import Engine
from sdk.engine._sticky import StickyCache
from sdk.engine._sticky import reload as sticky_reload
from sdk.errors import InvalidArgument
from sdk.model._channels import ChannelDef
from sdk.model._flowdef import FlowDef
from sdk.model._intercept import Interceptor
from sdk.model._queues import claim_limits
from sdk.model._registry import Registry, channel_def_of, flow_def_of, version_order
from sdk.store import CorruptData, Damaged, FailedRun, PartitionsMismatch
from sdk.worker import _quarantine
from sdk.worker._dispatch import Dispatcher
from sdk.worker._family import internal_channels
from sdk.worker._heartbeat import Heartbeat
from sdk.worker._ticker import Ticker
from sdk.worker._undeclared import UndeclaredQueues

if TYPE_CHECKING:
    from sdk.store import Claim, Store

__all__ = ["Worker"]

log = logging.getLogger("steadyflow.worker")

_MAX_IDLE = 5.0  # longest a worker blocks without looking at timers and leases


class Worker(Heartbeat):
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
                f"Worker: queues must be a list of queue names, got {queues!r:.80}"
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
        # flows given as functions are served as given (that version); names are
        # looked up in the registry at each poll (every version registered)
        self._given: dict[tuple[str, str | None], FlowDef] = {}
        self._flows = None if flows is None else [self._resolve(f) for f in flows]
        self._pinned = {name for name, _ in self._given}  # names given only as functions
        self.engine = Engine(
            store=store,
            clock=self.clock,
            owner=self.owner,
            inline_backoff_max=inline_backoff_max,
            interceptors=list(interceptors),
            serializer=Serializer.of(converter),
            registry=self.registry,
            sticky=sticky if sticky.size else None,
        )
        if self.engine.sticky is not None:
            # A worker dropped with runs still kept (driven by run_until_idle, never
            # stopped): their flows are unwound properly, recording nothing, instead of
            # being closed by the garbage collector outside their run, where a step
            # their cleanup calls would run as a plain function.
            weakref.finalize(self, self.engine.sticky.clear)
        self._inflight: dict[str, tuple[asyncio.Task[None], Activation]] = {}
        # the queue of each run executing here: its Queue(worker_concurrency=) room
        self._queue_of: dict[str, str] = {}
        # the last poll left a ready run for this worker's own cap (worker_concurrency):
        # wait for a slot of its own, leaving the wake-up tokens to other workers
        self._capped = False
        # the last poll took every ready run it could (it had room left over)
        self._drained = False
        # runs whose activation was interrupted because the heartbeat found the
        # lease lost (canceled, or taken over): nothing to hand back for them
        self._lost: set[str] = set()
        self._queue_check = UndeclaredQueues()  # says so once per flow on an undeclared queue
        self._channels = None if channels is None else [self._resolve_channel(c) for c in channels]
        # child flows' ends and cascading cancels: served by every worker
        self._internal = internal_channels(store, self.clock)
        self._ticker = Ticker(store, self.clock, self.engine.serializer, self._current)  # schedules
        self.dispatcher = Dispatcher(
            store, self.clock, self._served_channels,
            concurrency=concurrency, lease_ttl=self.lease_ttl,
        )  # fmt: skip
        self.dispatcher.interceptors = self.engine.interceptors  # deliveries too
        self._stop = asyncio.Event()
        self._started_at = self.clock.time()
        self._slot_freed = asyncio.Event()
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

    def _resolve(self, f: Callable[..., Any] | str) -> str:
        if isinstance(f, str):
            return f
        fd = flow_def_of(f)
        if fd is None:
            raise InvalidArgument(f"{f!r} is not a @flow function")
        self._given[fd.name, fd.version] = fd
        return fd.name

    @staticmethod
    def _resolve_channel(c: Callable[..., Any] | str) -> ChannelDef | str:
        if isinstance(c, str):
            return c
        cdef = channel_def_of(c)
        if cdef is None:
            raise InvalidArgument(f"{c!r} is not a @channel handler")
        return cdef

    def _served_channels(self) -> dict[str, ChannelDef]:
        """Channels whose intents this worker delivers (names resolved at each poll)."""
        registered = self.registry.channels()
        out = dict(self._internal)
        if self._channels is None:
            return {**registered, **out}
        for c in self._channels:
            if isinstance(c, ChannelDef):
                out[c.name] = c
            elif c in registered:
                out[c] = registered[c]
        return out

    def _served_names(self) -> list[str]:
        """Flow names this worker runs; runs of other flows stay queued for others."""
        if self._flows is not None:
            return self._flows
        return list(self.registry.flows())

    def _versions(self, name: str) -> dict[str | None, FlowDef]:
        """The versions of flow `name` served here: those given as functions, or
        (a name) every version registered."""
        if name in self._pinned:
            return {v: fd for (n, v), fd in self._given.items() if n == name}
        if self._flows is not None and name not in self._flows:
            return {}
        return self.registry.versions(name)

    def _served(self) -> list[tuple[str, str | None]]:
        """The (flow, version) pairs this worker runs: a run is claimed only by a
        worker that has the code of the version it started on (version routing)."""
        names = dict.fromkeys(self._served_names())  # a name given twice: once
        return [(name, v) for name in names for v in self._versions(name)]

    def _flow(self, name: str, version: str | None) -> FlowDef | None:
        """The definition of flow `name` at `version` served here, or None."""
        return self._versions(name).get(version)

    def _current(self, name: str) -> FlowDef | None:
        """The newest served version of flow `name` (what its schedules start)."""
        versions = self._versions(name)
        return versions[max(versions, key=version_order)] if versions else None

    # -- one pass ------------------------------------------------------------------

    async def _poll(self) -> tuple[int, float | None]:
        """Fire due timers, recover expired leases and claim what fits: one round trip
        (and, when a served flow's schedule is due, its ticks' runs: see sdk.worker._ticker).

        Returns how many runs were claimed (and tick runs started), and when the
        next timer, lease or schedule is due.
        """
        free = max(self.concurrency - len(self._inflight), 0)
        served = self._served()
        self._queue_check.check(
            [fd for name, v in served if (fd := self._flow(name, v)) is not None],
            self.registry.queues(),
        )
        names = list(dict.fromkeys(name for name, _ in served))
        await self._ticker.ensure(names)  # the @scheduled flows' schedules (once)
        if not served:
            free = 0  # nothing to serve: keep timers and leases, claim nothing
        executing: dict[str, int] = {}
        for q in self._queue_of.values():
            executing[q] = executing.get(q, 0) + 1
        polled_at = self.clock.time()
        claims, tick = await self.store.poll(
            self.owner, self.queues, free, polled_at, self.lease_ttl,
            self.max_recoveries, self._recovery_error, flows=served,
            limits=claim_limits(self.registry.queues().values(), executing),
        )  # fmt: skip
        self._capped = tick.capped
        # the ready runs this pass could take were all taken: none is left behind
        self._drained = len(claims) < free and not tick.capped
        if tick.recovered:
            log.warning("recovered %d run(s) whose lease expired", tick.recovered)
            for hook in self.engine.interceptors:
                hook.leases_recovered(tick.recovered)
        if tick.repaired:
            log.warning(
                "repair pass: queued %d run(s) again that no index reached (see their "
                "run.repaired events)", tick.repaired,
            )  # fmt: skip
        for damaged in tick.damaged:
            self._fail_damaged(damaged)
        for failed in tick.failed:  # by the pass itself: no activation logs them
            _log_failed(failed)
        for claim in claims:
            self._spawn(claim, polled_at)
        started, sched = 0, tick.schedules_due
        if sched is not None and sched <= self.clock.time():
            # their runs are queued (with wake-ups): the next pass claims them
            started, sched = await self._ticker.fire(names)
            self._drained = self._drained and not started  # their runs: the next pass
        due = [t for t in (tick.next_due, sched) if t is not None]
        return len(claims) + started, min(due, default=None)

    def _spawn(self, claim: Claim, polled_at: float) -> None:
        run_id = claim.run.run_id
        if claim.damage is not None:
            self._fail_damaged(claim.damage)
            return
        fd = self._flow(claim.run.flow, claim.run.flow_version)
        sticky = self.engine.sticky
        kept = None if sticky is None or fd is None else sticky.claimed(claim, fd)
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
                self._fail_damaged(Damaged(run_id, bad.key, bad.detail, claim.run.fence))
                return
            act = Activation(
                self.engine, claim.run, journal, fd, claim.mail, claim.lineage,
                claimed_at=polled_at,
            )  # fmt: skip
            task = asyncio.create_task(self._execute(act))
        self._lost.discard(run_id)  # a new activation: whatever befell an earlier one
        self._inflight[run_id] = (task, act)  # type: ignore[assignment]
        self._queue_of[run_id] = claim.run.queue
        task.add_done_callback(functools.partial(self._done, run_id))

    def _fail_damaged(self, damaged: Damaged) -> None:
        """Fail a run whose stored data cannot be read, alone (`sdk.worker._quarantine`)."""
        if damaged.run_id in self._inflight:
            return  # its activation here reports it at its next write
        task = asyncio.create_task(_quarantine.fail(self.store, self.clock, damaged))
        self._inflight[damaged.run_id] = (task, None)  # type: ignore[assignment]
        task.add_done_callback(functools.partial(self._done, damaged.run_id))

    def _done(self, run_id: str, task: asyncio.Task[None]) -> None:
        # Only if it is still the run's current task: a run re-queued as its
        # activation ends (continue_as_new, a wake-up that was already there) can
        # be claimed again before that activation's task is done, and the new
        # activation must stay tracked (its lease renewed, its slot counted).
        entry = self._inflight.get(run_id)
        if entry is not None and entry[0] is task:
            del self._inflight[run_id]
            self._queue_of.pop(run_id, None)
            self._lost.discard(run_id)
        self._slot_freed.set()

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
        entry = self._inflight.get(claim.run.run_id)
        if entry is None or entry[0] is not asyncio.current_task():
            return  # stopped meanwhile
        self._spawn(full, polled_at)  # tracked under its new task from here

    async def _execute(self, act: Activation, resumed: tuple[Claim, float] | None = None) -> None:
        try:
            if resumed is None:
                await act.execute()
            else:
                claim, polled_at = resumed
                await act.proceed(claim.run, claim.mail, polled_at)
        except asyncio.CancelledError:
            if act.run_id in self._lost:  # by the heartbeat: the run is no longer ours
                raise
            # Interrupted by stop(): hand the run back so another worker continues it.
            with contextlib.suppress(Exception):
                await asyncio.shield(act.release_on_cancel())
            raise
        except Exception:
            log.exception(
                "run %s: activation failed inside the engine; its lease will expire "
                "and another activation will retry it", act.run_id,
            )  # fmt: skip
        error = act.store_error
        if isinstance(error, CorruptData):  # a write found the run's data damaged
            await _quarantine.fail(
                self.store, self.clock, Damaged(act.run_id, error.key, error.detail, act.fence)
            )

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
        hb = asyncio.create_task(self._heartbeat())
        try:
            while True:
                # Idle only after a pass that started with nothing in flight and
                # claimed nothing: work that ends during a pass's awaits (a run
                # holding the only slot, a run re-queued as it parks, a step
                # recording intents) can leave something ready behind it.
                was_busy = bool(self._busy()) or bool(self.dispatcher.tasks())
                # both on the wire at once: one round trip's wait, not two
                (claimed, _), (sending, _) = await asyncio.gather(
                    self._poll(), self.dispatcher.poll()
                )
                # A claim that filled every slot may have left more behind: look
                # again now. One that had room took all that was ready: what is
                # ready next comes from work in flight (a run parking, a child it
                # starts, a delivery), so wait for some of it to end first. An
                # activation waiting on a child parks once nothing else of it runs
                # (its task ends), so the child is claimed then, and ends the wait.
                if (claimed and not self._drained) or (sending and not self.dispatcher.drained):
                    continue
                busy = self._busy() + self.dispatcher.tasks()
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

    def _busy(self) -> list[asyncio.Task[None]]:
        """The activations in flight that go on without the clock's owner moving it."""
        if moves_by_itself(self.clock):
            return [t for t, _ in self._inflight.values()]
        return [t for t, act in self._inflight.values() if act is None or not act.holding]

    async def run(self) -> None:
        """Serve until `stop()`: claim, execute, heartbeat, fire timers, recover."""
        self._stop.clear()
        self._fatal = None
        self._started_at = self.clock.time()
        if self.engine.sticky is not None:
            self.engine.sticky.serving = True  # kept runs' wake-ups wait for it (sticky_delay)
        await self._register()
        hb = asyncio.create_task(self._heartbeat(register=True))
        outbox = asyncio.create_task(self.dispatcher.serve(self._stop))
        log.info("worker %s started (%s)", self.owner, self.store.describe())
        backoff = 0.1
        try:
            while not self._stop.is_set():
                try:
                    # cleared before the poll: a slot freed during it is not missed
                    self._slot_freed.clear()
                    _, next_due = await self._poll()
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
                if len(self._inflight) < self.concurrency and not self._capped:
                    await self._wait_ready(timeout)
                else:
                    await self._sleep_or_stop(timeout, self._slot_freed)
        finally:
            self._stop.set()  # ends the dispatcher's loop too
            with contextlib.suppress(asyncio.CancelledError):
                await outbox
            await cancel_and_wait(hb)
            await asyncio.gather(self._drain(), self.dispatcher.drain(self.grace_period))
            if self.engine.sticky is not None:
                self.engine.sticky.serving = False
                self.engine.sticky.clear()  # their wake-ups go to any worker after the delay
            with contextlib.suppress(Exception):  # else its registration just expires
                await self.store.forget_worker(self.owner)
            log.info("worker %s stopped", self.owner)
        if self._fatal is not None:
            raise self._fatal  # (the heartbeat found another partition count)

    async def _wait_ready(self, timeout: float) -> None:
        owner = self.owner if self.engine.sticky is not None else None
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

    async def _drain(self) -> None:
        tasks = [t for t, _ in self._inflight.values()]
        if not tasks:
            return
        log.info("waiting up to %.1fs for %d activation(s)", self.grace_period, len(tasks))
        _, late = await asyncio.wait(tasks, timeout=self.grace_period)
        for t in late:
            t.cancel()
        if late:
            await asyncio.wait(late)
            log.warning("handed %d unfinished run(s) back to the queue", len(late))

    async def stop(self) -> None:
        """Stop claiming; `run()` then lets in-flight work finish (within the grace
        period), hands back what is left, and returns."""
        self._stop.set()


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
