"""`testing.replay`: run the current code of a flow against an exported journal, offline.

The export (`Client.export`) seeds a private in-process store (a fresh
``memory://``, never shown to the caller) with the run and its journal, and
one activation executes the flow on it, as a worker would, against a clock
frozen at the moment the recorded run stopped (so a wait's deadline or a
retry's backoff is not due). Every recorded outcome is delivered from the
journal; the first step call the journal has no outcome for is stopped
before its body runs (an interceptor, like the kit's crash injection), so
nothing of the flow's side effects happens. A call the journal disagrees with
raises the engine's own `NonDeterminismError`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import cattrs

from sdk._core._journal import Journal, Record, State
from sdk._core._serde import converter as records
from sdk._core._serde import dumps, loads
from sdk._core._types import ErrorInfo, EventType, RunStatus
from sdk._core._values import Serializer
from sdk.client._export import EXPORT_FORMAT, EXPORT_MARKER
from sdk.engine._activation import Activation
from sdk.engine._engine import Engine
from sdk.errors import InvalidArgument
from sdk.model._flowdef import FlowDef
from sdk.model._intercept import Abandon, Interceptor
from sdk.model._registry import Registry, flow_def_of
from sdk.store import NewRun

__all__ = ["ReplayPoint", "ReplayReport", "load_exports", "replay"]

_OWNER = "steadyflow-replay"
_PARKED = (State.PENDING, State.RETRY)
_WAITING = (RunStatus.WAITING_FOR_SIGNAL, RunStatus.WAITING_FOR_HUMAN)


@attrs.frozen
class ReplayPoint:
    """Where a run stopped: the recorded one, or its replay.

    Attributes:
        status: ``completed``, ``failed``, ``canceled``, a waiting status (parked),
            or ``running`` (a replay that reached calls the journal has no
            outcome for; a recorded run exported mid-activation).
        waiting_on: the journal keys it is parked on (waits, sleeps, retry
            backoffs), in call order.
        result: the result of a completed run, as JSON data.
        error: the error of a failed run.
        live: the calls a replay made that the journal has no record of (it
            stopped at the first step of them, before its body ran), in call order.
    """

    status: RunStatus
    waiting_on: tuple[str, ...] = ()
    result: Any = None
    error: ErrorInfo | None = None
    live: tuple[str, ...] = ()


@attrs.frozen
class ReplayReport:
    """What `replay` found.

    Attributes:
        run_id: the exported run.
        flow: its flow's name.
        replayed: the journal keys whose recorded outcomes the current code
            took (steps, waits, ``now``/``uuid4`` values...), in call order.
        recorded: where the recorded run stopped.
        reached: where the replay stopped.
    """

    run_id: str
    flow: str
    replayed: tuple[str, ...]
    recorded: ReplayPoint
    reached: ReplayPoint

    @property
    def same_point(self) -> bool:
        """The replay stopped where the recorded run did: parked on the same waits,
        or finished with the same result or error."""
        return self.recorded == self.reached


async def replay(
    flow: Callable[..., Any] | Sequence[Callable[..., Any]],
    exported: dict[str, Any],
    *,
    registry: Registry | None = None,
    converter: Serializer | cattrs.Converter | None = None,
) -> ReplayReport:
    """Re-execute the current code of `flow` against an exported run, offline.

    No store, no worker, no network: the run is replayed in-process from
    `exported` (`Client.export`, or ``json.load`` of a file it was saved to).
    No step body runs: the replay stops at the first step call the journal
    has no outcome for (`ReplayPoint.live`).

    Args:
        flow: the ``@flow`` function, or several (the one of the export's flow
            name is used).
        exported: the export.
        registry: where child flows and queues are looked up (default
            `sdk.Registry.default()`).
        converter: the `sdk.Serializer` (or cattrs converter) the workers use.

    Returns:
        A `ReplayReport`; ``report.same_point`` says whether the current code
        stopped where the recorded run did.

    Raises:
        NonDeterminismError: the current code makes another call than the
            journal recorded (the error shows where), or returns before a
            recorded call.
        InvalidArgument: `exported` is not an export this version reads, or no
            given flow has its flow's name.

    Example::

        report = await replay(checkout, json.loads(Path("run.json").read_text()))
        assert report.same_point, report
    """
    _check_export(exported)
    fd = _pick_flow(flow, exported["record"].get("flow"))
    serializer = Serializer.of(converter)
    record = exported["record"]
    run_id = str(exported["run_id"])
    journal = {str(r["key"]): dumps(r) for r in exported["journal"]}
    try:
        Journal.from_raw(journal)
    except Exception as e:
        raise InvalidArgument(f"replay(): the export's journal cannot be read: {e}") from None
    clock = _FrozenClock(_stopped_at(exported))
    guard = _LiveGuard()

    from stores import open_store  # memory:// needs the test extra, as the kit does

    store = open_store("memory://")
    try:
        new = NewRun(
            run_id, fd.name, record.get("flow_version"), dumps(exported["args"]), "replay",
            "default", 0, record.get("tenant_id"), clock.time(),
            root_run_id=record.get("root_run_id") or run_id,
            retry=dumps(exported["retry"]) if exported.get("retry") is not None else None,
        )  # fmt: skip
        lineage = sorted((k, dumps(v)) for k, v in exported.get("lineage", {}).items())
        await store.derive_run(new, sorted(journal.items()), lineage, EventType.RUN_REPLAYED, "")
        claims = await store.claim(_OWNER, None, 1, clock.time(), 86400.0 * 365)
        if len(claims) != 1 or claims[0].damage is not None:  # the store's own bug, not the user's
            raise RuntimeError(f"replay(): the in-process store did not hand back run {run_id!r}")
        claim = claims[0]
        engine = Engine(
            store=store, clock=clock, owner=_OWNER, inline_backoff_max=0.0,
            interceptors=[guard], serializer=serializer,
            registry=registry if registry is not None else Registry.default(),
        )  # fmt: skip
        act = Activation(
            engine, claim.run, Journal.from_raw(claim.journal), fd, claim.mail, claim.lineage
        )
        # its own task: the activation sets the ambient run context for its flow
        await asyncio.create_task(act.execute())
        # the engine's own error, with its diff: a changed call, or a flow that
        # returned before a recorded one (the cursor keeps the first it made)
        fatal = act.cursor.fatal
        if fatal is not None:
            raise fatal
        stored = await store.get_run(run_id)
        after = await store.read_lineage(run_id)
        if stored is None or after is None:
            raise RuntimeError(f"replay(): the in-process store lost run {run_id!r}")
    finally:
        await store.close()
    recorded_keys = {str(r["key"]): r for r in exported["journal"]}
    calls = act.cursor.calls
    replayed = tuple(
        str(r["key"])
        for r in exported["journal"]
        if isinstance(r.get("pos"), int) and 0 <= r["pos"] < calls
        and r.get("state") in ("ok", "failed", "timeout")
    )  # fmt: skip
    now_journal = sorted(
        (Record.from_json(text) for text in after.journal.values()), key=lambda r: r.pos
    )
    new_keys = [r.key for r in now_journal if r.key not in recorded_keys and r.pos >= 0]
    live = tuple(new_keys + [k for k in guard.stopped if k not in new_keys])
    status = RunStatus.RUNNING if guard.stopped else stored.status
    reached = ReplayPoint(
        status=status,
        waiting_on=tuple(r.key for r in now_journal if r.state in _PARKED)
        if status in _WAITING
        else (),
        result=loads(stored.result) if stored.result and status is RunStatus.COMPLETED else None,
        error=_error_info(stored.error) if stored.error and status is RunStatus.FAILED else None,
        live=live,
    )
    return ReplayReport(run_id, fd.name, replayed, _recorded_point(exported), reached)


def load_exports(folder: str | Path) -> dict[str, dict[str, Any]]:
    """Every export (``*.json``) in `folder`, by file name without ``.json``, sorted.

    For pytest parametrization: one test per exported run, named by its file::

        EXPORTS = load_exports(Path(__file__).parent / "exports")

        @pytest.mark.parametrize("name", EXPORTS)
        async def test_exported_run_replays_on_this_code(name: str) -> None:
            report = await replay([checkout, refund], EXPORTS[name])
            assert report.same_point, report

    Raises `InvalidArgument` for a file that is not an export.
    """
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(Path(folder).glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            _check_export(data)
        except (ValueError, InvalidArgument) as e:
            raise InvalidArgument(f"{path}: not a Steadyflow export ({e})") from None
        out[path.stem] = data
    return out


# -- helpers ------------------------------------------------------------------------


class _FrozenClock:
    """The replay's clock: the moment the recorded run stopped, standing still."""

    def __init__(self, at: float) -> None:
        self._at = at

    def time(self) -> float:
        return self._at

    def now(self) -> datetime:
        return datetime.fromtimestamp(self._at, UTC)


