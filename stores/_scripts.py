"""Every Lua script the Redis store runs, by name: ``stores/lua/*.lua``, assembled once.

The scripts are plain Lua files shipped as package data: ``_prelude.lua``
holds the helper definitions, and each other file is one script's body. A
script is sent as the prelude definitions it uses, transitively (Redis runs a
script's whole prelude on every call, ~1 µs a helper), then its body. That is
worked out once per process; only the store's bounds (`StoreLimits`) differ
between stores, and the sources are cached per bounds.

Rules that keep real Redis and fakeredis in agreement (fakeredis's Lua is not
Redis's: its cjson differs on empty tables, big numbers and null):
- JSON stays opaque: records and payloads are stored as strings, and a
  payload is spliced into a record by concatenation, never decoded;
- numbers arrive as strings and are compared with ``tonumber``; a number that
  goes back into Redis is either an ARGV string or formatted with ``%.0f``;
- no deadline comes from ``TIME`` or a key TTL: ``now`` is always an argument;
- ``ARGV[1]`` is the partition base (``<prefix>:{<tag>}:``, see
  `stores._keys.partition_tags`); every key a script touches shares its hash tag.

**Redis Cluster, slot moves.** Scripts build their keys in Lua from the base;
``KEYS`` name one key of the slot, for routing. While a slot moves between
masters (resharding), Redis checks only the declared keys before a script
runs, so a script touching an undeclared key that already moved aborts after
its first writes, and on the new master it reads a key still on the old one
as missing. Declaring every key cannot close that: a claim, a tick, a
delivery find run ids, queues, mailboxes and intents only as they run; and
pre-reading them before the first write fails on the old master but not on
the new one (with ``ASKING``, a missing key is served as missing there). So
on a cluster every call also declares a probe key of its slot that nothing
writes (`stores._migrating`): while the slot moves the probe is missing
everywhere and Redis refuses the call (``TRYAGAIN``) before the script runs;
the store retries it until the move ends. Scripts run whole on the slot's
one owner or not at all, and need no guard of their own. Decided on cost:
nothing runs in Lua for it, so a single Redis pays nothing (its path is
unchanged: no probe, ``KEYS`` never checked; ``bench.step_overhead`` has
nothing new to measure), and on a cluster the probe costs Redis a key slot
computation (keys are looked up only while their slot moves): a script call
on a local 3-master cluster took 127-278 µs with it against 152-362 µs
before, noise on a shared 2-vCPU VM (the call now goes straight to the slot's
owner). A pre-reading guard in Lua would have cost every call on every store.
The price: operations on a partition wait while its slot moves (more
partitions, smaller slots, shorter waits; see docs/operations.md).

Error replies are tables ``{'err', code, a, b}``; the store maps the codes to
`sdk.store.Refused` (the engine raises its errors from those).

What the files may use beyond Lua (filled in here):
- ``K.name``: the key suffix ``name`` of `stores._keys.SUFFIX`, as a literal;
- ``@EVENTS_MAX@``, ``@TRAIL_MAX@``, ``@MESSAGE_MAX@``, ``@PENDING_MAX@``,
  ``@PENDING_BYTES_MAX@``: the store's bounds (`StoreLimits`: ``max_events_per_run``,
  ``max_refusals_per_run``, ``max_message_bytes``, ``max_pending_messages``,
  ``max_pending_bytes``);
- ``@CLUSTER@``: ``true`` when the store runs on Redis Cluster, else ``false``;
- the prelude's ``-- @generated`` line: ``ALLOWED`` (the transition table),
  ``TERMINAL``, ``RUN_KEYS``, ``MAX_PRIORITY``, ``AUDIT_MAX`` and ``is_audit`` (which
  events of a log are audit events: `sdk.store.AUDIT_EVENTS`), generated from their
  one Python source;
- a body line ``--@splice NAME``: NAME's body up to its final ``return 1``.

A file's leading comment lines document it and are not sent.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType

from sdk.store import AUDIT_EVENTS, TRANSITIONS, EventType, RunStatus, StoreLimits
from sdk.store._audit import MAX_AUDIT_ENTRIES
from sdk.store._records import MAX_PRIORITY
from stores._keys import RUN_SUFFIXES, SUFFIX

__all__ = ["build_scripts", "lua_files"]

_GENERATED = re.compile(r"^-- @generated\b.*\n", re.M)
_SPLICE = re.compile(r"^--@splice (\w+)\n", re.M)
_DEFINITION = re.compile(r"local function (\w+)|local (\w+) =")
_WORD = re.compile(r"(?<![\w.])\w+")  # a name, not a field (t.name) nor part of a word
_COMMENT = re.compile(r"--[^\n]*")


def _lua_table() -> str:
    allowed = ", ".join(
        f"{src.value}={{{', '.join(f'{dst.value}=true' for dst in sorted(dsts))}}}"
        for src, dsts in TRANSITIONS.items()
    )
    terminal = ", ".join(f"{s.value}=true" for s in RunStatus if s.is_terminal)
    run_keys = ", ".join(repr(SUFFIX[name]) for name in RUN_SUFFIXES)
    # comparisons, not a table: a table literal would be built at every call
    audited = " or ".join(f"t == '{t.value}'" for t in sorted(AUDIT_EVENTS))
    return (
        f"local ALLOWED = {{{allowed}}}\n"
        f"local TERMINAL = {{{terminal}}}\n"
        f"local RUN_KEYS = {{{run_keys}}}\n"
        f"local MAX_PRIORITY = {MAX_PRIORITY}\n"
        f"local AUDIT_MAX = {MAX_AUDIT_ENTRIES}\n"
        "-- Whether an event of type t with data `data` (JSON) is an audit event:\n"
        "-- sdk.store.AUDIT_EVENTS, and a signal.received of a decision.\n"
        f"local function is_audit(t, data)\n  return {audited}\n"
        f"    or (t == '{EventType.SIGNAL_RECEIVED.value}' "
        "and string.find(data, '\"decision\":', 1, true) ~= nil)\nend\n"
    )


def lua_files() -> dict[str, str]:
    """File name -> text of every file in ``stores/lua`` (as shipped)."""
    folder = resources.files("stores") / "lua"
    return {
        f.name: f.read_text(encoding="utf-8") for f in folder.iterdir() if f.name.endswith(".lua")
    }


def _code(text: str) -> str:
    """`text` without its leading comment lines (and the blank lines after them)."""
    lines = text.split("\n")
    i = 0
    while i < len(lines) and lines[i].startswith("--"):
        i += 1
    if i:
        while i < len(lines) and not lines[i].strip():
            i += 1
    return "\n".join(lines[i:])


def _prelude_blocks(prelude: str) -> list[tuple[str, str]]:
    """The prelude's top-level definitions, in order: (name, text with its comments)."""
    blocks: list[tuple[str, str]] = []
    name: str | None = None
    lines: list[str] = []
    comments: list[str] = []
    for line in prelude.split("\n"):
        match = _DEFINITION.match(line)
        if match:
            if name is not None:
                blocks.append((name, "\n".join(lines)))
            name = match.group(1) or match.group(2)
            lines, comments = [*comments, line], []
        elif line.startswith("--"):
            comments.append(line)  # a top-level comment introduces the next definition
        else:
            lines.append(line)
    if name is not None:
        blocks.append((name, "\n".join(lines)))
    return blocks


