"""`Serializer`: how user values (arguments, results, payloads) become JSON and back.

Values are stored as JSON, never pickled. A value with a declared type (a
step's return annotation, a flow parameter's annotation) is unstructured and
structured with that type by a cattrs `Converter`. A value without one is
stored as it is when it is plain JSON; when it is a single rich value (attrs
class, dataclass, enum, datetime, UUID, Decimal, tuple...) its type is
recorded as ``module:qualname`` so replay rebuilds the same type; anything
else is a `SerializationError` that names what was being stored.

Before anything is stored, one bounded walk (`sdk._core._limits.scan`) refuses
cycles, deep nesting, non-finite floats, out-of-range ints, invalid text and
oversized values; a value that goes through the converter is also rebuilt
from its JSON text, as replay will, and refused unless it comes back equal.
A recorded type path resolves only through an allow-list (`Serializer.resolve`).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import enum
import typing
import uuid
from typing import Any, ClassVar

import attrs
import cattrs
from cattrs.preconf.json import make_converter

from sdk._core._hashing import hashing_converter, request_hash
from sdk._core._limits import INT_MAX, INT_MIN, Problem, TooLarge, clip, scan, short, utf8_len
from sdk._core._serde import acyclic_encoder, configure, find_loaded, loads, type_path
from sdk.errors import PayloadTooLarge, SerializationError

__all__ = ["Serializer"]

_SCALARS = (str, int, float, bool, type(None))
_RICH_SCALARS = (_dt.datetime, _dt.date, _dt.time, _dt.timedelta, uuid.UUID, decimal.Decimal)
_SEQUENCES = (tuple, set, frozenset)
#: The builtin rich types a recorded type path may name (their subclasses are
#: recorded as these: freezegun's FakeDatetime is stored as a datetime).
_BUILTIN_TYPES: dict[str, type] = {type_path(t): t for t in (*_SEQUENCES, *_RICH_SCALARS)}
_RICH_BASES = (_dt.datetime, *_RICH_SCALARS)  # datetime before date: it is one

#: Default `Serializer.max_payload_bytes`: 2 MB of JSON per stored value.
DEFAULT_MAX_PAYLOAD_BYTES = 2_000_000
_T = typing.TypeVar("_T")


class Serializer:
    """Turns the values of your flows into JSON and back, with one cattrs `Converter`.

    Every value a run stores goes through it: flow arguments and results, step
    results, signal and approval payloads, outbox payloads. Give a `Client`
    and the `Worker` s that serve its flows the same one
    (``Client(store, converter=serializer)``, ``Worker(store, converter=serializer)``,
    ``FlowTestEnv(converter=serializer)``); without one they share
    `Serializer.default()`.

    Every value is checked before it is stored, and refused with a
    `SerializationError` that names it (``"result of step 'charge#1'"``) and
    shows it cut short: a reference cycle, nesting deeper than 64 containers,
    a ``nan`` or ``inf``, an int outside the signed 64-bit range, a string or
    key that is not valid Unicode text (a lone surrogate), JSON text over
    `max_payload_bytes` (`PayloadTooLarge`, a `SerializationError`), and a value
    that would not come back equal on replay.

    Args:
        converter: the cattrs converter to use; default a new one made by
            `cattrs.preconf.json` `make_converter` with Steadyflow's hooks
            (UUID, Decimal, timedelta, time, ``object``). Register hooks for
            your own types on `converter`.
        max_payload_bytes: the largest value stored, in bytes of its JSON text
            (UTF-8): each flow argument, result, step result, signal, approval
            and outbox payload (default 2,000,000). It protects Redis and the
            workers, which load a run's whole journal at once: keep large data
            elsewhere and store a reference.

    Example::

        serializer = Serializer(max_payload_bytes=500_000)
        serializer.converter.register_unstructure_hook(Money, lambda m: f"{m.amount} {m.currency}")
        serializer.converter.register_structure_hook(Money, lambda s, _: Money.parse(s))
        client = Client(store, converter=serializer)
    """

    _default: ClassVar[Serializer | None] = None

    def __init__(
        self,
        converter: cattrs.Converter | None = None,
        *,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        if type(max_payload_bytes) is not int or max_payload_bytes < 1:
            raise ValueError(
                f"max_payload_bytes must be a positive int, got {short(max_payload_bytes)}"
            )
        self.converter = (
            converter if converter is not None else configure(make_converter(omit_if_default=True))
        )
        #: The largest value stored, in bytes of its JSON text (UTF-8).
        self.max_payload_bytes = max_payload_bytes
        self._hashing: cattrs.Converter | None = None
        self._registered: dict[str, type] = {}  # type path -> class (`register_type`)

    @classmethod
    def default(cls) -> Serializer:
        """The serializer used where none is given."""
        if cls._default is None:
            cls._default = cls()
        return cls._default

    @classmethod
    def of(cls, converter: Serializer | cattrs.Converter | None) -> Serializer:
        """A `converter=` argument as a serializer (a cattrs converter is wrapped)."""
        if converter is None:
            return cls.default()
        if isinstance(converter, Serializer):
            return converter
        if isinstance(converter, cattrs.BaseConverter):
            return cls(converter)
        raise TypeError(
            f"converter must be a Serializer or a cattrs Converter, got {short(converter)}"
        )

    # -- values ---------------------------------------------------------------------

    def register_type(self, tp: type[_T]) -> type[_T]:
        """Let values of `tp` be stored without an annotation, rebuilt by name on replay.

        A value stored without an annotation records its type's
        ``module:qualname``; replay rebuilds only an allow-listed type (see
        `resolve`): attrs classes, dataclasses and enums need nothing, but a
        class of your own with converter hooks (``Money`` above) does. Usable
        as a class decorator; returns `tp`.
        """
        if not isinstance(tp, type):
            raise TypeError(f"register_type() takes a class, got {short(tp)}")
        self._registered[type_path(tp)] = tp
        return tp

    def resolve(self, path: str) -> type | None:
        """The class a recorded ``module:qualname`` names, if replay may build it.

        Stored data never decides what code runs: a path resolves only to
        tuple, set, frozenset, datetime, date, time, timedelta, UUID, Decimal;
        a class given to `register_type`; or an attrs class, dataclass or enum
        of a module this process has already imported. Nothing is imported.
        """
        tp = self._registered.get(path) or _BUILTIN_TYPES.get(path)
        if tp is not None:
            return tp
        tp = find_loaded(path)
        if tp is not None and (
            attrs.has(tp) or dataclasses.is_dataclass(tp) or issubclass(tp, enum.Enum)
        ):
            return tp
        return None

    def encode(self, value: Any, declared: Any, what: str) -> tuple[Any, str | None]:
        """JSON-ready data for `value`, and the type path to record (or None).

        Args:
            value: the value to store.
            declared: its declared type, or None when there is no usable annotation.
            what: names the value in errors, e.g. ``"result of step 'charge#1'"``.

        Raises:
            SerializationError: the value cannot be stored, or would not come
                back equal (see the class docstring); nothing was converted.
        """
        tp = type(value)
        if declared is None or declared is Any:
            if tp in _SCALARS or tp is list or tp is dict:
                return self._plain(value, what), None
            return self._rich(value, tp, what)
        _check_fits(value, declared, what)
        if tp in _SCALARS and declared in _SCALARS:
            return self._plain(value, what), None  # a plain value is its own JSON
        return self._typed(value, declared, what, None), None

    def _plain(self, value: Any, what: str) -> Any:
        """Plain JSON data (unannotated, or a scalar under its annotation), checked."""
        tp, limit = type(value), self.max_payload_bytes
        # the scalars steps return most, without the walk
        if tp is int:
            if INT_MIN <= value <= INT_MAX:
                return value
        elif tp is str:
            if value.isascii() and 6 * len(value) + 2 <= limit:
                return value
        elif tp is float:
            if value - value == 0.0:
                return value
        elif tp is bool or value is None:
            return value
        foreign, lower, upper = self._scan(value, what)
        if foreign is not None:
            raise SerializationError(
                f"{_name(what)}: the {tp.__name__} holds {foreign}, which JSON would not "
                "give back as it is; annotate its type (e.g. -> dict[int, str] or "
                "-> list[Order]) so it is stored and rebuilt exactly"
            )
        if upper > limit:
            if lower > limit:
                raise self._too_large(lower, what, at_least=True)
            self._check_size(utf8_len(_encode(value)), what)
        return value

    def _rich(self, value: Any, tp: type, what: str) -> tuple[Any, str]:
        """One rich value without an annotation: stored with its type path."""
        base = tp
        if isinstance(value, _RICH_BASES) and tp not in _RICH_SCALARS:
            # a subclass (freezegun's FakeDatetime): stored, and rebuilt, as its base
            base = next(b for b in _RICH_BASES if isinstance(value, b))
        elif not (
            tp in _SEQUENCES
            or tp in self._registered.values()
            or attrs.has(tp)
            or dataclasses.is_dataclass(tp)
            or isinstance(value, (enum.Enum, *_RICH_SCALARS))
        ):
            raise SerializationError(
                f"{_name(what)}: cannot store a {type_path(tp)} as JSON; use plain JSON data, "
                "an attrs class or dataclass, or annotate it and register hooks for it on "
                "your Serializer's converter"
            )
        path = type_path(base)
        if self.resolve(path) is not base:
            raise SerializationError(
                f"{_name(what)}: a {clip(path, 200)} is stored with its type's name, and "
                "replay could not find the type by that name (it is defined inside a "
                "function, or shadowed); define it at module level, or annotate the value"
            )
        return self._typed(value, base, what, base), path

    def _scan(self, value: Any, what: str, *, data: bool = False) -> tuple[Any, int, int]:
        """`scan` under this serializer's size limit, its problems as `SerializationError`."""
        try:
            return scan(value, self.max_payload_bytes, data=data)
        except TooLarge as exc:
            raise self._too_large(exc.size, what, at_least=True) from None
        except Problem as exc:
            raise _refused(what, exc) from None

    def _typed(self, value: Any, declared: Any, what: str, exact: type | None) -> Any:
        """The converter's JSON data for `value` as `declared`, proven to rebuild it."""
        self._scan(value, what)  # before cattrs recurses into it: cycles, depth, size
        try:
            data = self.converter.unstructure(value, unstructure_as=declared)
        except Exception as exc:
            raise SerializationError(
                f"{_name(what)}: cannot unstructure {short(value)} as {_type_name(declared)}: "
                f"{_detail(exc)}"
            ) from exc
        foreign, lower, _ = self._scan(data, what, data=True)
        if foreign is not None:
            raise SerializationError(
                f"{_name(what)}: the converter turned {short(value)} into data holding "
                f"{foreign}, which is not JSON; register an unstructure hook for it on your "
                "Serializer's converter"
            )
        if lower > self.max_payload_bytes:
            raise self._too_large(lower, what, at_least=True)
        text = _encode(data)
        self._check_size(utf8_len(text), what)
        # Replay will structure exactly this text: prove that it gives the value back.
        try:
            back = self.converter.structure(loads(text), declared)
        except Exception as exc:
            raise SerializationError(
                f"{_name(what)}: {short(value)} would not rebuild from its JSON as "
                f"{_type_name(declared)} on replay ({_detail(exc)}); annotate its type "
                "exactly, or register hooks for it on your Serializer's converter"
            ) from exc
        if not self._same(back, value, declared, text, exact):
            raise SerializationError(
                f"{_name(what)}: {short(value)} would come back as {short(back)} on replay"
                f"{_as(declared, exact)}; annotate its type exactly (e.g. -> tuple[bytes, "
                "set[int]], or dict[str, datetime] rather than dict[str, Any]) or store "
                "plain JSON values"
            )
        return data

    def _same(self, back: Any, value: Any, declared: Any, text: str, exact: type | None) -> bool:
        try:
            if exact is not None and type(back) is not exact:
                return False
            if type(value).__eq__ is object.__eq__:  # type: ignore[comparison-overlap]
                # no equality of its own: compare the JSON
                return _encode(self.converter.unstructure(back, unstructure_as=declared)) == text
            return bool(back == value)
        except Exception:  # an __eq__ that raises cannot prove anything
            return False

    def _check_size(self, size: int, what: str) -> None:
        if size > self.max_payload_bytes:
            raise self._too_large(size, what, at_least=False)

    def _too_large(self, size: int, what: str, *, at_least: bool) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"{_name(what)}: its JSON text is {'at least ' if at_least else ''}{size:,} "
            f"bytes, over the limit of {self.max_payload_bytes:,} bytes "
            "(Serializer(max_payload_bytes=...)); keep large data elsewhere (a blob store, "
            "a table) and store a reference to it",
            size,
            self.max_payload_bytes,
        )

    def check_size(self, text: str, what: str) -> None:
        """Raise `PayloadTooLarge` if JSON `text` (e.g. all of a call's arguments
        together) is over `max_payload_bytes`."""
        if len(text) > self.max_payload_bytes // 4:  # short ASCII text: no need to count
            self._check_size(utf8_len(text), what)

    def decode(self, data: Any, declared: Any, recorded_type: str | None, what: str) -> Any:
        """Rebuild a stored value: into `declared` if given, else the recorded type.

        Raises:
            SerializationError: it does not fit; the message keeps cattrs' detail
                (which field, which type) and the cattrs error is its ``__cause__``.
                Or the recorded type is not one replay may build (see `resolve`).
        """
        if declared is not None and declared is not Any:
            tp = declared
        elif recorded_type is not None:
            found = self.resolve(recorded_type)
            if found is None:
                raise SerializationError(
                    f"{_name(what)}: the stored value's type {clip(recorded_type, 200)!r} is "
                    "not one replay may build: tuple, set, frozenset, datetime, date, time, "
                    "timedelta, UUID, Decimal, or an attrs class, dataclass or enum of a "
                    "module this process has imported, or a type given to "
                    "Serializer.register_type (stored type names are never imported); "
                    "import its module in the worker, or register it"
                )
            tp = found
        else:
            return data
        try:
            return self.converter.structure(data, tp)
        except Exception as exc:
            raise SerializationError(
                f"{_name(what)}: cannot rebuild the stored value: {_detail(exc)}"
            ) from exc

    # -- request hashes ---------------------------------------------------------------

    def request_hash(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], named: dict[str, Any] | None = None
    ) -> str:
        """A short hash of a call's arguments (for the side-effect ledger), the same
        in every process. With `named` (the arguments bound to parameter names),
        ``f(10)`` and ``f(amount=10)`` are the same request."""
        return request_hash(self._hasher, args, kwargs, named)

    def _hasher(self) -> cattrs.Converter:
        if self._hashing is None:
            self._hashing = hashing_converter(self.converter)
        return self._hashing


