"""Argument checks at the public boundary, made before anything is written.

Every public call checks its ids, names, texts, numbers and options here and
raises `InvalidArgument` (a `ValueError` and a `TypeError`) that names the
argument and shows its value, cut short. Values (arguments, results,
payloads) are the `Serializer`'s to check. The limits are documented in
docs/api.md ("Limits").
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from sdk._core._clock import seconds
from sdk._core._limits import short
from sdk._core._types import RunOptions, RunStatus, Versions, WaitKind
from sdk.errors import InvalidArgument

__all__ = [
    "MAX_ID",
    "MAX_PAGE",
    "MAX_TEXT",
    "PRIORITY_RANGE",
    "RESERVED_ENDINGS",
    "check_count",
    "check_id",
    "check_int",
    "check_name",
    "check_new_run_id",
    "check_optional_id",
    "check_options",
    "check_seconds",
    "check_status",
    "check_str_map",
    "check_text",
    "check_timeout",
    "check_wait_kind",
    "show",
]

#: Longest run id, flow / step / signal / queue name, tenant id, dedup id, actor.
MAX_ID = 256
#: Longest free text (a cancel reason, a decision's reason).
MAX_TEXT = 4096
PRIORITY_RANGE = range(-4095, 4096)
#: Most items one read asks for (`list_runs`, `events`).
MAX_PAGE = 100_000

# C0 and C1 control characters and DEL: not in an id (logs, keys, command lines).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_SHOW = 80


def show(value: Any, limit: int = _SHOW) -> str:
    """`value` for a message, cut to `limit` characters (`sdk._core._limits.short`: a
    10 MB argument, a huge int or a deep list makes a short message)."""
    return short(value, limit)


def _type_name(value: Any) -> str:
    return type(value).__qualname__


def _unicode_problem(text: str) -> str | None:
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate ({text[exc.start]!r}) at index {exc.start}"
    return None


def check_id(value: Any, what: str) -> str:
    """An id or a name: a non-empty string of at most `MAX_ID` characters, valid
    Unicode (no lone surrogate) and without control characters."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a str, got a {_type_name(value)}: {show(value)}")
    if not value or len(value) > MAX_ID:
        raise InvalidArgument(
            f"{what} must be a non-empty string of at most {MAX_ID} characters, "
            f"got {len(value)} characters: {show(value)}"
        )
    if not value.isprintable():
        control = _CONTROL.search(value)
        if control is not None:
            raise InvalidArgument(
                f"{what} must not hold control characters ({control.group()!r} at index "
                f"{control.start()}): {show(value)}"
            )
    problem = _unicode_problem(value)
    if problem is not None:
        raise InvalidArgument(f"{what} holds {problem}, which cannot be stored: {show(value)}")
    return value


def check_name(value: Any, what: str) -> str:
    """A signal or wait name: an id that does not start with ``~`` (reserved for
    Steadyflow's own mailboxes, such as the events of `wait_for_event`)."""
    name = check_id(value, what)
    if name.startswith("~"):
        raise InvalidArgument(f"{what} must not start with '~' (reserved): {show(name)}")
    return name


_ARCHIVED = re.compile(r"~g[0-9]+$")

#: Endings a new run id may not have: the paths of a run's parts in the HTTP API
#: (``GET /v1/runs/{run_id}/events``...) and the console (``/ui/runs/{run_id}/live``)
#: would shadow the path of such a run itself (a run id may hold "/").
#: tests/test_http_boundary.py checks this against the route tables.
RESERVED_ENDINGS = ("/checkpoints", "/events", "/export", "/live", "/timeline", "/waits")


def check_new_run_id(value: Any, what: str) -> str:
    """The id of a run to create: an id that does not end in ``~g<n>`` (the ids of
    the generations a `continue_as_new` run archives) nor in one of
    `RESERVED_ENDINGS`."""
    run_id = check_id(value, what)
    if _ARCHIVED.search(run_id):
        raise InvalidArgument(
            f"{what} must not end in '~g<number>' (reserved for archived generations of "
            f"continue_as_new): {show(run_id)}"
        )
    if run_id.endswith(RESERVED_ENDINGS):
        raise InvalidArgument(
            f"{what} must not end in {', '.join(map(repr, RESERVED_ENDINGS))} (the HTTP API's "
            f"and the console's paths of a run's parts would shadow the run): {show(run_id)}"
        )
    return run_id


