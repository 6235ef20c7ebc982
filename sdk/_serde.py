"""The one converter between Python values and the JSON kept in the store.

Values are stored as JSON (never pickle). A value with a declared type (a
step's return annotation, a flow parameter's annotation) is unstructured and
structured with that type. A value without one is stored as it is when it is
plain JSON; when it is a single rich value (attrs class, dataclass, enum,
datetime, UUID, Decimal, tuple...) its type is recorded as ``module:qualname``
so replay rebuilds the same type; anything else is a `SerializationError`
that names what was being stored.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import enum
import hashlib
import importlib
import json
import re
import typing
import uuid
from collections.abc import Callable
from typing import Any

import attrs
from cattrs.preconf.json import make_converter

from sdk.errors import SerializationError, StepError

__all__ = [
    "FORMAT_VERSION",
    "converter",
    "decode_value",
    "dumps",
    "encode_exception",
    "encode_value",
    "import_type",
    "loads",
    "rebuild_exception",
    "request_hash",
    "return_type",
    "type_path",
]

#: Format version written into every record; readers upgrade older ones.
#: 2: records carry the round their outcome was delivered in (`Record.r`).
FORMAT_VERSION = 2

converter = make_converter(omit_if_default=True)
converter.register_unstructure_hook(uuid.UUID, str)
converter.register_structure_hook(uuid.UUID, lambda v, _: uuid.UUID(v))
# `object` inside an annotation (dict[str, object], list[object]) means "any JSON
# value": rebuilt as the JSON gave it (exactly `object`, not its subclasses).
converter.register_structure_hook_func(lambda t: t is object, lambda v, _: v)
converter.register_unstructure_hook(decimal.Decimal, str)
converter.register_structure_hook(decimal.Decimal, lambda v, _: decimal.Decimal(v))


def _unstructure_timedelta(v: _dt.timedelta) -> float | list[int]:
    # Seconds as a float, unless the float would lose microseconds (beyond ~100
    # years): then the exact [days, seconds, microseconds].
    secs = v.total_seconds()
    try:
        if _dt.timedelta(seconds=secs) == v:
            return secs
    except OverflowError:  # near timedelta.max the float rounds out of range
        pass
    return [v.days, v.seconds, v.microseconds]


def _structure_timedelta(v: Any, _: Any) -> _dt.timedelta:
    if isinstance(v, list):
        days, secs, micros = v
        return _dt.timedelta(days=days, seconds=secs, microseconds=micros)
    return _dt.timedelta(seconds=v)


converter.register_unstructure_hook(_dt.timedelta, _unstructure_timedelta)
converter.register_structure_hook(_dt.timedelta, _structure_timedelta)
converter.register_unstructure_hook(_dt.time, lambda v: v.isoformat())
converter.register_structure_hook(_dt.time, lambda v, _: _dt.time.fromisoformat(v))

_SCALARS = (str, int, float, bool, type(None))
_RICH_SCALARS = (_dt.datetime, _dt.date, _dt.time, _dt.timedelta, uuid.UUID, decimal.Decimal)
_SEQUENCES = (tuple, set, frozenset)


# One encoder each: json.dumps() with any option builds a new JSONEncoder per call.
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def dumps(value: Any) -> str:
    """Compact JSON text."""
    return _COMPACT.encode(value)


loads: Callable[[str | bytes], Any] = json.loads


def type_path(tp: type) -> str:
    """``module:qualname`` of a class."""
    return f"{tp.__module__}:{tp.__qualname__}"


def import_type(path: str) -> type:
    module, _, qualname = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, type):
        raise TypeError(f"{path} is not a class")
    return obj


def _is_rich(value: Any) -> bool:
    tp = type(value)
    return (
        attrs.has(tp)
        or dataclasses.is_dataclass(tp)
        or isinstance(value, (enum.Enum, *_RICH_SCALARS))
    )


def encode_value(value: Any, declared: Any, what: str) -> tuple[Any, str | None]:
    """Turn ``value`` into JSON-ready data, plus the type path to record (or None).

    Args:
        value: the value to store.
        declared: its declared type, or None when there is no usable annotation.
        what: names the value in errors, e.g. ``"result of step 'charge#1'"``.
    """
    tp = type(value)
    if declared is None or declared is Any:
        if tp in _SCALARS:
            return value, None
        if tp in (list, dict):
            problem = _json_problem(value)
            if problem is not None:
                raise SerializationError(
                    f"{what}: the {tp.__name__} holds {problem}, which JSON would not give "
                    "back as it is; annotate its type (e.g. -> dict[int, str] or "
                    "-> list[Order]) so it is stored and rebuilt exactly"
                )
            return value, None
        if tp in _SEQUENCES or _is_rich(value):
            data = converter.unstructure(value)
            _check_json(data, what, tp)
            return data, type_path(tp)
        raise SerializationError(
            f"{what}: cannot store a {type_path(tp)} as JSON; use plain JSON data, "
            "an attrs class or dataclass, or register a cattrs hook on sdk._serde.converter"
        )
    _check_fits(value, declared, what)
    if tp in _SCALARS and declared in _SCALARS:
        return value, None  # a plain value under a plain annotation is its own JSON
    try:
        data = converter.unstructure(value, unstructure_as=declared)
    except Exception as exc:
        raise SerializationError(f"{what}: cannot unstructure as {declared!r}: {exc}") from None
    _check_json(data, what, tp)
    if not isinstance(declared, type):
        # A generic or union annotation: prove the value rebuilds, as it is,
        # before recording it (Any or object inside an annotation would turn a
        # datetime into a string, a tuple into a list: replay would differ).
        try:
            rebuilt = converter.structure(data, declared)
        except Exception as exc:
            raise SerializationError(
                f"{what}: {value!r} does not fit the annotation {declared!r} "
                f"(it would not rebuild on replay: {exc})"
            ) from None
        if rebuilt != value:
            raise SerializationError(
                f"{what}: under the annotation {declared!r}, {value!r:.100} would come back "
                f"as {rebuilt!r:.100} on replay; annotate the values inside exactly "
                "(e.g. dict[str, datetime]) or store plain JSON values"
            )
    return data, None


def _check_fits(value: Any, declared: Any, what: str) -> None:
    if not isinstance(declared, type) or isinstance(value, declared):
        return
    if declared is float and type(value) is int:  # PEP 484: an int is acceptable as float
        return
    raise SerializationError(
        f"{what}: a {type_path(type(value))} was returned where the annotation says "
        f"{type_path(declared)}; fix the value or the annotation"
    )


def _json_problem(value: Any) -> str | None:
    """What in plain (unannotated) data would not survive a JSON round trip."""
    stack = [value]
    while stack:
        item = stack.pop()
        tp = type(item)
        if tp in _SCALARS:
            continue
        if tp is list:
            stack.extend(item)
        elif tp is dict:
            for key in item:
                if type(key) is not str:
                    return f"the {type(key).__name__} key {key!r}"
            stack.extend(item.values())
        else:
            return f"a {type_path(tp)} ({item!r:.60})"
    return None


def _check_json(data: Any, what: str, tp: type) -> None:
    try:
        dumps(data)
    except (TypeError, ValueError) as exc:
        raise SerializationError(
            f"{what}: a {type_path(tp)} does not convert to JSON ({exc})"
        ) from None


def decode_value(data: Any, declared: Any, recorded_type: str | None, what: str) -> Any:
    """Rebuild a stored value: into ``declared`` if given, else the recorded type."""
    try:
        if declared is not None and declared is not Any:
            return converter.structure(data, declared)
        if recorded_type is not None:
            return converter.structure(data, import_type(recorded_type))
        return data
    except Exception as exc:
        raise SerializationError(f"{what}: cannot rebuild the stored value: {exc}") from exc


def return_type(fn: Callable[..., Any]) -> Any:
    """The usable return annotation of ``fn``, or None."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        return None
    tp = hints.get("return")
    if tp is None or tp is Any or tp is object or tp is type(None):
        return None
    return tp


