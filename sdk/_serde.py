"""Steadyflow's own formats: JSON text, internal records, type paths, exceptions.

User values (arguments, results, payloads) go through a `sdk.Serializer`
(`sdk._values`); the records the engine writes (journal records, errors,
decisions, run options) through the private converter here, which users
never configure.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import importlib
import json
import typing
import uuid
from collections.abc import Callable
from typing import Any

import cattrs
from cattrs.preconf.json import make_converter

from sdk.errors import StepError

__all__ = [
    "FORMAT_VERSION",
    "acyclic_encoder",
    "configure",
    "converter",
    "dumps",
    "encode_exception",
    "import_type",
    "loads",
    "rebuild_exception",
    "return_type",
    "type_path",
]

#: Format version written into every record; readers upgrade older ones.
#: 2: records carry the round their outcome was delivered in (`Record.r`).
FORMAT_VERSION = 2


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


def configure(converter: cattrs.Converter) -> cattrs.Converter:
    """Add Steadyflow's hooks (UUID, Decimal, timedelta, time, ``object``) to `converter`."""
    converter.register_unstructure_hook(uuid.UUID, str)
    converter.register_structure_hook(uuid.UUID, lambda v, _: uuid.UUID(v))
    # `object` inside an annotation (dict[str, object], list[object]) means "any
    # JSON value": rebuilt as the JSON gave it (exactly `object`, not subclasses).
    converter.register_structure_hook_func(lambda t: t is object, lambda v, _: v)
    converter.register_unstructure_hook(decimal.Decimal, str)
    converter.register_structure_hook(decimal.Decimal, lambda v, _: decimal.Decimal(v))
    converter.register_unstructure_hook(_dt.timedelta, _unstructure_timedelta)
    converter.register_structure_hook(_dt.timedelta, _structure_timedelta)
    converter.register_unstructure_hook(_dt.time, lambda v: v.isoformat())
    converter.register_structure_hook(_dt.time, lambda v, _: _dt.time.fromisoformat(v))
    return converter


#: The converter of the engine's own records. Private: users configure theirs
#: on a `Serializer`.
converter = configure(make_converter(omit_if_default=True))

# One encoder each: json.dumps() with any option builds a new JSONEncoder per call.
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def dumps(value: Any) -> str:
    """Compact JSON text."""
    return _COMPACT.encode(value)


def acyclic_encoder(
    *,
    sort_keys: bool = False,
    ensure_ascii: bool = False,
    default: Callable[[Any], Any] | None = None,
) -> Callable[[Any], str]:
    """A compact JSON encoder for data known to hold no reference cycle (checked
    already, or scalars only): what ``json.JSONEncoder.encode`` writes, without
    building its C encoder again on every call (about half its cost on a small
    record). Data with a cycle raises `ValueError`, as with `dumps`, once the
    recursion limit is hit."""
    fallback = json.JSONEncoder(
        separators=(",", ":"), ensure_ascii=ensure_ascii, sort_keys=sort_keys, default=default
    )
    make = json.encoder.c_make_encoder  # type: ignore[attr-defined]
    strings = (
        json.encoder.c_encode_basestring_ascii  # type: ignore[attr-defined]
        if ensure_ascii
        else json.encoder.c_encode_basestring  # type: ignore[attr-defined]
    )
    if make is None or strings is None:  # no C accelerator (not CPython)
        return fallback.encode
    chunks = make(
        None, fallback.default, strings, None, ":", ",", sort_keys, False, True,
    )  # fmt: skip
    join = "".join

    def encode(value: Any) -> str:
        try:
            return join(chunks(value, 0))
        except RecursionError:
            return fallback.encode(value)  # says "Circular reference detected"

    return encode


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
