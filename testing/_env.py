"""`FlowTestEnv`: a store, a client, a worker and a fake clock, in one process."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal

import cattrs

from sdk._client import Client, RunHandle
from sdk._clock import seconds
from sdk._registry import Registry
from sdk._values import Serializer
from sdk._worker import Worker
from stores.protocol import Store
from testing._clock import FakeClock
from testing._crash import CrashPoints

__all__ = ["FlowTestEnv"]


class FlowTestEnv:
    """Run flows in a test: memory store, fake clock, in-process worker.

    The worker also delivers outbox intents (`sdk.emit`) to `channels` (default:
    every `sdk.channel` handler of the registry); `run_until_idle` and
    `advance` deliver what is due, failed deliveries retry on `advance`.

    Every env has its own store (a fresh ``memory://`` unless one is given), so
    two envs in one process never see each other's runs. Flows and channels
    are looked up in `registry` (default: `sdk.Registry.default()`, where
    ``@flow`` and ``@channel`` register); give an env a `Registry` of its own to
    isolate a test from the other definitions of the process. `converter` is
    the `sdk.Serializer` (or cattrs converter) of the env's client and worker.

    Example::

        async with FlowTestEnv() as env:
            handle = await env.start(onboard, "ada")
            await env.run_until_idle()           # runs until the 1-day sleep
            await env.advance(timedelta(days=1)) # fires it, runs to the end
            assert await handle.result() is None

    A step that is still running keeps `run_until_idle` waiting (the env cannot
    tell a hung step from a slow one). To drive a step's ``@step(timeout=...)``
    or a ``@flow(timeout=...)`` past such a step, run `run_until_idle` as a
    task and call `advance` meanwhile: it moves the clock (which fires the
    step's deadline at once), fires the store's due timers and run timeouts,
    and then joins the pass under way::

        busy = asyncio.create_task(env.run_until_idle())
        await entered.wait()            # the step is running
        await env.advance(30)           # past its timeout: cancelled, retried
        await busy
    """

    def __init__(
        self,
        clock: FakeClock | None = None,
        store: Store | None = None,
        *,
        lease_ttl: float = 30.0,
        concurrency: int = 16,
        flows: list[Callable[..., Any] | str] | None = None,
        channels: list[Callable[..., Any] | str] | None = None,
        registry: Registry | None = None,
        converter: Serializer | cattrs.Converter | None = None,
    ) -> None:
        self.clock = clock or FakeClock()
        self.registry = registry
        self.serializer = Serializer.of(converter)
        self._own_store = store is None
        self._store = store
        self._lease_ttl = lease_ttl
        self._concurrency = concurrency
        self._flows = flows
        self._channels = channels
        self._started_clock = False
        self._client: Client | None = None
        self._worker: Worker | None = None
        self._crashes = CrashPoints()
        self._pass: asyncio.Future[None] | None = None  # the run_until_idle under way

    async def __aenter__(self) -> FlowTestEnv:
        if self._store is None:
            from stores import open_store

            self._store = open_store("memory://")
        if not self.clock.started:
            self.clock.start()
            self._started_clock = True
        self._client = Client(
            self._store, clock=self.clock, registry=self.registry, converter=self.serializer
        )
        # Every retry backoff becomes a durable timer, driven by advance().
        self._worker = Worker(
            self._store,
            self._flows,
            clock=self.clock,
            lease_ttl=self._lease_ttl,
            concurrency=self._concurrency,
            inline_backoff_max=0.0,
            name="flow-test-env",
            channels=self._channels,
            interceptors=[self._crashes],
            registry=self.registry,
            converter=self.serializer,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._pass is not None and not self._pass.done():  # left behind by a canceled test
            self._pass.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._pass
        if self._own_store and self._store is not None:
            await self._store.close()
        if self._started_clock:
            self.clock.stop()

    @property
    def store(self) -> Store:
        assert self._store is not None, "use FlowTestEnv as `async with FlowTestEnv() as env`"
        return self._store

    @property
    def client(self) -> Client:
        assert self._client is not None, "use FlowTestEnv as `async with FlowTestEnv() as env`"
        return self._client

    @property
    def worker(self) -> Worker:
        assert self._worker is not None, "use FlowTestEnv as `async with FlowTestEnv() as env`"
        return self._worker

    async def start(self, flow: Callable[..., Any] | str, *args: Any, **kwargs: Any) -> RunHandle:
        """`Client.start` on this env's client."""
        return await self.client.start(flow, *args, **kwargs)

    async def run_until_idle(self) -> None:
        """Execute until nothing is ready (timers not yet due wait for `advance`).

        Called while another call is under way (a task waiting on a running
        step), it joins that one instead of starting a second pass.
        """
        if self._pass is None or self._pass.done():
            self._pass = asyncio.ensure_future(self.worker.run_until_idle())
        await asyncio.shield(self._pass)

    async def advance(self, delta: float | timedelta) -> None:
        """Move the fake clock, fire due timers, timeouts and lease expiries, run until idle.

        Moving the clock fires the deadlines of running step attempts
        (``@step(timeout=...)``) at once. While a `run_until_idle` is under way,
        this also makes the worker renew its leases (it stayed alive through
        the jump; its renewal also hands a cancel request to the activation of
        its run) and fire the store's due timers, run timeouts and cancel grace
        deadlines now (the pass may be waiting on a running step), then joins it.
        """
        under_way = self._pass is not None and not self._pass.done()
        if under_way:
            # The worker stays alive through the jump, so its leases do: they are
            # renewed up to the new time before the clock moves (and wakes anything).
            await self.worker._renew_leases(self.clock.time() + seconds(delta, "advance"))
        self.clock.advance(delta)
        if under_way:
            await self.worker._poll()
        await self.run_until_idle()

    def crash_at(self, step_key: str, when: Literal["before", "after"] = "after") -> None:
        """Simulate the worker process dying at `step_key`, once.

        ``"before"``: before the step's body runs; ``"after"``: after it ran
        but before its result was recorded (so it will run again, with the
        same `current_step().idempotency_key`). The run's lease is left to
        expire: `advance` past the lease TTL and the run recovers.

        The crash is the same every time: writes the activation already sent
        complete, every other step of it (a sibling in a ``gather``) stops
        before its result is recorded, and `run_until_idle` returns only once
        all of that has settled.
        """
        self._crashes.add(step_key, when)
