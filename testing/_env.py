"""`FlowTestEnv`: a store, a client, a worker and a fake clock, in one process."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, Literal

import cattrs

from sdk._core._clock import seconds
from sdk._core._values import Serializer
from sdk.client._client import Client, RunHandle
from sdk.model._intercept import Interceptor
from sdk.model._registry import Registry
from sdk.store import Store
from sdk.worker._worker import Worker
from testing._clock import FakeClock
from testing._crash import CrashPoints
from testing._history import HistoryEntry, Timings, read_history
from testing._stubs import Stubs

__all__ = ["FlowTestEnv"]

_UNSET: Any = object()


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
    `interceptors` go to both too (e.g. ``sdk.otel.OtelInterceptor``), after the
    env's own crash points and timings.

    The worker keeps up to `sticky_cache` parked runs in memory, as a production
    worker does (``Worker(sticky_cache=...)``): a wake-up continues the flow where
    it waits instead of replaying its journal. Pass ``sticky_cache=0`` to replay
    every wake-up (both give the flow the same values; a simulated crash,
    `crash_at`, drops the cache as a dying process would).

    `inline_backoff_max` is the worker's (``Worker(inline_backoff_max=...)``),
    0 by default: every retry backoff and sleep, however short, parks the run
    on a durable timer, so a test sees each one and fires it with `advance`.
    Give the production worker's value (1.0) to test that path: a short sleep
    or backoff is waited for in place (the run stays ``running``, its
    activation is not replayed), `run_until_idle` returns meanwhile, and
    `advance` moves it on. The engine takes the same path on either clock.

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
        interceptors: Sequence[Interceptor] = (),
        sticky_cache: int = 100,
        inline_backoff_max: float = 0.0,
    ) -> None:
        self.clock = clock or FakeClock()
        if not isinstance(inline_backoff_max, (int, float)) or not inline_backoff_max >= 0:
            raise ValueError(
                f"FlowTestEnv(inline_backoff_max=...) is a number of seconds >= 0, "
                f"got {inline_backoff_max!r}"
            )
        self._inline_backoff_max = float(inline_backoff_max)
        self._sticky_cache = sticky_cache
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
        self._check_crashes = True  # leaving with a crash point that never fired raises
        self._timings = Timings(self.clock)
        # the test kit's own first: a crash point stops the activation before a
        # user interceptor (tracing, say) sees the call
        # and the stubs last: a user's interceptor wraps a stub as it would the body
        self._stubs = Stubs()
        self._interceptors: list[Interceptor] = [
            self._crashes, self._timings, *interceptors, self._stubs,
        ]  # fmt: skip
        self._client_interceptors = list(interceptors)
        self._pass: asyncio.Future[None] | None = None  # the run_until_idle under way

    async def __aenter__(self) -> FlowTestEnv:
        if self._store is None:
            from stores import open_store

            self._store = open_store("memory://")
        if not self.clock.started:
            self.clock.start()
            self._started_clock = True
        self._client = Client(
            self._store, clock=self.clock, registry=self.registry, converter=self.serializer,
            interceptors=self._client_interceptors,
        )  # fmt: skip
        # By default every retry backoff and sleep becomes a durable timer, driven by
        # advance(); with inline_backoff_max > 0 the short ones are waited for in
        # place, as a production worker does, until advance() moves the clock.
        self._worker = Worker(
            self._store,
            self._flows,
            clock=self.clock,
            lease_ttl=self._lease_ttl,
            concurrency=self._concurrency,
            inline_backoff_max=self._inline_backoff_max,
            name="flow-test-env",
            channels=self._channels,
            interceptors=self._interceptors,
            registry=self.registry,
            converter=self.serializer,
            sticky_cache=self._sticky_cache,
        )
        sticky = self._worker._sticky
        self._crashes.forget = sticky.clear if sticky is not None else None
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._pass is not None and not self._pass.done():  # left behind by a canceled test
            self._pass.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._pass
        if self._worker is not None and self._worker._sticky is not None:
            self._worker._sticky.clear()  # the kept flows unwind (they record nothing)
        if self._own_store and self._store is not None:
            await self._store.close()
        if self._started_clock:
            self.clock.stop()
        # a crash point that never fired; an error of the test itself goes first
        unfired = self._crashes.unfired()
        if unfired and exc[0] is None and self._check_crashes:
            raise AssertionError(
                f"crash_at: no run of this env reached {', '.join(unfired)}: the crash "
                "never happened (a key the runs never called, an attempt they never "
                "made, or a step replayed from the journal instead of run)"
            )

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
        if under_way or self.worker._inflight:  # (activations waiting in place count)
            # The worker stays alive through the jump, so its leases do: they are
            # renewed up to the new time before the clock moves (and wakes anything).
            await self.worker._heartbeat.renew(self.clock.time() + seconds(delta, "advance"))
        self.clock.advance(delta)
        if under_way:
            await self.worker._poller.poll()
        await self.run_until_idle()

    def crash_at(
        self,
        step_key: str,
        when: Literal["before", "after"] = "after",
        *,
        attempt: int | None = None,
    ) -> None:
        """Simulate the worker process dying at `step_key`, once.

        ``"before"``: before the step's body runs; ``"after"``: after it ran
        but before its outcome was recorded, whether it returned or raised (so
        it will run again, with the same `current_step().idempotency_key`; a
        failed attempt cut off this way does not count against the retry
        policy). `attempt`: crash at that attempt of the step only (1 for the
        first); by default at the first attempt the runs reach. The key of a
        wait or a sleep (``"~wait:approval#1"``, ``"~sleep#1"``) takes both:
        ``"before"``, the flow reached it and nothing of it is written;
        ``"after"``, its outcome is recorded and the flow was not given it. A
        child start's key takes ``"before"``. The run's lease is left to
        expire: `advance` past the lease TTL and the run recovers.

        The crash is the same every time: writes the activation already sent
        complete, every other step of it (a sibling in a ``gather``) stops
        before its result is recorded, and `run_until_idle` returns only once
        all of that has settled.

        A crash that never fires is an error: leaving the env (``async with``)
        raises `AssertionError` naming each point no run reached, unless the
        test already raised.
        """
        self._crashes.add(step_key, when, attempt)

    def stub(
        self,
        step: Callable[..., Any] | str,
        *,
        returns: Any = _UNSET,
        raises: BaseException | type[BaseException] | None = None,
        side_effect: Callable[..., Any] | None = None,
    ) -> None:
        """Replace a step's body, for the runs of this env only.

        Give exactly one of: `returns` (the value every call returns),
        `raises` (an exception, or its class, every call raises) or
        `side_effect` (a function, sync or ``async``, called with the step's
        arguments instead of its body; what it returns or raises is the
        step's outcome). Everything else is as for the real body: the journal
        records the stub's result (so a replay does not call it again), a
        raising stub is retried under the step's retry policy, and a
        ``@step(timeout=...)`` applies to an ``async`` side effect. Other envs
        and the function itself are untouched. A later `stub` of the same step
        replaces the earlier one. A step called from inside another step is a
        plain call, and runs its own body.

        Args:
            step: the ``@step`` function, or its step name.

        Example::

            env.stub(charge, returns="ch_test_1")
            env.stub(notify, raises=ConnectionError("smtp down"))
            env.stub(quote, side_effect=lambda sku, qty: 100 * qty)
        """
        given = (returns is not _UNSET) + (raises is not None) + (side_effect is not None)
        if given != 1:
            raise TypeError("stub() takes exactly one of returns=, raises=, side_effect=")
        name = _step_name(step)
        if side_effect is not None:
            if not callable(side_effect):
                raise TypeError(f"stub({name!r}): side_effect must be callable")
            self._stubs.bodies[name] = side_effect
        elif raises is not None:
            if not (isinstance(raises, BaseException) or (
                isinstance(raises, type) and issubclass(raises, BaseException)
            )):  # fmt: skip
                raise TypeError(f"stub({name!r}): raises must be an exception or its class")
            self._stubs.bodies[name] = functools.partial(_raise, raises)
        else:
            self._stubs.bodies[name] = functools.partial(_return, returns)

    async def history(self, run_id: str) -> list[HistoryEntry]:
        """The run's steps, waits, sleeps and child starts, in the order the flow made them.

        Each is a `testing.HistoryEntry` (key, kind, state, attempts, result or
        error, start and end on this env's clock, duration): compare them, or
        the whole list, with ``==``. Raises `sdk.errors.RunNotFound`.

        Example::

            assert await env.history(handle.run_id) == [
                HistoryEntry("charge#1", "step", "ok", attempts=1, result="ch_1",
                             started_at=T0, ended_at=T0, duration=timedelta(0)),
            ]
        """
        return await read_history(self.store, run_id, self._timings)


def _step_name(step: Callable[..., Any] | str) -> str:
    if isinstance(step, str):
        return step
    spec = getattr(step, "__steadyflow_step__", None)
    if spec is None:
        raise TypeError(f"stub(): {step!r} is not a @step function (or a step name)")
    return str(spec.name)


async def _return(value: Any, *args: Any, **kwargs: Any) -> Any:
    return value


async def _raise(exc: BaseException | type[BaseException], *args: Any, **kwargs: Any) -> Any:
    raise exc
