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
    from sdk.engine._sticky import StickyCache

__all__ = ["Engine"]


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
    #: the parked activations the worker keeps (`sdk.engine._sticky`); None: replay every wake-up
    sticky: StickyCache | None = None
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
