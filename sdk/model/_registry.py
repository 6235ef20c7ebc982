"""Registries: the flow definitions and outbox channels a process knows, by name.

`@flow` and `@channel` register in the process's default registry
(`Registry.default()`) unless given another. A `Worker`, `Client` or
`FlowTestEnv` uses the default registry unless it is given its own, so a test
can build an isolated one::

    registry = Registry(checkout, send_email)   # flows and channels, decorated elsewhere
    async with FlowTestEnv(registry=registry) as env:
        ...

A name is an identity in the journal and in every stored run, so registering
a *different* function under a name and version already taken raises
`RegistryConflict`; registering the same definition again (its module
imported again, a reload) replaces the entry.

A name can carry several versions (``@flow(name=..., version=...)`` on
different functions): each run executes on the version it started on (version
routing: docs/changing-flows.md). New runs started by name take the name's
*current* version: the greatest by `version_order` (an unversioned definition
counts as the oldest).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, ClassVar

from sdk._core._limits import short
from sdk.errors import FlowNotFound, RegistryConflict
from sdk.model._channels import ChannelDef
from sdk.model._flowdef import FlowDef
from sdk.model._queues import Queue

__all__ = ["Registry", "channel_def_of", "flow_def_of", "same_function", "version_order"]

_DIGITS = re.compile(r"(\d+)")


def version_order(version: str | None) -> tuple[tuple[int, int | str], ...]:
    """A sort key for flow versions: `None` first, then natural order (runs of
    digits compare as numbers, so ``"v9" < "v10"`` and dates in ISO form sort
    by date)."""
    if version is None:
        return ()
    return tuple(
        (1, int(part)) if part.isdigit() else (0, part) for part in _DIGITS.split(version) if part
    ) or ((0, ""),)


def flow_def_of(obj: Any) -> FlowDef | None:
    """The `FlowDef` behind a decorated flow function, if it is one."""
    fd = getattr(obj, "_self_steadyflow_flow", None)  # set by `flow` on its wrapper
    return fd if isinstance(fd, FlowDef) else None


def channel_def_of(obj: Any) -> ChannelDef | None:
    """The `ChannelDef` behind a `channel` handler, if it is one."""
    cdef = getattr(obj, "__steadyflow_channel__", None)
    return cdef if isinstance(cdef, ChannelDef) else None


def same_function(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    """The same definition: the same object, or one defined at the same place again."""
    if a is b:
        return True
    where = (getattr(a, "__module__", None), getattr(a, "__qualname__", None))
    return where == (getattr(b, "__module__", None), getattr(b, "__qualname__", None))


def _where(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


class Registry:
    """Flow definitions and outbox channels, by name.

    Args:
        definitions: decorated flows (`flow`) and channel handlers (`channel`)
            to add, as with `add`.
    """

    _default: ClassVar[Registry | None] = None

    def __init__(self, *definitions: Callable[..., Any] | Queue) -> None:
        self._flows: dict[str, FlowDef] = {}  # name -> its current version
        self._versions: dict[str, dict[str | None, FlowDef]] = {}  # name -> every version
        self._channels: dict[str, ChannelDef] = {}
        self._queues: dict[str, Queue] = {}
        self.add(*definitions)

    @classmethod
    def default(cls) -> Registry:
        """The process's registry: where `@flow` and `@channel` register by default."""
        if cls._default is None:
            cls._default = cls()
        return cls._default

    def __repr__(self) -> str:
        return f"Registry(flows={sorted(self._flows)}, channels={sorted(self._channels)})"

    def add(self, *definitions: Callable[..., Any] | Queue) -> None:
        """Add decorated flows, channel handlers and `Queue` declarations (already
        registered elsewhere, too).

        Raises:
            TypeError: something that is neither a `flow`, a `channel` handler nor a `Queue`.
            RegistryConflict: a name taken by a different function (or queue declaration).
        """
        for obj in definitions:
            if isinstance(obj, Queue):
                self.add_queue(obj)
                continue
            fd = flow_def_of(obj)
            cdef = channel_def_of(obj) if fd is None else None
            if fd is not None:
                self.add_flow(fd)
            elif cdef is not None:
                self.add_channel(cdef)
            else:
                raise TypeError(f"{short(obj)} is neither a @flow function nor a @channel handler")

    def add_flow(self, fd: FlowDef) -> None:
        """Register a flow definition under its name and version.

        The same definition registered again at its version replaces its entry;
        another function (or the same one: a flow kept under two versions) may
        take the same name at another version.

        Raises:
            RegistryConflict: the name and version are taken by a different function.
        """
        versions = self._versions.setdefault(fd.name, {})
        known = versions.get(fd.version)
        if known is not None and not same_function(known.fn, fd.fn):
            at = "" if fd.version is None else f" at version {fd.version!r}"
            raise RegistryConflict(
                f"flow name {fd.name!r}{at} is already registered by {_where(known.fn)}; "
                f"{_where(fd.fn)} cannot take it (stored runs name their flow and version). "
                "Give one of them another name (@flow(name=...)) or another version "
                "(@flow(version=...))"
            )
        if fd.queue_def is not None:
            self.add_queue(fd.queue_def)
        versions[fd.version] = fd
        self._flows[fd.name] = versions[max(versions, key=version_order)]

    def add_queue(self, queue: Queue) -> None:
        """Declare a queue's limits (workers and clients of this registry use them).

        Raises:
            RegistryConflict: the name is declared with other limits.
        """
        known = self._queues.get(queue.name)
        if known is not None and known != queue:
            raise RegistryConflict(
                f"queue {queue.name!r} is already declared as {known!r}; {queue!r} cannot "
                "replace it (one declaration per queue in a registry)"
            )
        self._queues[queue.name] = queue

    def queues(self) -> dict[str, Queue]:
        """A snapshot of the declared queues, by name."""
        return dict(self._queues)

    def add_channel(self, cdef: ChannelDef) -> None:
        """Register an outbox channel handler under its channel name."""
        known = self._channels.get(cdef.name)
        if known is not None and not same_function(known.handler, cdef.handler):
            raise RegistryConflict(
                f"outbox channel {cdef.name!r} is already handled by {_where(known.handler)}; "
                f"{_where(cdef.handler)} cannot take it over (one handler per channel)"
            )
        self._channels[cdef.name] = cdef

    def flows(self) -> dict[str, FlowDef]:
        """A snapshot of the registered flows, by name: each name's current version
        (`versions` has them all)."""
        return dict(self._flows)

    def find_flow(self, name: str) -> FlowDef | None:
        """The flow registered under `name` (its current version), or None."""
        return self._flows.get(name)

    def find_version(self, name: str, version: str | None) -> FlowDef | None:
        """The flow registered under `name` at exactly `version` (None: the
        unversioned definition), or None."""
        return self._versions.get(name, {}).get(version)

    def versions(self, name: str) -> dict[str | None, FlowDef]:
        """Every registered version of the flow `name` (empty if none), oldest first."""
        known = self._versions.get(name, {})
        return {v: known[v] for v in sorted(known, key=version_order)}

    def flow(self, name: str) -> FlowDef:
        """The flow registered under `name`.

        Raises:
            FlowNotFound: none is.
        """
        fd = self._flows.get(name)
        if fd is None:
            raise FlowNotFound(
                f"no flow named {name!r} is registered; import the module that defines it "
                "(steadyflow worker MODULE ...), or add it to this registry"
            )
        return fd

    def channels(self) -> dict[str, ChannelDef]:
        """A snapshot of the registered outbox channels, by name."""
        return dict(self._channels)
