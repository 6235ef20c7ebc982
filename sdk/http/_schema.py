"""Request checks against the JSON Schemas the route table declares.

The schema a route declares is both what the OpenAPI document shows and what
a request is checked against, so the two cannot drift apart. Only the subset
of JSON Schema the routes use is understood: ``type`` (a name or a list),
``properties``, ``required``, ``additionalProperties: false``, ``items``,
``enum``, ``minimum``, ``maximum``, ``minLength``, ``maxLength``; other
keywords (``description``, ``format``, ``$ref`` in responses) are not checked.
"""

from __future__ import annotations

import json
from typing import Any

from sdk._core._limits import MAX_JSON_DEPTH, nested_deeper
from sdk.http._problems import ApiError, ErrorCode

__all__ = ["check", "parse_json"]

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _is(value: Any, name: str) -> bool:
    if isinstance(value, bool) and name in ("integer", "number"):
        return False  # JSON true is not a number, whatever Python thinks
    return isinstance(value, _TYPES[name])


def check(value: Any, schema: dict[str, Any], where: str) -> None:
    """Raise `ApiError` (``invalid_argument``) naming the first place where
    `value` does not fit `schema`; `where` names `value` (``"body"``)."""
    kinds = schema.get("type")
    if kinds is not None:
        names = [kinds] if isinstance(kinds, str) else list(kinds)
        if not any(_is(value, n) for n in names):
            raise ApiError(
                ErrorCode.INVALID_ARGUMENT,
                f"{where} must be {' or '.join(names)}, got {_show(value)}",
            )
    if "enum" in schema and value not in schema["enum"]:
        raise ApiError(
            ErrorCode.INVALID_ARGUMENT,
            f"{where} must be one of {', '.join(map(str, schema['enum']))}; got {_show(value)}",
        )
    if isinstance(value, int | float) and not isinstance(value, bool):
        low, high = schema.get("minimum"), schema.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            raise ApiError(
                ErrorCode.INVALID_ARGUMENT,
                f"{where} must be in {low if low is not None else '-inf'}.."
                f"{high if high is not None else 'inf'}, got {_show(value)}",
            )
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            raise ApiError(ErrorCode.INVALID_ARGUMENT, f"{where} must not be empty")
        longest = schema.get("maxLength")
        if longest is not None and len(value) > longest:
            raise ApiError(
                ErrorCode.INVALID_ARGUMENT,
                f"{where} is {len(value)} characters long, over the limit of {longest}",
            )
    if isinstance(value, dict):
        props: dict[str, Any] = schema.get("properties", {})
        for name in schema.get("required", ()):
            if name not in value:
                raise ApiError(ErrorCode.INVALID_ARGUMENT, f"{where}.{name} is required")
        for name, item in value.items():
            if name in props:
                check(item, props[name], f"{where}.{name}")
            elif schema.get("additionalProperties") is False:
                known = ", ".join(sorted(props)) or "none"
                raise ApiError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"{where} has an unknown field {name[:60]!r} (known fields: {known})",
                )
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            check(item, schema["items"], f"{where}[{i}]")


_TOO_DEEP = f"the body's JSON is nested too deeply (more than {MAX_JSON_DEPTH} levels)"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(body: bytes) -> Any:
    """The JSON value of a request body; `ApiError` (``invalid_json``, 400) saying
    what is wrong: not UTF-8, a syntax error (with its line and column), NaN or
    Infinity, or nesting deeper than `MAX_JSON_DEPTH` (100) arrays and objects."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(
            ErrorCode.INVALID_JSON, f"the body is not UTF-8 text (byte {exc.start})"
        ) from None
    if not text.strip():
        raise ApiError(ErrorCode.INVALID_JSON, "the body is empty; send a JSON object")
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ApiError(
            ErrorCode.INVALID_JSON,
            f"the body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
        ) from None
    except ValueError as exc:
        raise ApiError(ErrorCode.INVALID_JSON, f"the body is not valid JSON: {exc}") from None
    except RecursionError:  # deeper than the stack holds
        raise ApiError(ErrorCode.INVALID_JSON, _TOO_DEEP) from None
    # whatever stack the parser had, nothing deeper than the bound goes on to code
    # that recurses (a check, a converter, json.dumps)
    if nested_deeper(value, MAX_JSON_DEPTH):
        raise ApiError(ErrorCode.INVALID_JSON, _TOO_DEEP)
    return value
