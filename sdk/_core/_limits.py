"""What a stored value may be: the one bounded walk that checks it, and short reprs.

Every user value Steadyflow stores (flow arguments and results, step results,
signal, approval and outbox payloads) becomes JSON text. Before it is stored,
`scan` walks it once, without recursion, and refuses (`Problem`) what JSON
would not hold, or not give back as it was:

- a reference cycle (a list that contains itself);
- nesting deeper than `MAX_DEPTH` containers;
- a float that is not finite (``nan``, ``inf``);
- an int outside the signed 64-bit range (`INT_MIN` .. `INT_MAX`);
- a string or dict key that is not valid Unicode text (a lone surrogate, as
  ``os.listdir`` returns for a file name that is not UTF-8);
- more JSON than the limit (`TooLarge`).

The walk is bounded: a container is walked only while the JSON seen so far
is within the limit (every element is at least one byte of JSON), so a cycle
or a shared structure that would expand to an exponential size costs at most
about `limit` steps. Errors show values with `short`, never a whole repr.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Iterator
from typing import Any

__all__ = [
    "INT_MAX",
    "INT_MIN",
    "MAX_DEPTH",
    "MAX_JSON_DEPTH",
    "Foreign",
    "Problem",
    "TooLarge",
    "clip",
    "nested_deeper",
    "scan",
    "short",
    "utf8_len",
]

#: Containers may nest this deep (``[[1]]`` is 2); deeper data is refused.
MAX_DEPTH = 64
#: JSON text a caller hands in (an HTTP body, a payload typed in the console or on
#: the command line) may nest this deep: deeper is refused as it is parsed, before
#: anything recursive sees it; a value inside it is then held to `MAX_DEPTH`.
MAX_JSON_DEPTH = 100
#: Integers must fit a signed 64-bit int (what Go, Java, databases read back).
INT_MIN, INT_MAX = -(2**63), 2**63 - 1


class Problem(Exception):
    """What is wrong with a value, worded to follow "<what it is>: " ("it holds...")."""


class TooLarge(Problem):
    """The value's JSON is over the limit: at least `size` bytes."""

    def __init__(self, size: int) -> None:
        super().__init__(f"its JSON text is at least {size:,} bytes")
        self.size = size


class Foreign:
    """The first thing `scan` found that is not plain JSON data; ``str()`` describes it."""

    __slots__ = ("is_key", "item")

    def __init__(self, item: Any, *, is_key: bool = False) -> None:
        self.item = item
        self.is_key = is_key

    def __str__(self) -> str:
        tp = type(self.item)
        if self.is_key:
            return f"the {_type_name(tp)} key {short(self.item)}"
        return f"a {_type_name(tp)} ({short(self.item)})"