class _LiveGuard(Interceptor):
    """Stops the replay before the body of a step the journal has no outcome for."""

    def __init__(self) -> None:
        self.stopped: list[str] = []

    def step_started(self, run_id: str, key: str, attempt: int) -> None:
        self.stopped.append(key)
        raise Abandon(f"replay: step {key!r} has no recorded outcome")


def _error_info(text: str) -> ErrorInfo:
    return records.structure(loads(text), ErrorInfo)


def _check_export(data: Any) -> None:
    if not isinstance(data, dict) or data.get(EXPORT_MARKER) != "run":
        raise InvalidArgument(
            f"replay(): not a run export (no {EXPORT_MARKER!r} marker); make one with Client.export"
        )
    fmt = data.get("format")
    if not isinstance(fmt, int) or fmt > EXPORT_FORMAT or fmt < 1:
        raise InvalidArgument(
            f"replay(): export format {fmt!r} is not one this version reads (1..{EXPORT_FORMAT})"
        )
    for name, kind in (("record", dict), ("journal", list), ("run_id", str)):
        if not isinstance(data.get(name), kind):
            raise InvalidArgument(f"replay(): the export has no {name!r} ({kind.__name__})")


def _pick_flow(flow: Callable[..., Any] | Sequence[Callable[..., Any]], name: Any) -> FlowDef:
    given = [flow] if callable(flow) else list(flow)
    defs = []
    for f in given:
        fd = flow_def_of(f)
        if fd is None:
            raise InvalidArgument(f"replay(): {f!r} is not a @flow function")
        defs.append(fd)
    for fd in defs:
        if fd.name == name:
            return fd
    raise InvalidArgument(
        f"replay(): the export is a run of flow {name!r}; given {sorted(d.name for d in defs)}"
    )


def _stopped_at(exported: dict[str, Any]) -> float:
    """When the recorded run stopped: its last event (else its creation)."""
    times = [
        float(e["at"]) for e in exported.get("events", ()) if isinstance(e.get("at"), (int, float))
    ]
    if times:
        return max(times)
    created = exported["record"].get("created_at")
    return datetime.fromisoformat(created).timestamp() if isinstance(created, str) else 0.0


def _recorded_point(exported: dict[str, Any]) -> ReplayPoint:
    record = exported["record"]
    status = RunStatus(record["status"])
    if status is RunStatus.REPLAYING or status is RunStatus.PENDING:
        status = RunStatus.RUNNING
    waiting = tuple(
        str(r["key"]) for r in exported["journal"] if r.get("state") in ("pending", "retry")
    )
    error = record.get("error")
    return ReplayPoint(
        status=status,
        waiting_on=waiting if status in _WAITING else (),
        result=record.get("result") if status is RunStatus.COMPLETED else None,
        error=records.structure(error, ErrorInfo)
        if error is not None and status is RunStatus.FAILED
        else None,
    )
