"""What a replay or fork does with the source run's records, its child runs included
(docs/lifecycle.md, "Replay and fork").

A new run gets the source's final records up to the checkpoint (its journal:
replayed as they are) and its later results (its lineage: reused by the calls
that make them again, under their replay policies). A child run the source
started is a call too, with a result its parent recorded; `children` says what
the new run does with it (`CHILDREN`):

- ``"reuse"`` (default): a child that completed is not run again. Its start
  is reused (the new run's handle is the source's child) and its recorded
  outcome waits in the new run's mailbox for ``handle.result()``. A child that
  did not complete (it failed, was canceled, or has not ended) is *replayed*.
- ``"replay"``: every child is replayed: a new child of the new run, derived
  from the source's child (its lineage: the child's results, reused by its
  steps under their policies; its own children under the same option).
- ``"rerun"``: every child starts afresh, as a new run would.

After the checkpoint, the new run's lineage entry for the ``~child:...`` call
says what to do (`SourceChild`), decided when the new run is made (a reused
child's outcome is put in its mailbox then); the new run acts on it when it
makes the call (a replayed child is created then: `copy_child`). Before the
checkpoint, a child whose outcome the source had not recorded by then (its
handle is in the journal, its result is not) cannot be waited for, as its end
is reported to the source: a completed child's outcome is put in the new
run's mailbox (reuse), or the journal's handle is rewritten to name a copy of
the child, created right after the new run (`Copy.children`; a caller that
dies in between leaves the new run waiting for a child that does not exist).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import attrs

from sdk._core._journal import Kind, Record, State
from sdk._core._keys import child_run_id
from sdk._core._serde import converter, dumps, loads
from sdk._core._types import ErrorInfo, EventType, RunStatus
from sdk.store import Lineage, Mailbox, NewRun, Refusal

if TYPE_CHECKING:
    from sdk.model._registry import Registry
    from sdk.store import Refused, Store, StoredRun

__all__ = [
    "CHILDREN",
    "ChildCopy",
    "Copy",
    "SourceChild",
    "child_mailbox",
    "copy_child",
    "outcome_payload",
    "plan_copy",
]

#: What a replay or fork may do with the source's child runs (the first: the default).
CHILDREN = ("reuse", "replay", "rerun")
#: Reused by a replayed or forked run when recorded after its checkpoint (a patch: the same answer).
_REUSABLE = (Kind.STEP, Kind.NOW, Kind.UUID, Kind.PATCH)
_FINAL = (State.OK, State.FAILED, State.TIMEOUT)
_CHILD_KEY = re.compile(r"~child:(.+)#(\d+)")


def child_mailbox(child_id: str) -> Mailbox:
    """The parent's mailbox that a child's end (its outcome) is delivered to."""
    return Mailbox(f"~child:{child_id}")


def outcome_payload(stored: StoredRun | None, child_id: str) -> dict[str, Any]:
    """What the parent's ``handle.result()`` receives: the child's status and result
    or error, and the child's id (so a copy of the parent can tell whose it is)."""
    if stored is None:
        error = ErrorInfo("sdk.errors:RunNotFound", f"child run {child_id!r} was deleted")
        return {"status": "failed", "error": converter.unstructure(error), "child_run_id": child_id}
    out: dict[str, Any] = {"status": stored.status.value, "reason": stored.reason}
    if stored.result is not None:
        out["result"] = loads(stored.result)
        out["result_type"] = stored.result_type
    if stored.error is not None:
        out["error"] = loads(stored.error)
    out["child_run_id"] = child_id
    return out


@attrs.frozen
class SourceChild:
    """What a replayed or forked run does at a ``start_child`` call its source made
    (its lineage entry): `how` (``"reuse"``, ``"replay"`` or ``"rerun"``) with the
    source's child `run_id`; `children`: the option for that child's own children;
    `args_hash`: what a reuse requires of the call's arguments (None: no check)."""

    how: str
    run_id: str
    children: str = CHILDREN[0]
    args_hash: str | None = None

    @classmethod
    def of(cls, rec: Record) -> SourceChild | None:
        """The entry a lineage record holds; None when it holds none."""
        value = rec.value
        if rec.kind is not Kind.CHILD or not isinstance(value, dict):
            return None
        for how in CHILDREN:
            child = value.get(how)
            if isinstance(child, str):
                children = value.get("children")
                wanted = value.get("hash")
                return cls(
                    how, child, children if children in CHILDREN else CHILDREN[0],
                    wanted if isinstance(wanted, str) and how == "reuse" else None,
                )  # fmt: skip
        return None


