"""Ops: the intercepted calls of a flow, and what their recorded outcomes mean.

Every call a flow makes to a step, ``wait_for``, ``sleep``, ``now``,
``uuid4``, ``patched`` (when it journals a marker) or an asyncio timer of its
loop is an *op*. It gets its step key and its *position* (the order in which
the activation's calls were made) synchronously when it is made, so
``asyncio.gather(a(), b())`` numbers the same way every time. The flow then
awaits the op's future; the activation resolves it in a round (see
`sdk.engine._activation`): from the journal when the outcome is recorded, or live.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from sdk._core._checks import show
from sdk._core._journal import Kind, Record, State
from sdk._core._keys import child_run_id
from sdk._core._serde import converter, rebuild_exception
from sdk._core._types import Decision, ErrorInfo, Reason, RunStatus
from sdk.errors import ChildFailed, RunCanceled, WaitTimeout
from sdk.model._events import event_mailbox
from sdk.runtime._runtime import ChildHandle
from sdk.store import EventWatch, Mailbox, NewRun

if TYPE_CHECKING:
    from sdk._core._values import Serializer
    from sdk.model._flowdef import FlowDef
    from sdk.model._stepspec import StepSpec

__all__ = [
    "STEP_TAG",
    "ChildOp",
    "ChildWaitOp",
    "Op",
    "Outcome",
    "SleepOp",
    "StepOp",
    "TimerOp",
    "ValueOp",
    "WaitOp",
    "due",
    "make_child_op",
    "tag",
]

#: Attribute set on an exception that came from a step or a wait: (step key, reason).
STEP_TAG = "__steadyflow_step__"


def tag(exc: BaseException, key: str, reason: Reason) -> BaseException:
    """Mark `exc` as the recorded failure of `key` (the run's error names the step)."""
    with contextlib.suppress(AttributeError, TypeError):  # exotic exception types
        setattr(exc, STEP_TAG, (key, reason))
    return exc


def _reason(text: str | None) -> Reason:
    try:
        return Reason(text or Reason.STEP_FAILED)
    except ValueError:  # written by a newer version
        return Reason.STEP_FAILED


@attrs.frozen
class Outcome:
    """What an op's future gets: a value, or an exception."""

    value: Any = None
    error: BaseException | None = None

    def apply(self, fut: asyncio.Future[Any]) -> None:
        if fut.done():  # the flow canceled the call meanwhile
            return
        if self.error is not None:
            fut.set_exception(self.error)
        else:
            fut.set_result(self.value)


@attrs.define(eq=False)
class Op:
    """One intercepted call."""

    kind: ClassVar[Kind]

    key: str
    pos: int
    #: the journal's record for this call (at claim time, then as written)
    record: Record | None = None
    #: the future the flow awaits (on the flow's loop); None for timers
    fut: asyncio.Future[Any] | None = None
    #: the flow task that awaits it (see `sdk.engine._aio.interested`)
    owner: asyncio.Task[Any] | None = None
    #: its outcome was delivered (or it is withdrawn for good)
    done: bool = False

    @property
    def delivery(self) -> Record | None:
        """The recorded outcome to replay, if the journal holds one for this call."""
        rec = self.record
        if rec is not None and rec.resolved and rec.kind is self.kind:
            return rec
        return None

    def outcome(self, rec: Record, serializer: Serializer) -> Outcome:
        """What a recorded outcome means to the flow."""
        raise TypeError(f"{type(self).__name__} has no recorded outcome")  # pragma: no cover

    def replayed(self, rec: Record, serializer: Serializer) -> Any:
        """The recorded outcome, returned or raised (as awaiting its delivery would)."""
        outcome = self.outcome(rec, serializer)
        if outcome.error is not None:
            raise outcome.error
        return outcome.value


@attrs.define(eq=False)
class StepOp(Op):
    """A call of a `@step` function."""

    kind: ClassVar[Kind] = Kind.STEP

    spec: StepSpec = attrs.field(kw_only=True)
    fn: Callable[..., Any] = attrs.field(kw_only=True)
    args: tuple[Any, ...] = attrs.field(kw_only=True)
    kwargs: dict[str, Any] = attrs.field(kw_only=True)
    #: when set, the step waits (parked) until then before its next attempt
    retry_due: float | None = None
    #: waiting for the approval ``replay:{key}`` before running again (replay policy)
    approval: bool = False

    @property
    def what(self) -> str:
        return f"result of step {self.key!r}"

    def outcome(self, rec: Record, serializer: Serializer) -> Outcome:
        if rec.state is State.OK:
            try:
                value = serializer.decode(rec.value, self.spec.return_type(), rec.type, self.what)
            except Exception as exc:
                return Outcome(error=exc)
            return Outcome(value)
        reason = _reason(rec.reason)
        return Outcome(error=tag(rebuild_exception(rec.error or {}, self.key), self.key, reason))

    def replayed(self, rec: Record, serializer: Serializer) -> Any:
        if rec.state is State.OK:  # the common case, without an Outcome
            return serializer.decode(rec.value, self.spec.return_type(), rec.type, self.what)
        return super().replayed(rec, serializer)


@attrs.define(eq=False)
class WaitOp(Op):
    """``wait_for(name)``: a signal, or a human decision."""

    kind: ClassVar[Kind] = Kind.WAIT

    name: str = attrs.field(kw_only=True)
    human: bool = attrs.field(kw_only=True)
    approvers: tuple[str, ...] | None = attrs.field(kw_only=True)
    timeout: float | None = attrs.field(kw_only=True)
    #: absolute deadline (epoch seconds), fixed when the wait is first made
    deadline: float | None = None

    @property
    def mailbox(self) -> Mailbox:
        return Mailbox(self.name, self.human)

    @property
    def due(self) -> float | None:
        return self.deadline

    def payload(self, value: Any) -> Any:
        if self.human:  # made by Client.approve / deny: the engine's own record
            return converter.structure(value, Decision)
        return value

    def outcome(self, rec: Record, serializer: Serializer) -> Outcome:
        if rec.state is State.TIMEOUT:
            return Outcome(error=self.timed_out())
        try:
            return Outcome(self.payload(rec.value))
        except Exception as exc:
            return Outcome(error=exc)

    def timed_out(self) -> BaseException:
        return tag(WaitTimeout(self.name, self.key), self.key, Reason.FLOW_ERROR)


@attrs.define(eq=False)
class SleepOp(Op):
    """``sleep`` / ``sleep_until``: a durable timer."""

    kind: ClassVar[Kind] = Kind.SLEEP

    until: float | None = attrs.field(kw_only=True)
    duration: float | None = attrs.field(kw_only=True)
    due: float | None = None

    def outcome(self, rec: Record, serializer: Serializer) -> Outcome:
        return Outcome(None)


@attrs.define(eq=False)
class ValueOp(Op):
    """``now()`` / ``uuid4()``: a value made once and journaled."""

    kind: ClassVar[Kind]  # per instance: NOW or UUID (see `of`)

    make: Callable[[], str] = attrs.field(kw_only=True)

    def outcome(self, rec: Record, serializer: Serializer) -> Outcome:
        return Outcome(self.parse(str(rec.value)))

    def parse(self, text: str) -> Any:
        if self.kind is Kind.NOW:
            return datetime.fromisoformat(text)
        return uuid.UUID(text)


@attrs.define(eq=False)
class NowOp(ValueOp):
    kind: ClassVar[Kind] = Kind.NOW


@attrs.define(eq=False)
class UuidOp(ValueOp):
    kind: ClassVar[Kind] = Kind.UUID


@attrs.define(eq=False)
class PatchOp(ValueOp):
    """``patched(change_id)`` taking the new path: its marker (the change id) is
    journaled like a value; the flow gets True, live and on replay."""

    kind: ClassVar[Kind] = Kind.PATCH

    def parse(self, text: str) -> Any:
        return True


@attrs.define(eq=False)
class TimerOp(Op):
    """A timer of the flow's loop (``asyncio.sleep``, ``asyncio.timeout``,
    ``asyncio.wait(timeout=)``): durable, journaled; firing runs its callback."""

    kind: ClassVar[Kind] = Kind.TIMER

    handle: asyncio.TimerHandle | None = None
    due: float | None = None

    def outcome(self, rec: Record, serializer: Serializer) -> Outcome:
        return Outcome(None)


@attrs.define(eq=False)
class EventWaitOp(WaitOp):
    """``wait_for_event(name, match=...)``: a wait on its filter's mailbox, which
    listens (is in its filter's index) once it has been consumed in this activation."""

    watch: EventWatch = attrs.field(kw_only=True)
    #: the filter as the flow gave it (JSON data), for what operators see (`WaitingOn.match`)
    match: dict[str, Any] = attrs.field(kw_only=True, factory=dict)
    #: consumed once in this activation, so listening (each activation re-registers)
    armed: bool = False

    @property
    def mailbox(self) -> Mailbox:
        return event_mailbox(self.watch.token)


__all__ += ["EventWaitOp", "NowOp", "PatchOp", "UuidOp"]


def due(op: Op) -> float | None:
    """When a waiting call completes by itself (deadline, due time, retry time)."""
    if isinstance(op, WaitOp):
        return op.deadline
    if isinstance(op, (SleepOp, TimerOp)):
        return op.due
    if isinstance(op, StepOp):
        return op.retry_due
    return None


# -- child runs (started by `sdk.engine._children`) -------------------------------------


@attrs.define(eq=False)
class ChildOp(Op):
    """``start_child``: the child's run id once started (or why it could not start)."""

    kind: ClassVar[Kind] = Kind.CHILD

    new: NewRun = attrs.field(kw_only=True)
    fd: FlowDef | None = attrs.field(kw_only=True)

    def outcome(self, rec: Record, serializer: Serializer) -> Outcome:
        if rec.state is State.OK:
            return Outcome(ChildHandle(str(rec.value), self.new.flow, self.fd))
        exc = rebuild_exception(rec.error or {}, self.key)
        return Outcome(error=tag(exc, self.key, Reason.FLOW_ERROR))


@attrs.define(eq=False)
class ChildWaitOp(WaitOp):
    """``ChildHandle.result()``: a wait on the child's mailbox, whose payload is
    the child's outcome (see `_outcome_payload`)."""

    child: ChildHandle = attrs.field(kw_only=True)
    serializer: Serializer = attrs.field(kw_only=True)

    def payload(self, value: Any) -> Any:
        child = self.child
        status = value.get("status") if isinstance(value, dict) else None
        if status == RunStatus.COMPLETED:
            fd = child.flow_def
            declared = fd.return_type() if fd is not None else None
            return self.serializer.decode(
                value.get("result"), declared, value.get("result_type"),
                f"result of child run {child.run_id!r}",
            )  # fmt: skip
        if status == RunStatus.CANCELED:
            raise tag(RunCanceled(child.run_id, value.get("reason")), self.key, Reason.FLOW_ERROR)
        error = value.get("error") if isinstance(value, dict) else None
        if isinstance(error, dict):
            info = converter.structure(error, ErrorInfo)
        else:
            info = ErrorInfo("builtins:RuntimeError", f"unreadable child outcome: {show(value)}")
        raise tag(ChildFailed(child.run_id, info), self.key, Reason.FLOW_ERROR)


def make_child_op(base: str, key: str, pos: int, new: NewRun, fd: FlowDef | None,
                  own_id: bool) -> ChildOp:  # fmt: skip
    """The op of a ``start_child`` call of the run `base` (see `child_run_id`)."""
    if not own_id:
        new = attrs.evolve(new, run_id=child_run_id(base, key))
    return ChildOp(key, pos, new=new, fd=fd)