def _minimal_prelude(blocks: list[tuple[str, str]], body: str) -> str:
    """Only the definitions `body` needs, transitively: Redis runs a script's
    whole prelude on every call (~1 µs a helper), so unused ones cost time."""
    names = [n for n, _ in blocks]
    text = dict(blocks)
    known = set(names)

    def used(src: str) -> set[str]:
        # a word in a comment is no dependency
        return known.intersection(_WORD.findall(_COMMENT.sub("", src)))

    keep = {"P", "unpack"} | used(body)
    todo = list(keep)
    while todo:
        for dep in used(text[todo.pop()]) - keep:
            keep.add(dep)
            todo.append(dep)
    return "\n".join(text[n] for n in names if n in keep) + "\n"


def _key_suffixes(src: str) -> str:
    """``K.name`` -> the key suffix itself (a table of them would be built per call)."""
    return re.sub(r"(?<![\w.])K\.(\w+)", lambda m: repr(SUFFIX[m.group(1)]), src)


@functools.cache
def _templates() -> Mapping[str, str]:
    """name -> source with ``@EVENTS_MAX@`` still in it; built once per process."""
    files = lua_files()
    prelude = _GENERATED.sub(lambda _: _lua_table(), _code(files.pop("_prelude.lua")), count=1)
    bodies = {name.removesuffix(".lua"): "\n" + _code(text) for name, text in files.items()}

    def spliced(match: re.Match[str]) -> str:
        body = bodies[match.group(1)].rstrip()
        if not body.endswith("return 1"):
            raise ValueError(f"--@splice {match.group(1)}: its body must end in `return 1`")
        return body[: -len("return 1")].lstrip("\n")

    bodies = {name: _SPLICE.sub(spliced, body) for name, body in bodies.items()}
    blocks = _prelude_blocks(prelude)
    # The first line names the script: Redis quotes only its SHA in errors
    # (stores._migrating names the operation a slot move held up).
    return {
        name: f"-- steadyflow:{name}\n" + _key_suffixes(_minimal_prelude(blocks, body) + body)
        for name, body in sorted(bodies.items())
    }


#: The placeholders of a store's options (`StoreLimits`) in the sources.
_OPTIONS = {
    "@EVENTS_MAX@": "max_events_per_run",
    "@TRAIL_MAX@": "max_refusals_per_run",
    "@MESSAGE_MAX@": "max_message_bytes",
    "@PENDING_MAX@": "max_pending_messages",
    "@PENDING_BYTES_MAX@": "max_pending_bytes",
}


@functools.cache
def build_scripts(
    limits: StoreLimits = StoreLimits(), *, cluster: bool = False
) -> Mapping[str, str]:
    """name -> Lua source (the prelude definitions it uses + body), with the
    store's bounds (`limits`) and ``CLUSTER`` (whether the store runs on Redis
    Cluster). Cached: the same settings give the same (read-only) mapping."""
    values = {k: str(int(getattr(limits, name))) for k, name in _OPTIONS.items()}
    values["@CLUSTER@"] = "true" if cluster else "false"
    out = {}
    for name, src in _templates().items():
        for placeholder, value in values.items():
            src = src.replace(placeholder, value)
        out[name] = src
    return MappingProxyType(out)