@attrs.frozen
class ChildCopy:
    """A child the new run's journal names (started before the checkpoint, its
    outcome not recorded by then) that is created right after the new run: a copy
    of `source` with id `run_id`, replayed (`replay`) or started afresh."""

    source: StoredRun
    run_id: str
    replay: bool
    children: str


@attrs.frozen
class Copy:
    """A new run's records: its journal, its lineage, the mail it starts with (the
    outcomes of reused children) and the children to create after it."""

    seed: list[tuple[str, str]]
    lineage: dict[str, str]
    mail: list[tuple[Mailbox, str, str]]
    children: list[ChildCopy]


async def plan_copy(
    store: Store,
    source: Lineage,
    upto: int,
    dropped: str | None,
    children: str,
    new_run_id: str,
) -> Copy:
    """The records of a run derived from `source` at checkpoint write number `upto`
    (`dropped`: a failure left out), and what happens to the source's children
    (`children`: one of `CHILDREN`). Reads each child run of the source."""
    seed: list[tuple[str, str]] = []
    lineage: dict[str, str] = {}
    starts: dict[str, tuple[Record, bool]] = {}  # child starts: key -> record, seeded
    for key, raw in source.lineage.items():  # the source's own, still unused
        rec = Record.from_json(raw)
        if rec.kind is Kind.CHILD:
            starts[key] = (rec, False)
        else:
            lineage[key] = raw
    for key, raw in source.journal.items():
        if key == dropped:
            continue
        rec = Record.from_json(raw)
        seeded = source.written.get(key, 0) <= upto
        if rec.kind is Kind.CHILD and rec.state is State.OK:
            starts[key] = (rec, seeded)  # (what the source did wins over its lineage)
            if seeded:
                seed.append((key, raw))
        elif seeded:
            # before the checkpoint: replayed as it is, except what waits again
            if rec.state in _FINAL:
                seed.append((key, raw))
        elif rec.state is State.OK and rec.kind in _REUSABLE:
            lineage[key] = raw
    for key, _ in seed:
        lineage.pop(key, None)
    mail: list[tuple[Mailbox, str, str]] = []
    copies: list[ChildCopy] = []
    awaited = _results_seeded(seed)
    for key, (rec, seeded) in starts.items():
        entry = SourceChild.of(rec)
        child = entry.run_id if entry is not None else str(rec.value)
        if seeded and _result_in(awaited, key, child):
            continue  # its outcome is in the journal: replayed as recorded
        stored = await store.get_run(child) or await store.get_tombstone(child)
        done = stored is not None and stored.status is RunStatus.COMPLETED
        if stored is None:  # deleted, with its journal
            if seeded:  # what its parent would have been told
                mail.append(_mail(None, child))
            else:  # the call has its arguments: started afresh
                lineage[key] = _entry(rec, "rerun", child)
        elif children == "reuse" and done:
            mail.append(_mail(stored, child))
            if not seeded:
                lineage[key] = _entry(rec, "reuse", child, stored.args_hash)
        elif seeded:
            copy = ChildCopy(stored, child_run_id(new_run_id, key), children != "rerun", children)
            copies.append(copy)
            at = next(i for i, (k, _) in enumerate(seed) if k == key)
            seed[at] = (key, attrs.evolve(rec, value=copy.run_id).to_json())
        else:
            how = "rerun" if children == "rerun" else "replay"
            lineage[key] = _entry(rec, how, child, children=children)
    return Copy(seed, lineage, mail, copies)


def _mail(stored: StoredRun | None, child: str) -> tuple[Mailbox, str, str]:
    return child_mailbox(child), dumps(outcome_payload(stored, child)), f"~child:{child}"


def _entry(
    rec: Record, how: str, child: str, args_hash: str | None = None, children: str = "reuse"
) -> str:
    value: dict[str, Any] = {how: child, "children": children}
    if args_hash is not None:
        value["hash"] = args_hash
    return attrs.evolve(rec, value=value).to_json()


