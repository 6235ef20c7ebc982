"""Flow definitions: `@flow`, and what it records about a flow function (`FlowDef`)."""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar, overload

import attrs
import wrapt

from sdk._checks import check_id, check_optional_id, check_timeout
from sdk._queues import Queue
from sdk._registry import Registry
from sdk._retry import RetryPolicy
from sdk._serde import dumps, loads, return_type
from sdk._values import Serializer
from sdk.errors import InvalidArgument

__all__ = ["RESERVED_OPTIONS", "RESULT_GRACE", "FlowDef", "flow"]

P = ParamSpec("P")
R = TypeVar("R")

#: Keyword names `Client.start` (and `start_child`: ``parent_close``) take for
#: themselves; a flow parameter may not use them.
RESERVED_OPTIONS = frozenset(
    {"run_id", "priority", "queue", "tenant_id", "options", "parent_close",
     "concurrency_key", "start_at", "start_in"}
)  # fmt: skip

#: Seconds a run deleted on success (``@flow(delete_on_success=True)``) keeps a
#: tombstone (its record without arguments) and its done notice, so that
#: `RunHandle.result()` still returns its result; measured on the worker's clock.
RESULT_GRACE = 300.0


@attrs.define(eq=False)
class FlowDef:
    """A registered flow."""

    name: str
    fn: Callable[..., Coroutine[Any, Any, Any]]
    version: str | None
    retry: RetryPolicy | None
    queue: str
    signature: inspect.Signature
    optional_checkpoints: bool = False
    delete_on_success: bool = False
    retention: float | None = None  # seconds a completed or canceled run is kept
    on_event: str | None = None  # each event of this name starts a run (Client.send_event)
    timeout: float | None = None  # seconds from a run's start until it fails timed_out
    queue_def: Queue | None = None  # @flow(queue=Queue(...)): registered with the flow
    _hints: dict[str, Any] | None = None
    _rtype: Any = attrs.field(default=None)
    _rtype_done: bool = False

    def param_types(self) -> dict[str, Any]:
        if self._hints is None:
            import typing

            try:
                self._hints = typing.get_type_hints(self.fn)
            except Exception:
                self._hints = {}
        return self._hints

    def _annotation(self, index: int | None, name: str | None) -> tuple[str, Any]:
        """(parameter name, annotation) for a positional index or a keyword name."""
        params = list(self.signature.parameters.values())
        hints = self.param_types()
        found: inspect.Parameter | None = None
        if index is not None:
            positional = [
                p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
            if index < len(positional):
                found = positional[index]
            else:
                found = next((p for p in params if p.kind is p.VAR_POSITIONAL), None)
        else:
            found = self.signature.parameters.get(name or "")
            if found is None or found.kind is found.VAR_POSITIONAL:
                found = next((p for p in params if p.kind is p.VAR_KEYWORD), None)
        if found is None:
            return str(index if name is None else name), None
        return found.name, hints.get(found.name)

    def encode_args(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], serializer: Serializer
    ) -> str:
        """JSON text of a call's arguments; `TypeError` if they do not fit the signature."""
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidArgument(f"flow {self.name!r}: {exc}") from None
        return encode_call(self.name, args, kwargs, serializer, self._annotation)

    def call_identity(self, args_json: str) -> str:
        """What makes two starts the same call: arguments by parameter name.

        ``start(f, 1, b=2)`` and ``start(f, a=1, b=2)`` are the same call;
        keyword order does not matter. Defaults are not filled in.
        """
        raw = loads(args_json)
        named: dict[str, Any] = {}
        extra = []
        for i, data in enumerate(raw.get("args", [])):
            pname, _ = self._annotation(i, None)
            param = self.signature.parameters.get(pname)
            if param is not None and param.kind is param.POSITIONAL_OR_KEYWORD:
                named[pname] = data
            else:
                extra.append(data)
        named.update(raw.get("kwargs", {}))
        return json.dumps(
            {"args": extra, "kwargs": named, "types": raw.get("types", {})},
            sort_keys=True, separators=(",", ":"), ensure_ascii=False,
        )  # fmt: skip

    def decode_args(self, text: str, serializer: Serializer) -> tuple[list[Any], dict[str, Any]]:
        """Rebuild the arguments `encode_args` stored."""
        raw = loads(text)
        types = raw.get("types", {})
        args = []
        for i, data in enumerate(raw.get("args", [])):
            pname, ann = self._annotation(i, None)
            what = f"flow {self.name!r} argument {pname!r}"
            args.append(serializer.decode(data, ann, types.get(str(i)), what))
        kwargs = {}
        for key, data in raw.get("kwargs", {}).items():
            _, ann = self._annotation(None, key)
            what = f"flow {self.name!r} argument {key!r}"
            kwargs[key] = serializer.decode(data, ann, types.get(key), what)
        return args, kwargs

    def return_type(self) -> Any:
        if not self._rtype_done:
            self._rtype = return_type(self.fn)
            self._rtype_done = True
        return self._rtype


def encode_call(
    flow: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    serializer: Serializer,
    annotation: Callable[[int | None, str | None], tuple[str, Any]],
) -> str:
    """JSON text of a call of `flow`: each value as its annotation says (a value with
    none keeps its recorded type path), all of them within the size limit together.
    `annotation` gives (parameter name, annotation) for a positional index or a
    keyword name."""
    types: dict[str, str] = {}
    enc_args = []
    for i, value in enumerate(args):
        pname, ann = annotation(i, None)
        data, tpath = serializer.encode(value, ann, f"flow {flow!r} argument {pname!r}")
        enc_args.append(data)
        if tpath:
            types[str(i)] = tpath
    enc_kwargs = {}
    for key, value in kwargs.items():
        _, ann = annotation(None, key)
        data, tpath = serializer.encode(value, ann, f"flow {flow!r} argument {key!r}")
        enc_kwargs[key] = data
        if tpath:
            types[key] = tpath
    text = dumps({"args": enc_args, "kwargs": enc_kwargs, "types": types})
    serializer.check_size(text, f"arguments of flow {flow!r}")  # all of them together
    return text


