"""What `@step` records about a step function (`StepSpec`), and its replay policies."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any, Literal

import attrs

from sdk._core._hashing import positional_hasher
from sdk._core._retry import RetryPolicy
from sdk._core._serde import return_type
from sdk._core._values import Serializer

__all__ = ["REPLAY_POLICIES", "ReplayPolicy", "StepSpec"]

ReplayPolicy = Literal["use_recorded_result", "require_human", "reexecute"]
REPLAY_POLICIES = ("use_recorded_result", "require_human", "reexecute")


@attrs.define
class StepSpec:
    """A decorated step's options (and caches of what is derived from its function)."""

    name: str
    retry: RetryPolicy | None
    replay: str
    fn: Callable[..., Any]
    timeout: float | None = None  # seconds an attempt may run before it is cancelled
    _rtype: Any = None
    _rtype_done: bool = False
    _sigs: dict[bool, inspect.Signature] = attrs.field(factory=dict)
    _plain: dict[bool, tuple[str, ...] | None] = attrs.field(factory=dict)
    # (method, number of positional arguments) -> their hasher (`positional_hasher`)
    _hashers: dict[tuple[bool, int], Callable[[tuple[Any, ...]], str | None]] = attrs.field(
        factory=dict
    )

    def request_hash(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        serializer: Serializer,
    ) -> str:
        """The ledger's hash of a call, by parameter name (a bound method: without self)."""
        method = isinstance(fn, types.MethodType)
        sig = self._sigs.get(method)
        if sig is None:
            sig = self._sigs[method] = inspect.signature(fn)
            simple = all(p.kind is p.POSITIONAL_OR_KEYWORD for p in sig.parameters.values())
            self._plain[method] = tuple(sig.parameters) if simple else None
        names = self._plain[method]
        if names is not None and not kwargs and len(args) <= len(names):
            if type(serializer).request_hash is _STOCK_HASH:  # not overridden
                hasher = self._hashers.get((method, len(args)))
                if hasher is None:
                    hasher = positional_hasher(names[: len(args)])
                    self._hashers[method, len(args)] = hasher
                rh = hasher(args)
                if rh is not None:  # plain scalars: the same hash, sooner
                    return rh
            # what Signature.bind gives for positional calls, without its cost
            return serializer.request_hash(args, kwargs, dict(zip(names, args, strict=False)))
        try:
            named: dict[str, Any] | None = dict(sig.bind(*args, **kwargs).arguments)
        except TypeError:  # the call itself will fail; hash what was passed
            named = None
        return serializer.request_hash(args, kwargs, named)

    def return_type(self) -> Any:
        if not self._rtype_done:
            self._rtype = return_type(self.fn)
            self._rtype_done = True
        return self._rtype


_STOCK_HASH = Serializer.request_hash