# The request hash must be the same in every process: sets are sorted (their
# order follows str hashes, randomized per process) and an object that is not
# data counts by its repr without the memory address (a client, a connection).
_hashing = converter.copy()
_ADDRESS = re.compile(r" at 0x[0-9A-Fa-f]+")


def _stable_repr(value: Any) -> str:
    return _ADDRESS.sub("", repr(value))


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=_stable_repr)


def _canonical(data: Any) -> str:
    return _CANONICAL.encode(data)


def _is_set(tp: Any) -> bool:
    origin = typing.get_origin(tp) or tp
    return isinstance(origin, type) and issubclass(origin, (set, frozenset))


_hashing.register_unstructure_hook_func(
    _is_set, lambda v: sorted((_hashing.unstructure(x) for x in v), key=_canonical)
)


def request_hash(
    args: tuple[Any, ...], kwargs: dict[str, Any], named: dict[str, Any] | None = None
) -> str:
    """A short hash of a call's arguments (for the side-effect ledger), the same
    in every process. With `named` (the arguments bound to parameter names),
    ``f(10)`` and ``f(amount=10)`` are the same request."""
    payload: Any = named if named is not None else [list(args), kwargs]
    if named is not None and all(type(v) in _SCALARS for v in named.values()):
        # plain values: the converter would give them back as they are
        return hashlib.blake2b(_canonical(named).encode(), digest_size=12).hexdigest()
    try:
        text = _canonical(_hashing.unstructure(payload))
    except Exception:
        text = _stable_repr(
            sorted(named.items()) if named is not None else (args, sorted(kwargs.items()))
        )
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def encode_exception(exc: BaseException) -> dict[str, Any]:
    """A failure as JSON: type path, message and (when JSON-able) constructor args."""
    data: dict[str, Any] = {"type": type_path(type(exc)), "message": str(exc)}
    try:
        dumps(list(exc.args))
        data["args"] = list(exc.args)
    except (TypeError, ValueError):
        pass
    return data


def rebuild_exception(data: dict[str, Any], step_key: str | None) -> BaseException:
    """The exception a recorded failure stands for: same type, same message.

    Falls back to `StepError` when the type cannot be imported here.
    """
    path = data["type"]
    message = data.get("message", "")
    args = data.get("args")
    if args is None:
        args = [message]
    try:
        cls = import_type(path)
    except Exception:
        return StepError(path, message, step_key)
    if not issubclass(cls, BaseException):
        return StepError(path, message, step_key)
    try:
        exc = cls(*args)
        if type(exc) is cls and str(exc) == message:
            return exc
    except Exception:
        pass
    # The constructor wants other arguments: build without __init__, keep the message.
    exc = cls.__new__(cls)
    exc.args = (message,)
    return exc
