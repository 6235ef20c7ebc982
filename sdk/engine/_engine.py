"""What every activation of one worker shares: store, clock, owner, hooks, codecs."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import attrs

from sdk._core._clock import Clock
from sdk._core._values import Serializer
from sdk.model._intercept import Interceptor
from sdk.model._registry import Registry
from sdk.store import Store

if TYPE_CHECKING:
    from sdk.client._client import Client

__all__ = ["Engine", "Keeping"]


@attrs.define
class Keeping:
    """The worker keeps the activations it parks (its sticky cache,
    `sdk.worker._sticky`): what the engine's park asks of the store for them."""

    #: seconds a kept run's wake-up waits for this worker before any worker takes it
    delay: float
    #: Routing holds a kept run's wake-up for this worker only while it serves
    #: (`Worker.run`): a worker driven by `run_until_idle` (a test, a script) may be
    #: gone by the next wake-up, and then nobody should wait for it.
    serving: bool = False


@attrs.define
class Engine:
    """What every activation of a worker shares."""

    store: Store
    clock: Clock
    owner: str
    inline_backoff_max: float = 1.0
    interceptors: list[Interceptor] = attrs.field(factory=list)
    serializer: Serializer = attrs.field(factory=Serializer.default)
    registry: Registry = attrs.field(factory=Registry.default)
    #: whether (and how) the worker keeps the activations it parks (`Activation.kept`);
    #: None: it keeps none, every wake-up replays
    keeping: Keeping | None = None
    #: resolved as an activation starts waiting in place for its clock alone
    #: (`Worker.run_until_idle` is looking; None: nobody is)
    holding: asyncio.Future[None] | None = None
    _client: Client | None = None

    def held(self) -> None:
        """An activation now waits for nothing but its clock (`Activation.holding`)."""
        fut = self.holding
        if fut is not None and not fut.done():
            fut.set_result(None)

    def client(self) -> Client:
        """A client on the worker's store, registry and serializer (made once)."""
        if self._client is None:
            from sdk.client._client import Client  # the client is a higher layer than the engine

            self._client = Client(
                self.store, clock=self.clock, registry=self.registry, converter=self.serializer
            )
        return self._client