def check_optional_id(value: Any, what: str) -> str | None:
    """`check_id`, or None."""
    return None if value is None else check_id(value, what)


def check_text(value: Any, what: str, *, optional: bool = False) -> str | None:
    """Free text (a reason): a string of at most `MAX_TEXT` characters, valid Unicode."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        wanted = "a str or None" if optional else "a str"
        raise InvalidArgument(f"{what} must be {wanted}, got a {_type_name(value)}: {show(value)}")
    if len(value) > MAX_TEXT:
        raise InvalidArgument(
            f"{what} must be at most {MAX_TEXT} characters, got {len(value)}: {show(value)}"
        )
    problem = _unicode_problem(value)
    if problem is not None:
        raise InvalidArgument(f"{what} holds {problem}, which cannot be stored: {show(value)}")
    return value


def check_int(value: Any, what: str, allowed: range) -> int:
    """An int (not a bool) in `allowed`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an int, got a {_type_name(value)}: {show(value)}")
    if value not in allowed:
        raise InvalidArgument(
            f"{what} must be in {allowed.start}..{allowed.stop - 1}, got {show(value)}"
        )
    return value


def check_count(value: Any, what: str) -> int:
    """How many items a read returns: 1..`MAX_PAGE`."""
    return check_int(value, what, range(1, MAX_PAGE + 1))


def check_seconds(value: Any, what: str, *, positive: bool = False) -> float:
    """A finite number of seconds, not negative (above zero with `positive`)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{what} must be a number of seconds, got a {_type_name(value)}: "
                        f"{show(value)}")  # fmt: skip
    try:
        secs = float(value)
    except OverflowError:
        raise InvalidArgument(f"{what} is out of range: {show(value)}") from None
    if not math.isfinite(secs) or secs < 0 or (positive and secs == 0):
        bound = "above 0" if positive else "0 or more"
        raise InvalidArgument(
            f"{what} must be a finite number of seconds {bound}, got {show(value)}"
        )
    return secs


def check_timeout(value: float | timedelta, what: str) -> float:
    """A timeout: seconds or a `timedelta`, finite and above 0 (at most `MAX_SECONDS`)."""
    secs = seconds(value, what)
    if secs <= 0:
        raise InvalidArgument(f"{what} must be above 0 seconds, got {show(value)}")
    return secs


def check_str_map(value: Any, what: str) -> Mapping[str, str]:
    """A mapping of ids to ids (`Versions.bindings`)."""
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"{what} must be a mapping of str to str, got {show(value)}")
    for key, item in value.items():
        check_id(key, f"a key of {what}")
        check_id(item, f"{what}[{show(key, 40)}]")
    return value


def check_status(status: Any) -> RunStatus:
    """A `RunStatus` or its string value."""
    try:
        # not a str: refused before the enum's own error, which reprs the whole value
        return RunStatus(status if isinstance(status, str) else "")
    except ValueError:
        known = ", ".join(s.value for s in RunStatus)
        raise InvalidArgument(f"status must be one of {known}; got {show(status)}") from None


def check_wait_kind(kind: Any, what: str = "waiting_on") -> WaitKind:
    """A `WaitKind` or its string value."""
    try:
        return WaitKind(kind if isinstance(kind, str) else "")
    except ValueError:
        known = ", ".join(k.value for k in WaitKind)
        raise InvalidArgument(f"{what} must be one of {known}; got {show(kind)}") from None


def check_options(options: Any) -> RunOptions:
    """`RunOptions` whose every field can be stored (ids, a `Versions`)."""
    if options is None:
        return RunOptions()
    if not isinstance(options, RunOptions):
        raise InvalidArgument(f"options must be a RunOptions, got {show(options)}")
    for field in ("thread_id", "trace_id", "environment", "policy_snapshot_id"):
        check_optional_id(getattr(options, field), f"options.{field}")
    versions = options.versions
    if not isinstance(versions, Versions):
        raise InvalidArgument(f"options.versions must be a Versions, got {show(versions)}")
    for i, capability in enumerate(versions.capabilities):
        check_id(capability, f"options.versions.capabilities[{i}]")
    check_str_map(versions.bindings, "options.versions.bindings")
    check_optional_id(versions.registry_ref, "options.versions.registry_ref")
    return options