def _retention(fname: str, value: float | timedelta | None) -> float | None:
    if value is None:
        return None
    secs = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(secs, bool) or not isinstance(secs, (int, float)):
        raise InvalidArgument(
            f"flow {fname!r}: retention must be seconds or a timedelta, got {value!r}"
        )
    if not math.isfinite(secs) or secs < 0:
        raise InvalidArgument(f"flow {fname!r}: retention must be >= 0 seconds, got {value!r}")
    return float(secs)


@overload
def flow(fn: Callable[P, Coroutine[Any, Any, R]], /) -> Callable[P, Coroutine[Any, Any, R]]: ...
@overload
def flow(
    *,
    name: str | None = None,
    version: str | None = None,
    retry: RetryPolicy | None = None,
    queue: str | Queue = "default",
    optional_checkpoints: bool = False,
    delete_on_success: bool = False,
    retention: float | timedelta | None = None,
    registry: Registry | None = None,
    on_event: str | None = None,
    timeout: float | timedelta | None = None,
) -> Callable[[Callable[P, Coroutine[Any, Any, R]]], Callable[P, Coroutine[Any, Any, R]]]: ...


def flow(
    fn: Any = None,
    /,
    *,
    name: str | None = None,
    version: str | None = None,
    retry: RetryPolicy | None = None,
    queue: str | Queue = "default",
    optional_checkpoints: bool = False,
    delete_on_success: bool = False,
    retention: float | timedelta | None = None,
    registry: Registry | None = None,
    on_event: str | None = None,
    timeout: float | timedelta | None = None,
) -> Any:
    """Declare a durable flow: an ``async def`` whose steps and waits are journaled.

    Args:
        name: registry name; default ``f"{module}.{qualname}"``.
        version: recorded on every run.
        retry: default `RetryPolicy` for the flow's steps (none: run once).
        queue: the queue its runs go to unless `Client.start` says otherwise: a
            name, or a `Queue` (its limits), registered with the flow.
        optional_checkpoints: also checkpoint (and log) when each step starts and
            when a retry is scheduled; costs one round trip per step.
        delete_on_success: delete a run's data as it completes (in the same
            script). Only a tombstone with its result stays for `RESULT_GRACE`
            seconds, so `RunHandle.result()` still returns; `Client.get` raises
            `RunNotFound` at once. Failed and canceled runs are kept.
        retention: keep completed and canceled runs this long (seconds or a
            `timedelta`) after they finish, then a worker deletes them. Default:
            kept until `Client.delete`. Failed runs are always kept.
        registry: where to register it (default: `Registry.default()`).
        timeout: seconds (or a `timedelta`) a run may take, counted from its
            start (when a worker first claims it; time queued before does not
            count). A run that has not ended by then fails with reason
            ``timed_out`` wherever it is (running a step, parked on a wait),
            fired durably by any worker's tick. Default: no limit.
        on_event: an event name: every `Client.send_event` of it starts one run
            of this flow with the event's data as its one argument, run id
            ``f"{name}:{event_id}"`` (so a repeated event id starts nothing).

    Raises:
        RegistryConflict: another function is registered under this name.

    Example::

        @flow
        async def greet(name: str) -> str:
            return await shout(name)

    Called directly (outside a worker) a flow is the plain function; start it
    with `Client.start` to make it durable.
    """

    def decorate(fn: Callable[..., Coroutine[Any, Any, Any]]) -> Any:
        if not inspect.iscoroutinefunction(fn):
            raise InvalidArgument(f"@flow needs an async def; {fn.__qualname__} is not one")
        fname = check_id(name or f"{fn.__module__}.{fn.__qualname__}", "@flow: name")
        qdef = queue if isinstance(queue, Queue) else None
        qname = qdef.name if qdef is not None else check_id(queue, f"flow {fname!r}: queue")
        check_optional_id(version, f"flow {fname!r}: version")
        sig = inspect.signature(fn)
        clash = RESERVED_OPTIONS.intersection(sig.parameters)
        if clash:
            raise InvalidArgument(
                f"flow {fname!r}: parameter name(s) {sorted(clash)} are reserved for "
                "Client.start / start_child options; rename them"
            )
        keep = _retention(fname, retention)
        limit = None if timeout is None else check_timeout(timeout, f"flow {fname!r}: timeout")
        check_optional_id(on_event, f"flow {fname!r}: on_event")
        if on_event is not None:
            try:
                sig.bind(None)
            except TypeError:
                raise InvalidArgument(
                    f"flow {fname!r}: with on_event it must take the event's data as its "
                    "one argument"
                ) from None
        fd = FlowDef(
            fname, fn, version, retry, qname, sig, optional_checkpoints,
            bool(delete_on_success), keep, on_event=on_event, timeout=limit, queue_def=qdef,
        )  # fmt: skip

        @wrapt.decorator
        def passthrough(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            return wrapped(*args, **kwargs)

        (registry or Registry.default()).add_flow(fd)
        wrapper: Any = passthrough(fn)
        # on the wrapper itself (wrapt keeps `_self_` attributes there; others it
        # sets on the function): one function decorated twice, e.g. under two
        # versions, gives two flows
        wrapper._self_steadyflow_flow = fd
        return wrapper

    if fn is not None:
        return decorate(fn)
    return decorate