def _results_seeded(seed: list[tuple[str, str]]) -> tuple[set[str], set[str]]:
    """The children whose outcome the seeded journal holds: their ids (recorded in
    the outcome since this version), and the keys of outcomes recorded without one."""
    ids: set[str] = set()
    keys: set[str] = set()
    for key, raw in seed:
        if not key.startswith("~result:"):
            continue
        value = Record.from_json(raw).value
        child = value.get("child_run_id") if isinstance(value, dict) else None
        if isinstance(child, str):
            ids.add(child)
        else:
            keys.add(key)
    return ids, keys


def _result_in(awaited: tuple[set[str], set[str]], key: str, child: str) -> bool:
    """Whether the seeded journal holds the outcome of `child`, started at `key`. An
    outcome recorded without the child's id is matched by flow and count (the n-th
    ``result()`` of a flow's children awaits its n-th child: true unless handles
    were awaited out of the order they were started)."""
    ids, keys = awaited
    if child in ids:
        return True
    m = _CHILD_KEY.fullmatch(key)
    return m is not None and f"~result:{m.group(1)}#{m.group(2)}" in keys


async def copy_child(
    store: Store,
    new: NewRun,
    source: StoredRun,
    children: str,
    registry: Registry | None = None,
) -> Refused | bool | None:
    """Create `new` (a child of the new run) as a replay of the source's child
    `source`: its lineage holds the child's results, reused by its calls under
    their replay policies (its children under `children`). A child that never
    started is started afresh. None when created; True when it already was;
    else the store's refusal."""
    found = await store.read_lineage(source.run_id)
    if found is None or not found.checkpoints:  # deleted meanwhile, or never started
        out = await store.create_run(new, _created(new))
        return None if out.created else True
    first = found.checkpoints[0]
    copy = await plan_copy(store, found, first.seq, None, children, new.run_id)
    derived = attrs.evolve(
        new,
        source_run_id=source.run_id,
        source_checkpoint_id=str(first.checkpoint_id),
        root_run_id=source.root_run_id or source.run_id,
    )
    event: dict[str, Any] = {
        "source_run_id": source.run_id, "source_checkpoint_id": str(first.checkpoint_id),
        "actor": None, "options": [], "parent_run_id": new.parent_run_id,
    }  # fmt: skip
    refused = await store.derive_run(
        derived, copy.seed, sorted(copy.lineage.items()), EventType.RUN_REPLAYED, dumps(event),
        copy.mail,
    )  # fmt: skip
    if refused is not None and refused.why is Refusal.EXISTS:
        return True  # created before (a crash before its parent recorded it)
    if refused is None:
        await create_copies(store, copy.children, derived, registry)
    return refused


async def create_copies(
    store: Store, copies: list[ChildCopy], parent: NewRun, registry: Registry | None
) -> None:
    """Create the children a new run's journal names (`Copy.children`), after it."""
    for copy in copies:
        new = seeded_child(copy, parent, registry)
        if copy.replay:
            await copy_child(store, new, copy.source, copy.children, registry)
        else:
            await store.create_run(new, _created(new))


def seeded_child(copy: ChildCopy, parent: NewRun, registry: Registry | None) -> NewRun:
    """The run of a child copy: the source child's flow, arguments and options, as a
    child of `parent` (its trace, its tree)."""
    src = copy.source
    fd = registry.find_flow(src.flow) if registry is not None else None
    return NewRun(
        copy.run_id, src.flow, src.flow_version, src.args, src.args_hash or "", src.queue,
        src.priority, src.tenant_id, parent.created_at, thread_id=src.thread_id,
        trace_id=parent.trace_id or parent.run_id, environment=src.environment,
        versions=src.versions, policy_snapshot_id=src.policy_snapshot_id, retry=src.retry,
        retention=fd.retention if fd is not None else None,
        timeout=fd.timeout if fd is not None else None,
        parent_run_id=parent.run_id, tree_root_run_id=parent.tree_root_run_id or parent.run_id,
        abandon=src.abandon, concurrency_key=src.concurrency_key,
    )  # fmt: skip


def _created(new: NewRun) -> str:
    return dumps({"flow": new.flow, "queue": new.queue, "priority": new.priority,
                  "parent_run_id": new.parent_run_id})  # fmt: skip
