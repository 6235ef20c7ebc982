"""`Serializer`: how user values (arguments, results, payloads) become JSON and back.

Values are stored as JSON, never pickled. A value with a declared type (a
step's return annotation, a flow parameter's annotation) is unstructured and
structured with that type by a cattrs `Converter`. A value without one is
stored as it is when it is plain JSON; when it is a single rich value (attrs
class, dataclass, enum, datetime, UUID, Decimal, tuple...) its type is
recorded as ``module:qualname`` so replay rebuilds the same type; anything
else is a `SerializationError` that names what was being stored.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import enum
import hashlib
import json
import re
import typing
import uuid
from typing import Any, ClassVar

import attrs
import cattrs
from cattrs.preconf.json import make_converter

from sdk._serde import acyclic_encoder, configure, dumps, import_type, type_path
from sdk.errors import SerializationError

__all__ = ["Serializer"]

_SCALARS = (str, int, float, bool, type(None))
_RICH_SCALARS = (_dt.datetime, _dt.date, _dt.time, _dt.timedelta, uuid.UUID, decimal.Decimal)
_SEQUENCES = (tuple, set, frozenset)


class Serializer:
    """Turns the values of your flows into JSON and back, with one cattrs `Converter`.

    Every value a run stores goes through it: flow arguments and results, step
    results, signal and approval payloads, outbox payloads. Give a `Client`
    and the `Worker` s that serve its flows the same one
    (``Client(store, converter=serializer)``, ``Worker(store, converter=serializer)``,
    ``FlowTestEnv(converter=serializer)``); without one they share
    `Serializer.default()`.

    Args:
        converter: the cattrs converter to use; default a new one made by
            `cattrs.preconf.json.make_converter` with Steadyflow's hooks
            (UUID, Decimal, timedelta, time, ``object``). Register hooks for
            your own types on `converter`.

    Example::

        serializer = Serializer()
        serializer.converter.register_unstructure_hook(Money, lambda m: f"{m.amount} {m.currency}")
        serializer.converter.register_structure_hook(Money, lambda s, _: Money.parse(s))
        client = Client(store, converter=serializer)
    """

    _default: ClassVar[Serializer | None] = None

    def __init__(self, converter: cattrs.Converter | None = None) -> None:
        self.converter = (
            converter if converter is not None else configure(make_converter(omit_if_default=True))
        )
        self._hashing: cattrs.Converter | None = None

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
        raise TypeError(f"converter must be a Serializer or a cattrs Converter, got {converter!r}")

    # -- values ---------------------------------------------------------------------

    def encode(self, value: Any, declared: Any, what: str) -> tuple[Any, str | None]:
        """JSON-ready data for `value`, and the type path to record (or None).

        Args:
            value: the value to store.
            declared: its declared type, or None when there is no usable annotation.
            what: names the value in errors, e.g. ``"result of step 'charge#1'"``.
        """
        tp = type(value)
        if declared is None or declared is Any:
            return self._encode_plain(value, tp, what)
        _check_fits(value, declared, what)
        if tp in _SCALARS and declared in _SCALARS:
            return value, None  # a plain value under a plain annotation is its own JSON
        try:
            data = self.converter.unstructure(value, unstructure_as=declared)
        except Exception as exc:
            raise SerializationError(f"{what}: cannot unstructure as {declared!r}: {exc}") from exc
        _check_json(data, what, tp)
        if not isinstance(declared, type):
            # A generic or union annotation: prove the value rebuilds, as it is,
            # before recording it (Any or object inside an annotation would turn a
            # datetime into a string, a tuple into a list: replay would differ).
            try:
                rebuilt = self.converter.structure(data, declared)
            except Exception as exc:
                raise SerializationError(
                    f"{what}: {value!r:.100} does not fit the annotation {declared!r} "
                    f"(it would not rebuild on replay: {_detail(exc, what)})"
                ) from exc
            if rebuilt != value:
                raise SerializationError(
                    f"{what}: under the annotation {declared!r}, {value!r:.100} would come "
                    f"back as {rebuilt!r:.100} on replay; annotate the values inside exactly "
                    "(e.g. dict[str, datetime]) or store plain JSON values"
                )
        return data, None

    def _encode_plain(self, value: Any, tp: type, what: str) -> tuple[Any, str | None]:
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
            data = self.converter.unstructure(value)
            _check_json(data, what, tp)
            return data, type_path(tp)
        raise SerializationError(
            f"{what}: cannot store a {type_path(tp)} as JSON; use plain JSON data, an attrs "
            "class or dataclass, or register a hook on your Serializer's converter"
        )

    def decode(self, data: Any, declared: Any, recorded_type: str | None, what: str) -> Any:
        """Rebuild a stored value: into `declared` if given, else the recorded type.

        Raises:
            SerializationError: it does not fit; the message keeps cattrs' detail
                (which field, which type) and the cattrs error is its ``__cause__``.
        """
        try:
            if declared is not None and declared is not Any:
                return self.converter.structure(data, declared)
            if recorded_type is not None:
                return self.converter.structure(data, import_type(recorded_type))
            return data
        except Exception as exc:
            raise SerializationError(
                f"{what}: cannot rebuild the stored value: {_detail(exc, what)}"
            ) from exc

    # -- request hashes ---------------------------------------------------------------

    def request_hash(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], named: dict[str, Any] | None = None
    ) -> str:
        """A short hash of a call's arguments (for the side-effect ledger), the same
        in every process. With `named` (the arguments bound to parameter names),
        ``f(10)`` and ``f(amount=10)`` are the same request."""
        payload: Any = named if named is not None else [list(args), kwargs]
        if named is not None and all(type(v) in _SCALARS for v in named.values()):
            # plain values: the converter would give them back as they are
            text = _canonical_scalars(named)
            return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()
        try:
            text = _canonical(self._hasher().unstructure(payload))
        except Exception:
            text = _stable_repr(
                sorted(named.items()) if named is not None else (args, sorted(kwargs.items()))
            )
        return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()

    def _hasher(self) -> cattrs.Converter:
        # The request hash must be the same in every process: sets are sorted
        # (their order follows str hashes, randomized per process).
        if self._hashing is None:
            hashing = self._hashing = self.converter.copy()
            hashing.register_unstructure_hook_func(
                _is_set, lambda v: sorted((hashing.unstructure(x) for x in v), key=_canonical)
            )
        return self._hashing


def _detail(exc: BaseException, what: str) -> str:
    """cattrs' account of what did not fit (field paths and types), else the error itself."""
    if isinstance(exc, (cattrs.BaseValidationError, ExceptionGroup)):
        try:
            return "; ".join(cattrs.transform_error(exc, path="$"))
        except Exception:
            pass
    return f"{type(exc).__name__}: {exc}"


def _is_rich(value: Any) -> bool:
    tp = type(value)
    return (
        attrs.has(tp)
        or dataclasses.is_dataclass(tp)
        or isinstance(value, (enum.Enum, *_RICH_SCALARS))
    )


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


# An object that is not data counts by its repr without the memory address (a
# client, a connection), so the hash is the same in every process.
_ADDRESS = re.compile(r" at 0x[0-9A-Fa-f]+")


def _stable_repr(value: Any) -> str:
    return _ADDRESS.sub("", repr(value))


def _canonical(data: Any) -> str:
    return _CANONICAL.encode(data)


def _is_set(tp: Any) -> bool:
    origin = typing.get_origin(tp) or tp
    return isinstance(origin, type) and issubclass(origin, (set, frozenset))


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=_stable_repr)
# The same text, faster, for a dict of scalars (which holds no cycle).
_canonical_scalars = acyclic_encoder(sort_keys=True, ensure_ascii=True, default=_stable_repr)
