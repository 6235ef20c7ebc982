"""Every error Steadyflow raises.

The tree::

    SteadyflowError
    ├── NonDeterminismError      replayed code made another call than the journal holds
    ├── IdempotencyConflict      same run id (or idempotency key), different request
    ├── InvalidTransition        a lifecycle move the transition table forbids
    ├── RunNotFound              (also LookupError) no run with that id
    ├── ScheduleNotFound         (also LookupError) no schedule with that id
    ├── FlowNotFound             (also LookupError) no flow registered under that name
    ├── RegistryConflict         (also ValueError) a name taken by a different flow or channel
    ├── SerializationError       (also TypeError) a value the journal cannot hold
    │   └── PayloadTooLarge      a value or message over its size bound
    ├── InvalidArgument          (also ValueError, TypeError) a bad argument of a public call
    ├── WaitTimeout              (also TimeoutError) a wait_for deadline passed
    ├── StepTimeout              (also TimeoutError) a step attempt ran past its timeout
    ├── LeaseLost                another worker owns the run now; this one must not write
    ├── Forbidden                (also PermissionError) the authorizer refused an action
    ├── NotInRunError            (also RuntimeError) a run-only call outside a run
    ├── NotInStepError           (also RuntimeError) I/O in a flow body instead of a step
    ├── FlowBlocked              every task of a flow waits on something nothing can complete
    ├── NotWaiting               approve/deny of a run not waiting for that approval
    ├── QueueFull                Client.start on a queue that holds its max_pending runs
    ├── MailboxFull              a message for a run that holds its bound of pending messages
    ├── StepError                a recorded failure whose exception type cannot be rebuilt
    ├── RunFailed                RunHandle.result() of a failed run
    ├── RunCanceled              RunHandle.result() of a canceled run
    ├── CorruptRecord            a run's stored data cannot be read; names the run and key
    └── CorruptIndex             a key runs share (a queue, an index) cannot be read; names it

Everything derives from `SteadyflowError`, so ``except SteadyflowError`` catches
any SDK error. The suspension of a run is not in this tree on purpose: it is a
`BaseException` that flow code cannot construct or swallow with
``except Exception``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sdk._core._types import ErrorInfo
    from sdk.store._statuses import RunStatus

__all__ = [
    "ChildFailed",
    "CorruptIndex",
    "CorruptRecord",
    "FlowBlocked",
    "FlowNotFound",
    "Forbidden",
    "IdempotencyConflict",
    "InvalidArgument",
    "InvalidTransition",
    "LeaseLost",
    "MailboxFull",
    "NonDeterminismError",
    "NotInRunError",
    "NotInStepError",
    "NotWaiting",
    "PayloadTooLarge",
    "QueueFull",
    "RegistryConflict",
    "RunCanceled",
    "RunFailed",
    "RunNotFound",
    "ScheduleNotFound",
    "SerializationError",
    "SteadyflowError",
    "StepError",
    "StepTimeout",
    "WaitTimeout",
]


class SteadyflowError(Exception):
    """Root of every error the SDK raises."""


class NonDeterminismError(SteadyflowError):
    """Replayed flow code made a different call than the journal recorded.

    The message starts with one line naming the position and both keys, then
    (when the engine raised it) a diff: the recorded calls around the position
    next to the calls the code made, the first difference marked ``>``, and the
    fix (wrap the change in ``if await patched(...)``, or version the flow).

    Attributes:
        run_id: the run being replayed.
        position: the call's position in the activation (0-based).
        recorded: the step key the journal holds at that position (None if none).
        called: the step key the code asked for (None: the flow returned before
            reaching a call the journal holds, e.g. a step was removed).
        detail: what else disagreed, when it is not the key at the position
            (e.g. concurrent calls that the changed code makes in another order).
        diff: the diff lines of the message ("" when none was given), and the
            fix; with `flow` (and `flow_version`, the version the run is on) it
            names the ``@flow(name=..., version=...)`` that keeps the old runs'
            code.
    """

    def __init__(
        self,
        run_id: str,
        position: int,
        recorded: str | None,
        called: str | None,
        *,
        detail: str | None = None,
        journal: Mapping[int, str] | None = None,
        calls: Sequence[str] | None = None,
        flow: str | None = None,
        flow_version: str | None = None,
    ) -> None:
        self.run_id = run_id
        self.position = position
        self.recorded = recorded
        self.called = called
        self.detail = detail
        if detail is not None:
            head, what = f"call #{position}", detail
        elif called is None:
            head = f"the flow returned before call #{position}"
            what = f"the journal records {recorded!r} there"
        else:
            head = f"call #{position} is {called!r}"
            if recorded is None:
                what = f"the journal records {called!r} at another position"
            else:
                what = f"the journal records {recorded!r} there"
        self.diff = (
            ""
            if journal is None
            else _diff(position, journal, calls or (), called) + _fix(flow, flow_version)
        )
        text = f"run {run_id!r}: {head} but {what}; flow code changed in a way that breaks replay"
        super().__init__(text + self.diff)


_AROUND = 3  # recorded calls shown before and after the position of a divergence


def _diff(
    position: int, journal: Mapping[int, str], calls: Sequence[str], called: str | None
) -> str:
    """The recorded calls around `position` next to the calls the code made."""
    made = dict(enumerate(calls))
    if called is not None and position not in made:
        made[position] = called  # the call that diverged (it took no position)
    last = max([position, *journal, *made])
    rows = range(max(position - _AROUND, 0), min(position + _AROUND, last) + 1)
    keys = [journal.get(p, "-") for p in rows]
    width = max([len("recorded"), *map(len, keys)])
    lines = ["", f"    {'pos':>5}  {'recorded':<{width}}  called"]
    for p, key in zip(rows, keys, strict=True):
        if p in made:
            now = made[p]
        elif p == position and called is None:
            now = "(the flow returned)"
        else:
            now = "-"
        mark = ">" if p == position else " "
        lines.append(f"  {mark} {p:>5}  {key:<{width}}  {now}".rstrip())
    return "\n".join(lines)


def _fix(flow: str | None, version: str | None) -> str:
    """How to keep runs recorded by the old code on their path."""
    text = (
        "\n  To keep runs recorded by the old code on their path, wrap the change in "
        "`if await patched('<change-id>'):` (docs/changing-flows.md); or version the flow "
        "and keep serving the old version until its runs finish"
    )
    if flow is None:
        return text + "."
    if version is None:
        return text + (
            f": this run started unversioned, so keep the old code registered as "
            f"@flow(name={flow!r}) and give the new code @flow(name={flow!r}, version=...)."
        )
    return text + (
        f": this run started on version {version!r}, so keep the old code registered as "
        f"@flow(name={flow!r}, version={version!r}) (the new code under a new version), or "
        "move the run explicitly with Client.resume(run_id, version=...)."
    )


class IdempotencyConflict(SteadyflowError):
    """The same id was reused for a different request."""


class InvalidTransition(SteadyflowError):
    """A lifecycle transition the table does not allow. Nothing was changed.

    Attributes:
        run_id: the run.
        current: its status.
        requested: the status that was asked for; None when the action was not
            a move (`action`, e.g. ``"delete"``: only finished runs are deleted).
        action: what was refused, when it is not a move to `requested`.
    """

    def __init__(
        self,
        run_id: str,
        current: RunStatus,
        requested: RunStatus | None,
        *,
        action: str | None = None,
    ) -> None:
        self.run_id = run_id
        self.current = current
        self.requested = requested
        self.action = action
        if requested is None:
            msg = f"run {run_id!r}: cannot {action} it while it is {current.value!r}"
            if action == "delete":
                msg += " (only completed, failed or canceled runs are deleted; cancel it first)"
        else:
            msg = f"run {run_id!r}: cannot move from {current.value!r} to {requested.value!r}"
        super().__init__(msg)


class RunNotFound(SteadyflowError, LookupError):
    """No run has this id."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"no run with id {run_id!r}")


