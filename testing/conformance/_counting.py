"""A store that notes every call the engine makes, then hands it to the store it wraps."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, cast

from sdk.store import Store

__all__ = ["CountingStore"]

#: The protocol's methods (what the engine may call).
METHODS = frozenset(
    name for name, member in vars(Store).items() if callable(member) and not name.startswith("_")
)
#: Those whose first parameter is a run id.
BY_RUN_ID = frozenset(
    name
    for name in METHODS
    if list(inspect.signature(getattr(Store, name)).parameters)[1:2] == ["run_id"]
)


def _run_of(name: str, args: tuple[Any, ...]) -> str | None:
    """The run a call is about: its run id argument, or the `run_id` of its first
    argument (a `NewRun`, an `IntentClaim`); None for calls about no one run."""
    if not args:
        return None
    if name in BY_RUN_ID:
        return str(args[0])
    run_id = getattr(args[0], "run_id", None)
    return run_id if isinstance(run_id, str) else None


class CountingStore:
    """Wraps a store; `calls` lists (method, run id or None) for every protocol call.

    The run id is the call's run id argument, or that of the record it passes
    (`create_run`, `derive_run`, `settle_intent`); None for calls about no one
    run (`claim`, `poll`, `tick`, ...).
    """

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.calls: list[tuple[str, str | None]] = []

    @property
    def store(self) -> Store:
        """This wrapper, typed as the store it stands in for."""
        return cast(Store, self)

    def of(self, run_id: str) -> list[str]:
        """The methods called for `run_id`, in order."""
        return [name for name, rid in self.calls if rid == run_id]

    def named(self, name: str) -> int:
        return sum(1 for called, _ in self.calls if called == name)

    def __getattr__(self, name: str) -> Any:
        member = getattr(self.inner, name)
        if name not in METHODS:
            return member
        return self._counted(name, member)

    def _counted(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def note(args: tuple[Any, ...]) -> None:
            self.calls.append((name, _run_of(name, args)))

        if inspect.iscoroutinefunction(method):

            @functools.wraps(method)
            async def counted_async(*args: Any, **kwargs: Any) -> Any:
                note(args)
                return await method(*args, **kwargs)

            return counted_async

        @functools.wraps(method)
        def counted(*args: Any, **kwargs: Any) -> Any:
            note(args)
            return method(*args, **kwargs)

        return counted
