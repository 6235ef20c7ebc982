"""What a worker serves: its flows, at the versions it has the code of, and the
outbox channels it delivers. Names are looked up in the registry at each poll, so
a flow or channel registered later is served from then on."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sdk._core._checks import show
from sdk.errors import InvalidArgument
from sdk.model._channels import ChannelDef
from sdk.model._flowdef import FlowDef
from sdk.model._registry import Registry, channel_def_of, flow_def_of, version_order

__all__ = ["Serving", "served_channel", "served_flow"]


def served_flow(f: Callable[..., Any] | str) -> FlowDef | str:
    """A ``flows=`` entry: a name as given, a ``@flow`` function as its definition."""
    if isinstance(f, str):
        return f
    fd = flow_def_of(f)
    if fd is None:
        raise InvalidArgument(f"{show(f)} is not a @flow function")
    return fd


def served_channel(c: Callable[..., Any] | str) -> ChannelDef | str:
    """A ``channels=`` entry: a name as given, a ``@channel`` handler as its definition."""
    if isinstance(c, str):
        return c
    cdef = channel_def_of(c)
    if cdef is None:
        raise InvalidArgument(f"{show(c)} is not a @channel handler")
    return cdef


class Serving:
    """The flows and channels of one worker (see the module).

    Args:
        registry: where names are looked up.
        flows: names (every version registered under one) and definitions (that
            version alone); None: every flow of `registry`.
        channels: names and definitions; None: every channel of `registry`.
        internal: the engine's own channels, served whatever `channels` says.
    """

    def __init__(
        self,
        registry: Registry,
        flows: Sequence[FlowDef | str] | None,
        channels: Sequence[ChannelDef | str] | None,
        internal: dict[str, ChannelDef],
    ) -> None:
        self.registry = registry
        # flows given as functions are served as given (that version); names are
        # looked up in the registry at each poll (every version registered)
        self._given: dict[tuple[str, str | None], FlowDef] = {}
        self._flows: list[str] | None = None
        if flows is not None:
            self._flows = []
            for f in flows:
                if isinstance(f, FlowDef):
                    self._given[f.name, f.version] = f
                self._flows.append(f if isinstance(f, str) else f.name)
        self._pinned = {name for name, _ in self._given}  # names given only as functions
        self._channels = None if channels is None else list(channels)
        self._internal = internal

    def channels(self) -> dict[str, ChannelDef]:
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

    def _names(self) -> list[str]:
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

    def pairs(self) -> list[tuple[str, str | None]]:
        """The (flow, version) pairs this worker runs: a run is claimed only by a
        worker that has the code of the version it started on (version routing)."""
        names = dict.fromkeys(self._names())  # a name given twice: once
        return [(name, v) for name in names for v in self._versions(name)]

    def flow(self, name: str, version: str | None) -> FlowDef | None:
        """The definition of flow `name` at `version` served here, or None."""
        return self._versions(name).get(version)

    def current(self, name: str) -> FlowDef | None:
        """The newest served version of flow `name` (what its schedules start)."""
        versions = self._versions(name)
        return versions[max(versions, key=version_order)] if versions else None
