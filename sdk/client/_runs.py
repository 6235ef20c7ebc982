"""Between the store's records and the SDK's: `RunRecord`s, and refusals as errors."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from sdk._core import _waiting
from sdk._core._clock import EARLIEST, LATEST, in_range
from sdk._core._serde import converter, dumps, loads, type_path
from sdk._core._types import ErrorInfo, Reason, RunRecord, RunStatus, Versions, WaitingOn
from sdk.errors import (
    CorruptRecord,
    Forbidden,
    IdempotencyConflict,
    InvalidTransition,
    LeaseLost,
    MailboxFull,
    NotWaiting,
    PayloadTooLarge,
    RunNotFound,
    SteadyflowError,
)
from sdk.store import Refusal, Refused, StoredRun

if TYPE_CHECKING:
    from sdk.store import Store

__all__ = [
    "DEFAULT_CANCEL_GRACE",
    "cancel_run",
    "corrupt_error",
    "error_info",
    "raise_refused",
    "refusal_error",
    "run_record",
    "timestamp",
    "utc",
]

T = TypeVar("T")

_WAITING = (RunStatus.WAITING_FOR_SIGNAL, RunStatus.WAITING_FOR_HUMAN)


def utc(value: float) -> datetime:
    """Epoch seconds as an aware datetime (UTC)."""
    return datetime.fromtimestamp(value, UTC)


def timestamp(value: float | None) -> datetime | None:
    return None if value is None else utc(value)


def error_info(text: str | None) -> ErrorInfo | None:
    """The `ErrorInfo` a run's (or an intent's) error JSON stands for."""
    return converter.structure(loads(text), ErrorInfo) if text else None


def run_record(stored: StoredRun) -> RunRecord:
    """The public record of a stored run (its result as JSON data).

    A format-1 record reads with the defaults of the fields format 2 added:
    its trace id and root run id are its own id.

    Never raises for what the store holds: a field that cannot be read (the
    store's `StoredRun.damage`, JSON of the result, error or versions that does
    not decode, a time out of the range `instant` takes) is left at its default
    (None; the epoch for `created_at`) and named in `RunRecord.damage`
    (see there), so that listing, reading, cancelling and deleting a damaged
    run still work.
    """
    problems: list[str] = []

    def read(name: str, text: str | None, decode: Callable[[str], T], default: T) -> T:
        if text is None:
            return default
        try:
            return decode(text)
        except Exception as exc:  # any JSON or structure error: the field is damaged
            problems.append(f"field {name!r} cannot be read ({type(exc).__name__}: {exc})"[:300])
            return default

    def when(name: str, value: float | None) -> datetime | None:
        # a time no reader could show (written by hand, or before issue 30's checks)
        if value is None or in_range(value):
            return timestamp(value)
        problems.append(
            f"field {name!r} is out of range ({value!r} seconds since the epoch; times "
            f"are from {EARLIEST.isoformat()} to {LATEST.isoformat()})"
        )
        return None

    created_at = when("created_at", stored.created_at) or utc(0.0)
    started_at = when("started_at", stored.started_at)
    finished_at = when("finished_at", stored.finished_at)
    start_at = when("start_at", stored.start_at)
    lease_expires_at = when("lease_expires_at", stored.lease_expires_at)
    result = read("result", stored.result, loads, None)
    error = read("error", stored.error, error_info, None)
    versions = read(
        "versions", stored.versions, lambda t: converter.structure(loads(t), Versions), Versions()
    )
    damage = stored.damage
    if problems:
        joined = "; ".join(problems)
        where = f"the record of run {stored.run_id!r}"
        damage = f"{damage}; {joined}" if damage else f"{where}: {joined}"
    reason = stored.reason
    if damage is not None and stored.status is RunStatus.FAILED and error is None:
        error = ErrorInfo(type_path(CorruptRecord), damage, None, Reason.CORRUPT_RECORD)
        reason = reason or Reason.CORRUPT_RECORD
    return RunRecord(
        run_id=stored.run_id,
        flow=stored.flow,
        status=stored.status,
        created_at=created_at,
        queue=stored.queue,
        priority=stored.priority,
        flow_version=stored.flow_version,
        tenant_id=stored.tenant_id,
        started_at=started_at,
        finished_at=finished_at,
        current_step_id=stored.current_step,
        result=result,
        error=error,
        reason=reason,
        recoveries=stored.recoveries,
        thread_id=stored.thread_id,
        trace_id=stored.trace_id or stored.run_id,
        environment=stored.environment,
        versions=versions,
        policy_snapshot_id=stored.policy_snapshot_id,
        checkpoint_head=str(stored.checkpoint_head) if stored.checkpoint_head else None,
        resume_from_checkpoint_id=(
            str(stored.resume_from_checkpoint) if stored.resume_from_checkpoint else None
        ),
        source_run_id=stored.source_run_id,
        source_checkpoint_id=stored.source_checkpoint_id,
        root_run_id=stored.root_run_id or stored.run_id,
        parent_run_id=stored.parent_run_id,
        tree_root_run_id=stored.tree_root_run_id,
        schedule_id=stored.schedule_id,
        format_version=stored.format_version,
        damage=damage,
        concurrency_key=stored.concurrency_key,
        start_at=start_at,
        lease_owner=stored.lease_owner,
        lease_expires_at=lease_expires_at,
        waiting_on=_waiting_on(stored),
    )


def _waiting_on(stored: StoredRun) -> tuple[WaitingOn, ...]:
    # only a waiting run waits: a list left by an older store's transition is ignored
    if stored.waiting_on is None or stored.status not in _WAITING:
        return ()
    return _waiting.decode(stored.waiting_on)


def corrupt_error(run_id: str, key: str, detail: str) -> ErrorInfo:
    """The error a run failed for damaged data is recorded with."""
    return ErrorInfo(type_path(CorruptRecord), f"{key}: {detail}", None, Reason.CORRUPT_RECORD)


#: `Client.cancel`'s default grace period: seconds a flow has to clean up.
DEFAULT_CANCEL_GRACE = 30.0


async def cancel_run(
    store: Store, run_id: str, reason: str, now: float, grace: float, said: dict[str, Any]
) -> Refused | None:
    """Cancel `run_id`: a request the flow gets and has `grace` seconds to clean up
    after (0: at once); `said` is the data of its events (reason, actor...)."""
    if grace == 0:
        return await store.cancel(run_id, reason, now, event_data=dumps(said))
    until = now + grace
    return await store.cancel(
        run_id, reason, now, event_data=dumps(said), grace_until=until,
        request_data=dumps({**said, "grace_until": until}),
        forced_data=dumps({**said, "forced": "grace_expired", "grace_until": until}),
        forcing_data=dumps({**said, "forced": "second_cancel"}),
    )  # fmt: skip


def raise_refused(run_id: str, refused: Refused | None, *, what: str = "") -> None:
    """Raise the error a store's refusal means to users; nothing when it did not refuse.

    Args:
        run_id: the run.
        refused: what the store returned.
        what: names the operation, for refusals that need it (a decision's wait
            name for `NotWaiting`).
    """
    if refused is not None:
        raise refusal_error(run_id, refused, what=what)


def refusal_error(run_id: str, refused: Refused, *, what: str = "") -> SteadyflowError:
    """The error a store's refusal means to users."""
    why = refused.why
    status = refused.status
    if why is Refusal.NOT_FOUND:
        return RunNotFound(run_id)
    if why is Refusal.TRANSITION and status is not None:
        return InvalidTransition(run_id, status, refused.requested)
    if why is Refusal.NOT_FINISHED and status is not None:
        return InvalidTransition(run_id, status, None, action="delete")
    if why is Refusal.NOT_WAITING and status is not None:
        return NotWaiting(run_id, status, what or None)
    if why is Refusal.FORBIDDEN:
        return Forbidden(f"{refused.actor!r} may not decide this wait of run {run_id!r}")
    if why is Refusal.EXISTS:
        return IdempotencyConflict(f"run {run_id!r} already exists")
    if why is Refusal.CORRUPT:
        return CorruptRecord(run_id, refused.key or "", refused.detail or "")
    if why is Refusal.TOO_LARGE:
        size, limit = refused.size or 0, refused.limit or 0
        box = f"mailbox {what!r}" if what else "its mailbox"
        return PayloadTooLarge(
            f"run {run_id!r}: a message for {box} of {size:,} bytes of JSON is over the "
            f"store's limit of {limit:,} bytes per message (max_message_bytes); keep large "
            "data elsewhere and send a reference to it",
            size, limit, run_id,
        )  # fmt: skip
    if why is Refusal.FULL:
        return MailboxFull(run_id, refused.detail or "messages", refused.size or 0,
                           refused.limit or 0)  # fmt: skip
    if why is Refusal.CHANGED:
        return SteadyflowError(f"run {run_id!r} kept changing while it was read; try again")
    return LeaseLost(f"run {run_id!r}: lease lost; nothing was written")
