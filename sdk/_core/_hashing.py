"""Request hashes: a short hash of a call's arguments, the same in every process.

The side-effect ledger compares them: a replayed or forked run that calls a
step with other arguments than recorded is refused (`IdempotencyConflict`).
"""

from __future__ import annotations

import hashlib
import json
import re
import typing
from collections.abc import Callable
from typing import Any

import cattrs

from sdk._core._serde import acyclic_encoder

__all__ = ["canonical", "hashing_converter", "positional_hasher", "request_hash"]

_SCALARS = frozenset((str, int, float, bool, type(None)))

# An object that is not data counts by its repr without the memory address (a
# client, a connection), so the hash is the same in every process.
_ADDRESS = re.compile(r" at 0x[0-9A-Fa-f]+")


def _stable_repr(value: Any) -> str:
    return _ADDRESS.sub("", repr(value))


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=_stable_repr)
# The same text, faster, for a dict of scalars (which holds no cycle).
_canonical_scalars = acyclic_encoder(sort_keys=True, ensure_ascii=True, default=_stable_repr)


def canonical(data: Any) -> str:
    """JSON text with sorted keys: equal data, equal text."""
    return _CANONICAL.encode(data)


def _is_set(tp: Any) -> bool:
    origin = typing.get_origin(tp) or tp
    return isinstance(origin, type) and issubclass(origin, (set, frozenset))


def hashing_converter(converter: cattrs.Converter) -> cattrs.Converter:
    """A copy of `converter` that sorts sets (their order follows str hashes,
    randomized per process)."""
    hashing = converter.copy()
    hashing.register_unstructure_hook_func(
        _is_set, lambda v: sorted((hashing.unstructure(x) for x in v), key=canonical)
    )
    return hashing


_ascii: Callable[[str], str] = json.encoder.encode_basestring_ascii
_INF = float("inf")


def _scalar_text(v: Any) -> str:
    """What the canonical encoder writes for a plain scalar (`_SCALARS`)."""
    t = type(v)
    if t is str:
        return _ascii(v)
    if t is int:
        return int.__repr__(v)
    if t is float:
        if v != v:
            return "NaN"
        if v == _INF:
            return "Infinity"
        if v == -_INF:
            return "-Infinity"
        return float.__repr__(v)
    if v is None:
        return "null"
    return "true" if v else "false"


def positional_hasher(names: tuple[str, ...]) -> Callable[[tuple[Any, ...]], str | None]:
    """`request_hash` of a call passing exactly the parameters `names`, in order,
    positionally, for when every argument is a plain scalar (else it gives None).

    The text is `_canonical_scalars` of the arguments bound to their names, put
    together from pieces made once per step: the JSON of each name, in sorted
    order, and of each value as the encoder writes it (`_scalar_text`); the
    general path's cost was mostly binding, looping and the encoder's per-call
    setup, at every live step. tests/test_replay_fork.py checks they agree.
    """
    order = sorted(range(len(names)), key=lambda i: names[i])
    heads = [("{" if n == 0 else ",") + _ascii(names[i]) + ":" for n, i in enumerate(order)]
    pairs = list(zip(heads, order, strict=True))
    scalars, text_of, blake = _SCALARS, _scalar_text, hashlib.blake2b

    def hashed(args: tuple[Any, ...]) -> str | None:
        parts = []
        for head, i in pairs:
            v = args[i]
            if type(v) not in scalars:
                return None
            parts.append(head)
            parts.append(text_of(v))
        text = "".join(parts) + "}" if parts else "{}"
        return blake(text.encode(), digest_size=12).hexdigest()

    return hashed


def request_hash(
    hasher: Callable[[], cattrs.Converter],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    named: dict[str, Any] | None = None,
) -> str:
    """See `Serializer.request_hash`; `hasher` gives the `hashing_converter`."""
    payload: Any = named if named is not None else [list(args), kwargs]
    if named is not None:
        for v in named.values():
            if type(v) not in _SCALARS:
                break
        else:  # plain values: the converter would give them back as they are
            text = _canonical_scalars(named)
            return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()
    try:
        text = canonical(hasher().unstructure(payload))
    except Exception:
        try:
            text = _stable_repr(
                sorted(named.items()) if named is not None else (args, sorted(kwargs.items()))
            )
        except Exception:  # nested too deep even for repr: hash the shape only
            text = repr([type(v).__qualname__ for v in (named or kwargs).values()])
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()