def scan(value: Any, limit: int, *, data: bool = False) -> tuple[Foreign | None, int, int]:
    """Check `value` for what JSON cannot hold; raise `Problem` if it holds one.

    With `data` (a converter's output), what ``json.dumps`` writes in another
    form is accepted: tuples (as arrays), dict keys of int, float, bool and
    None (as text). Whether they come back is the caller's round trip to prove.

    Returns:
        (the first thing in it that is not plain JSON data, or None;
        a lower bound and an upper bound of the size of its JSON text in bytes).
        Tuples, sets, dicts with other keys than ``str``, attrs instances and
        dataclasses are walked too (cycles and depth are checked through them).
    """
    foreign: Foreign | None = None
    lower = upper = 0
    path: list[Any] = [None]  # the containers being walked (after a sentinel)
    stack: list[Iterator[Any]] = [iter((value,))]
    while stack:
        for item in stack[-1]:
            tp = type(item)
            if tp is str:
                n = len(item) if item.isascii() else _text_len(item)
                lower += n + 2
                upper += 6 * n + 3  # every byte escaped as \u00XX, plus a separator
                continue
            if tp is int:
                if not INT_MIN <= item <= INT_MAX:
                    raise Problem(f"it holds the integer {short(item)}, outside the signed "
                                  "64-bit range JSON readers agree on")  # fmt: skip
                lower += 1
                upper += 21
                continue
            if tp is float:
                if item - item != 0.0:  # nan and inf (inf - inf is nan)
                    raise Problem(f"it holds the float {item!r}, which JSON cannot hold")
                lower += 3
                upper += 25
                continue
            if item is None or tp is bool:
                lower += 4
                upper += 6
                continue
            if tp is list or (data and tp is tuple):  # json.dumps writes a tuple as a list
                children: Any = item
            elif tp is dict:
                for key in item:
                    if type(key) is str:
                        n = len(key) if key.isascii() else _text_len(key)
                        lower += n + 3
                        upper += 6 * n + 4
                    elif data and (key is None or type(key) in _TEXT_KEYS):
                        lower += 4
                        upper += 30 if type(key) is not int else 30 + key.bit_length() // 3
                    elif foreign is None:
                        foreign = Foreign(key, is_key=True)
                children = item.values()
            elif tp is tuple or tp is set or tp is frozenset:
                if foreign is None:
                    foreign = Foreign(item)
                children = item
            elif data and isinstance(item, (str, int, float)):
                # an IntEnum, a StrEnum: json.dumps writes its plain value
                _, lo, up = scan(_plain_value(item), limit)
                lower += lo
                upper += up
                continue
            else:
                names = _field_names(tp)
                if foreign is None:
                    foreign = Foreign(item)
                if names is None:  # a leaf: its converter hook decides its JSON
                    lower += 1
                    continue
                children = [getattr(item, name, None) for name in names]
            if len(path) > MAX_DEPTH:
                if any(c is item for c in path):
                    raise Problem(f"it holds a reference cycle (a {tp.__name__} that contains "
                                  "itself); JSON can only hold trees")  # fmt: skip
                raise Problem(f"it is nested more than {MAX_DEPTH} levels deep")
            if lower > limit:
                raise TooLarge(lower)
            lower += 2
            upper += 3
            path.append(item)
            stack.append(iter(children))
            break
        else:
            stack.pop()
            path.pop()
    return foreign, lower, upper


_TEXT_KEYS = (int, float, bool)  # keys json.dumps writes as text (and None)


def _plain_value(item: str | int | float) -> Any:
    """The plain str, int or float a subclass instance stands for in JSON."""
    if isinstance(item, str):
        return str.__str__(item)
    if isinstance(item, int):
        return int.__index__(item)
    return float.__float__(item)


def _text_len(text: str) -> int:
    """UTF-8 length of a non-ASCII string; a `Problem` if it is not valid text."""
    try:
        return len(text.encode())
    except UnicodeEncodeError as exc:
        raise Problem(
            f"it holds the string {short(text)}, which is not valid Unicode text (a lone "
            f"surrogate {text[exc.start]!r} at index {exc.start}; decode file names and "
            "bytes with errors='replace' or keep them as bytes under an annotation)"
        ) from None


def utf8_len(text: str) -> int:
    """Bytes of `text` in UTF-8 (text known to be valid)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _field_names(tp: type) -> list[str] | None:
    """Field names of an attrs class or dataclass (walked like a dict), else None."""
    fields = getattr(tp, "__attrs_attrs__", None)
    if fields is not None:
        return [a.name for a in fields]
    if dataclasses.is_dataclass(tp):
        return [f.name for f in dataclasses.fields(tp)]
    return None


def _type_name(tp: type) -> str:
    module = getattr(tp, "__module__", "")
    return tp.__qualname__ if module == "builtins" else f"{module}.{tp.__qualname__}"


_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = 60
_REPR.maxother = 60
_REPR.maxlong = 40
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxfrozenset = _REPR.maxdict = 5


def short(value: Any, limit: int = 100) -> str:
    """A repr of `value` for a message: at most `limit` characters, whatever its size
    (a 10 MB value, a 100,000-deep list, a cycle, an int of a million digits)."""
    if type(value) is int and value.bit_length() > 256:
        return f"<an int of {value.bit_length():,} bits>"
    try:
        text = _REPR.repr(value)
    except Exception:  # a broken __repr__, or one that recurses too deep
        text = f"<a {_type_name(type(value))}>"
    return clip(text, limit)


def nested_deeper(value: Any, bound: int) -> bool:
    """Whether JSON data `value` (as `json.loads` gives it) nests lists and dicts more
    than `bound` deep (``[[1]]`` is 2). Walked without recursion."""
    stack = [(value, 1)] if type(value) is list or type(value) is dict else []
    while stack:
        item, level = stack.pop()
        if level > bound:
            return True
        children = item.values() if type(item) is dict else item
        stack.extend((c, level + 1) for c in children if type(c) is list or type(c) is dict)
    return False


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters (marked with "...")."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
