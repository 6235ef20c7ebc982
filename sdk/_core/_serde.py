"""Steadyflow's own formats: JSON text, internal records, type paths, exceptions.

User values (arguments, results, payloads) go through a `sdk.Serializer`
(`sdk._core._values`); the records the engine writes (journal records, errors,
decisions, run options) through the private converter here, which users
never configure.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import decimal
import functools
import json
import sys
import traceback
import typing
import uuid
from collections.abc import Callable
from typing import Any

import cattrs
from cattrs.preconf.json import make_converter

from sdk._core._limits import Problem, clip, scan
from sdk.errors import SerializationError, StepError

__all__ = [
    "FORMAT_VERSION",
    "MAX_MESSAGE",
    "acyclic_encoder",
    "clean_message",
    "configure",
    "converter",
    "dumps",
    "encode_exception",
    "exception_message",
    "exception_type",
    "find_exception",
    "find_loaded",
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


#: Where the modules of SDK classes a record may name moved (the SDK's layout, issue
#: 29): a value recorded before names its class by the old module, and still resolves.
MOVED = {
    "sdk._activation": "sdk.engine._activation",
    "sdk._ahead": "sdk.engine._ahead",
    "sdk._aio": "sdk.engine._aio",
    "sdk._calls": "sdk.engine._machine",
    "sdk._cancelling": "sdk.engine._cancelling",
    "sdk._checks": "sdk._core._checks",
    "sdk._client": "sdk.client._client",
    "sdk._clock": "sdk._core._clock",
    "sdk._context": "sdk.runtime._runtime",
    "sdk._cursor": "sdk.engine._cursor",
    "sdk._dispatch": "sdk.worker._dispatch",
    "sdk._eager": "sdk.engine._eager",
    "sdk._ending": "sdk.engine._ending",
    "sdk._engine": "sdk.engine._engine",
    "sdk._events": "sdk.model._events",
    "sdk._export": "sdk.client._export",
    "sdk._flowdef": "sdk.model._flowdef",
    "sdk._follow": "sdk.client._follow",
    "sdk._hashing": "sdk._core._hashing",
    "sdk._heartbeat": "sdk.worker._heartbeat",
    "sdk._history": "sdk.client._history",
    "sdk._intercept": "sdk.model._intercept",
    "sdk._journal": "sdk._core._journal",
    "sdk._jsonshapes": "sdk.client._jsonshapes",
    "sdk._lifecycle": "sdk._core._lifecycle",
    "sdk._limits": "sdk._core._limits",
    "sdk._lineage": "sdk.client._lineage",
    "sdk._observing": "sdk.engine._observing",
    "sdk._ops": "sdk.engine._ops",
    "sdk._outbox": "sdk.model._channels",
    "sdk._primitives": "sdk.runtime._primitives",
    "sdk._quarantine": "sdk.worker._quarantine",
    "sdk._queues": "sdk.model._queues",
    "sdk._queuing": "sdk.client._queuing",
    "sdk._registry": "sdk.model._registry",
    "sdk._retry": "sdk._core._retry",
    "sdk._rewind": "sdk.client._rewind",
    "sdk._runpages": "sdk.client._runpages",
    "sdk._runs": "sdk.client._runs",
    "sdk._schedclient": "sdk.client._schedclient",
    "sdk._schedules": "sdk.model._schedules",
    "sdk._sending": "sdk.client._sending",
    "sdk._serde": "sdk._core._serde",
    "sdk._starting": "sdk.client._starting",
    "sdk._step": "sdk.runtime._step",
    "sdk._steprun": "sdk.engine._steprun",
    "sdk._sticky": "sdk.worker._sticky",
    "sdk._ticker": "sdk.worker._ticker",
    "sdk._timeline": "sdk.client._timeline",
    "sdk._treecopy": "sdk.client._treecopy",
    "sdk._types": "sdk._core._types",
    "sdk._values": "sdk._core._values",
    "sdk._waiting": "sdk._core._waiting",
    "sdk._waits": "sdk.engine._waits",
    "sdk._worker": "sdk.worker._worker",
    "sdk._writes": "sdk.engine._writes",
    "stores._lifecycle": "sdk.store._statuses",
    "stores._protocol_parts": "sdk.store._parts",
    "stores._queues": "sdk.store._queues",
    "stores._records": "sdk.store._records",
    "stores._schedule_records": "sdk.store._schedules",
}


def find_loaded(path: str) -> type | None:
    """The class a ``module:qualname`` path names, if this process has imported its
    module already; else None.

    Stored data never decides what code runs: this never imports a module and
    never calls a module's ``__getattr__`` or a descriptor (it reads the
    namespaces' dicts), and it returns only a class whose own path is `path`
    (not an alias that a module imported from elsewhere), or its path before
    its module moved (`MOVED`).
    """
    module, sep, qualname = path.partition(":")
    module = MOVED.get(module, module)
    obj: Any = sys.modules.get(module) if sep else None
    if obj is None:
        return None
    for part in qualname.split("."):
        try:
            obj = vars(obj).get(part)
        except TypeError:  # not a module or a class
            return None
        if obj is None:
            return None
    if not isinstance(obj, type) or obj.__module__ != module or obj.__qualname__ != qualname:
        return None
    return obj


def find_exception(path: str) -> type[Exception] | None:
    """The exception class a recorded failure names (an `Exception` subclass of an
    already imported module, see `find_loaded`), else None. Never
    ``SystemExit`` and its kin: stored data cannot make a worker exit."""
    cls = find_loaded(path)
    if cls is None or not issubclass(cls, Exception):
        return None
    return cls


def exception_type(path: str) -> type[BaseException]:
    """The exception class named by a stored ``module:qualname`` (of a `RetryPolicy`),
    from an already imported module; `SerializationError` otherwise."""
    cls = find_loaded(path)
    if cls is None or not issubclass(cls, BaseException):
        raise SerializationError(
            f"exception type {clip(path, 200)!r}: not an exception class of a module this "
            "process has imported (stored type names are never imported)"
        )
    return cls


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


#: A recorded failure's message is cut to this many characters (the run's error,
#: its events and the journal all carry it).
MAX_MESSAGE = 4096
_ARGS_LIMIT = 8192  # bytes of JSON: larger constructor args are not kept


def clean_message(text: str) -> str:
    """A message that can be stored: at most `MAX_MESSAGE` characters, and a lone
    surrogate (not valid Unicode text, so not storable) written as ``\\udcff``."""
    if len(text) > MAX_MESSAGE:
        text = f"{text[:MAX_MESSAGE]}... [{len(text) - MAX_MESSAGE:,} more characters]"
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def exception_message(exc: BaseException) -> str:
    """``str(exc)``, made storable (`clean_message`); a broken ``__str__`` is no error."""
    try:
        text = str(exc)
    except Exception:
        text = f"<{clip(type(exc).__qualname__, 100)}: its __str__ failed>"
    return clean_message(text)


#: The longest traceback kept with a failure: its last characters (the frames
#: nearest the error), so a deep recursion cannot bloat a journal.
MAX_TRACEBACK = 8000


def traceback_text(exc: BaseException) -> str | None:
    """The formatted traceback of `exc` (its chained causes too), made storable and
    cut to its last `MAX_TRACEBACK` characters; None when it has none (a
    failure rebuilt from the journal: `recorded_traceback` has that one)."""
    recorded = recorded_traceback(exc)
    if recorded is not None:
        return recorded
    if exc.__traceback__ is None:
        return None
    try:
        text = "".join(traceback.format_exception(exc))
    except Exception:  # a broken __str__ in the chain: the frames alone
        text = "".join(traceback.format_tb(exc.__traceback__))
    if len(text) > MAX_TRACEBACK:
        cut = len(text) - MAX_TRACEBACK
        text = f"... ({cut} characters cut)\n" + text[cut:]
    if not text.isascii():  # a lone surrogate cannot be stored (as in clean_message)
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def recorded_traceback(exc: BaseException) -> str | None:
    """The traceback recorded with the failure `exc` was rebuilt from, if any."""
    text = getattr(exc, "__steadyflow_traceback__", None)
    return text if isinstance(text, str) else None


def encode_exception(exc: BaseException) -> dict[str, Any]:
    """A failure as JSON: type path, message, its traceback (`traceback_text`), and
    its constructor args when they are small plain JSON that comes back equal (a
    `UnicodeDecodeError`'s bytes are not). Whatever the exception holds, the
    result can be stored."""
    data: dict[str, Any] = {
        "type": clean_message(type_path(type(exc))),
        "message": exception_message(exc),
    }
    tb = traceback_text(exc)
    if tb is not None:
        data["traceback"] = tb
    args = list(exc.args) if isinstance(exc.args, tuple) else []
    if args:
        try:
            foreign, _, upper = scan(args, _ARGS_LIMIT)
        except Problem:
            return data
        if foreign is None and upper <= _ARGS_LIMIT:
            data["args"] = args
    return data


def rebuild_exception(data: dict[str, Any], step_key: str | None) -> BaseException:
    """The exception a recorded failure stands for: same type, same message.

    The type is looked up among the exception classes of modules this process
    has imported (`find_exception`; stored data never makes it import one).
    When its constructor does not take the recorded args, or its ``str()`` is
    not made from them (`UnicodeDecodeError`), the result is an instance of a
    subclass that shows the recorded message: ``except UnicodeDecodeError``
    still catches it, and its type path is the original's. A type that is not
    found (or cannot be built) becomes `StepError` with the type's name and
    the message. It carries the recorded traceback, if any
    (`recorded_traceback`), for the errors that report it.
    """
    exc = _rebuild(data, step_key)
    tb = data.get("traceback")
    if isinstance(tb, str):
        with contextlib.suppress(Exception):  # the recorded traceback (traceback_text)
            exc.__steadyflow_traceback__ = tb  # type: ignore[attr-defined]
    return exc


def _rebuild(data: dict[str, Any], step_key: str | None) -> BaseException:
    path = str(data.get("type") or "")
    message = data.get("message")
    message = message if isinstance(message, str) else ""
    cls = find_exception(path)
    if cls is None:
        return StepError(path, message, step_key)
    args = data.get("args")
    try:
        exc = cls(*(args if isinstance(args, list) else [message]))
        if type(exc) is cls and str(exc) == message:
            return exc
    except Exception:
        pass
    for kind in (cls, _showing_message(typing.cast(Any, cls))):
        # build without __init__ (it wants other arguments), keep the message
        try:
            exc = kind.__new__(kind)
            exc.args = (message,)
            if str(exc) == message:
                return exc
        except Exception:
            pass
    return StepError(path, message, step_key)


@functools.lru_cache(maxsize=256)
def _showing_message(cls: Any) -> type[Exception]:
    """A subclass of `cls` whose ``str()`` is its one arg (the recorded message)."""
    try:
        sub: type[Exception] = type(
            cls.__name__, (cls,),
            {"__str__": BaseException.__str__, "__module__": cls.__module__,
             "__qualname__": cls.__qualname__, "__doc__": cls.__doc__},
        )  # fmt: skip
    except Exception:  # not subclassable: the caller falls back to StepError
        sub = cls
    return sub
