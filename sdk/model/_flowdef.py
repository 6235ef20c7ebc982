"""What `@flow` records about a flow function (`FlowDef`)."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

import attrs

from sdk._core._checks import show
from sdk._core._clock import seconds
from sdk._core._retry import RetryPolicy
from sdk._core._serde import dumps, loads, return_type
from sdk._core._values import Serializer
from sdk.errors import InvalidArgument
from sdk.model._queues import Queue

__all__ = ["RESERVED_OPTIONS", "RESULT_GRACE", "FlowDef", "encode_call", "retention"]

#: Keyword names `Client.start` (and `start_child`: ``parent_close``) take for
#: themselves; a flow parameter may not use them.
RESERVED_OPTIONS = frozenset(
    {"run_id", "priority", "queue", "tenant_id", "options", "parent_close",
     "concurrency_key", "start_at", "start_in", "actor"}
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


def retention(fname: str, value: float | timedelta | None) -> float | None:
    if value is None:
        return None
    secs = seconds(value, f"flow {fname!r}: retention")
    if secs < 0:
        raise InvalidArgument(f"flow {fname!r}: retention must be >= 0 seconds, got {show(value)}")
    return secs