def _detail(exc: BaseException) -> str:
    """cattrs' account of what did not fit (field paths and types), else the error
    itself; cut short (a message never carries a whole value)."""
    if isinstance(exc, (cattrs.BaseValidationError, ExceptionGroup)):
        try:
            return clip("; ".join(cattrs.transform_error(exc, path="$")), 300)
        except Exception:
            pass
    if isinstance(exc, RecursionError):
        return "it is nested too deeply for the converter"
    try:
        text = str(exc)
    except Exception:
        text = "?"
    return clip(f"{type(exc).__name__}: {text}", 200)


def _name(what: str) -> str:
    return clip(what, 200)


def _type_name(tp: Any) -> str:
    return clip(type_path(tp) if isinstance(tp, type) else repr(tp), 120)


def _as(declared: Any, exact: type | None) -> str:
    return "" if exact is not None else f" under the annotation {_type_name(declared)}"


def _refused(what: str, problem: Problem) -> SerializationError:
    return SerializationError(f"{_name(what)}: {problem}")


def _check_fits(value: Any, declared: Any, what: str) -> None:
    if not isinstance(declared, type) or isinstance(value, declared):
        return
    if declared is float and type(value) is int:  # PEP 484: an int is acceptable as float
        return
    raise SerializationError(
        f"{_name(what)}: a {type_path(type(value))} was returned where the annotation says "
        f"{type_path(declared)}; fix the value or the annotation"
    )


_encode = acyclic_encoder()  # for data `scan` has checked (no cycle)