class ScheduleNotFound(SteadyflowError, LookupError):
    """No schedule has this id (`Client.pause_schedule` and the other schedule calls)."""

    def __init__(self, schedule_id: str) -> None:
        self.schedule_id = schedule_id
        super().__init__(f"no schedule with id {schedule_id!r}")


class FlowNotFound(SteadyflowError, LookupError):
    """No flow is registered under this name in this process."""


class RegistryConflict(SteadyflowError, ValueError):
    """A flow, step or channel name is already taken by a different function.

    Names are identities in journals and stored runs; giving one name to two
    functions would hand one's recorded results to the other.
    """


class SerializationError(SteadyflowError, TypeError):
    """A value cannot be stored as JSON (or rebuilt from it).

    The message names what was being stored: a flow argument, a step result
    (with its step key), a signal payload.
    """


class PayloadTooLarge(SerializationError):
    """A value or a message is over its size bound; nothing was written.

    The client's `Serializer` refuses a value over its ``max_payload_bytes``
    (a flow argument, a step result, a signal or approval payload...); the store
    refuses a message over its ``max_message_bytes`` (`sdk.store.StoreLimits`),
    whatever the client allows. Over HTTP: ``413 payload_too_large``.

    Attributes:
        size: the bytes of its JSON text (at least this many), if known.
        limit: the bound, if known.
        run_id: the run a refused message was for, or None.
    """

    def __init__(
        self,
        message: str,
        size: int | None = None,
        limit: int | None = None,
        run_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit
        self.run_id = run_id


class InvalidArgument(SteadyflowError, ValueError, TypeError):
    """An argument of a public call has the wrong type or value; nothing was written.

    The message names the argument and shows its value, cut short. It is a
    `ValueError` and a `TypeError`, so code that catches either keeps working.
    """


class WaitTimeout(SteadyflowError, TimeoutError):
    """`wait_for` reached its deadline before a signal arrived.

    Attributes:
        name: the wait's name.
        step_key: its journal key.
    """

    def __init__(self, name: str, step_key: str) -> None:
        self.name = name
        self.step_key = step_key
        super().__init__(f"wait_for({name!r}) timed out (step key {step_key!r})")


class StepTimeout(SteadyflowError, TimeoutError):
    """A step attempt ran longer than its ``@step(timeout=...)``; it was cancelled.

    Recorded as a failed attempt like any exception the step raised: retried
    under the step's retry policy, and re-raised identically on replay.

    Attributes:
        step_key: the step's journal key.
        timeout: the step's timeout, in seconds.
    """

    def __init__(self, step_key: str, timeout: float) -> None:
        self.step_key = step_key
        self.timeout = timeout
        super().__init__(str(self))
        # the record keeps these args, so a replay rebuilds the same exception
        self.args = (step_key, timeout)

    def __str__(self) -> str:
        return (
            f"step {self.step_key!r} timed out: an attempt ran longer than its timeout of "
            f"{self.timeout:g} seconds and was cancelled"
        )


class LeaseLost(SteadyflowError):
    """This worker no longer owns the run (lease expired, taken over, or canceled)."""


class Forbidden(SteadyflowError, PermissionError):
    """The authorizer refused an action."""


class NotInRunError(SteadyflowError, RuntimeError):
    """A call that only makes sense inside a running flow was made outside one."""


class NotInStepError(SteadyflowError, RuntimeError):
    """Flow code asked its event loop for I/O, threads or processes.

    A flow body runs on Steadyflow's deterministic loop; I/O belongs in a `step`.
    """


class FlowBlocked(SteadyflowError):
    """Every task of a flow waits on something no signal, timer or step can complete.

    For example, the flow awaits an ``asyncio.Event`` that nothing sets, or a
    task whose wait was withdrawn. The run fails with this error.
    """


class NotWaiting(SteadyflowError):
    """An approval or denial for a run that is not waiting for it. Nothing was written.

    Attributes:
        run_id: the run.
        status: its status.
    """

    def __init__(self, run_id: str, status: RunStatus | str, name: str | None = None) -> None:
        self.run_id = run_id
        self.status = status
        self.name = name
        what = f"approval {name!r}" if name else "that approval"
        super().__init__(f"run {run_id!r} is not waiting for {what} (status {str(status)!r})")


class StepError(SteadyflowError):
    """A recorded step failure whose original exception type cannot be rebuilt here.

    Attributes:
        type_name: ``module:qualname`` of the original exception.
        message: its message.
        step_key: the step that failed.
    """

    def __init__(self, type_name: str, message: str, step_key: str | None) -> None:
        self.type_name = type_name
        self.message = message
        self.step_key = step_key
        super().__init__(f"{type_name}: {message}")


class RunFailed(SteadyflowError):
    """The run ended in `failed`.

    Attributes:
        run_id: the run.
        error: `ErrorInfo` with type, message, step key and reason code.
    """

    def __init__(self, run_id: str, error: ErrorInfo) -> None:
        self.run_id = run_id
        self.error = error
        where = f" at step {error.step_key!r}" if error.step_key else ""
        super().__init__(
            f"run {run_id!r} failed{where}: {error.type}: {error.message} (reason: {error.reason})"
        )


class ChildFailed(RunFailed):
    """A child flow ended in `failed`: raised in its parent by ``await
    handle.result()`` / ``run_child`` (identically on replay).

    Attributes:
        run_id: the child run.
        error: the child's `ErrorInfo` (type, message, step key, reason).
    """

    def __init__(self, run_id: str, error: ErrorInfo) -> None:
        super().__init__(run_id, error)
        self.args = (f"child {self.args[0]}",)


class RunCanceled(SteadyflowError):
    """The run ended in `canceled`.

    Attributes:
        run_id: the run.
        reason: the text given to `Client.cancel`.
    """

    def __init__(self, run_id: str, reason: str | None) -> None:
        self.run_id = run_id
        self.reason = reason
        super().__init__(f"run {run_id!r} was canceled: {reason}")


class QueueFull(SteadyflowError):
    """`Client.start` of a new run on a queue that already holds its
    ``Queue(max_pending=...)`` ready runs: nothing was written. Shed the load,
    or retry later.

    Attributes:
        queue: the queue.
        depth: the ready runs it held.
    """

    def __init__(self, queue: str, depth: int) -> None:
        self.queue = queue
        self.depth = depth
        super().__init__(
            f"queue {queue!r} is full: it holds {depth} ready run(s) (its max_pending)"
        )


class MailboxFull(SteadyflowError):
    """A signal or an event for a run that already holds as many messages its flow
    has not taken as the store allows (``max_pending_messages``), or would then
    hold more bytes of them than ``max_pending_bytes`` (`sdk.store.StoreLimits`):
    nothing was written. Room comes back as the flow takes its messages
    (``wait_for``), so a retry helps only then. Over HTTP: ``429 mailbox_full``.

    Attributes:
        run_id: the run.
        bound: which bound it holds: ``"messages"`` or ``"bytes"``.
        pending: what the run holds of it (with this message, for bytes).
        limit: the bound.
    """

    def __init__(self, run_id: str, bound: str, pending: int, limit: int) -> None:
        self.run_id = run_id
        self.bound = bound
        self.pending = pending
        self.limit = limit
        what = "messages" if bound == "messages" else "bytes of messages"
        super().__init__(
            f"run {run_id!r} is full: it would hold {pending:,} {what} its flow has not "
            f"taken, over its bound of {limit:,} (the store's max_pending_{bound})"
        )


class CorruptRecord(SteadyflowError):
    """A run's stored data cannot be read or worked with (damaged in Redis: a key
    of another type, a field that is not a number, bytes that are not UTF-8).
    Nothing was written. Workers fail such a run alone, with reason
    ``corrupt_record`` (docs/operations.md#damaged-runs).

    Attributes:
        run_id: the run.
        key: the Redis key that is damaged.
        detail: what is wrong with it.
    """

    def __init__(self, run_id: str, key: str, detail: str) -> None:
        self.run_id = run_id
        self.key = key
        self.detail = detail
        super().__init__(f"run {run_id!r} has damaged stored data: {key}: {detail}")


class CorruptIndex(SteadyflowError):
    """A key that the runs of a partition share cannot be read or worked with:
    a queue, the list of queues, a status, timer or lease index, the workers'
    registry holds another type than Steadyflow writes there (damaged in
    Redis). No run's own data is damaged, and nothing was written; every call
    that needs the key fails the same way until it is rebuilt. Workers
    rebuild a damaged queue, list of queues or registry themselves, within a
    second; the other keys are repaired by hand
    (docs/operations.md#damaged-runs).

    Attributes:
        key: the Redis key that is damaged.
        detail: what is wrong with it.
    """

    def __init__(self, key: str, detail: str) -> None:
        self.key = key
        self.detail = detail
        super().__init__(f"a key that runs share is damaged: {key}: {detail}")
