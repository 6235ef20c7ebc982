"""The runtime flow code calls, and the context variables that hold the current one.

Every flow-facing function (`step` calls, `wait_for`, `sleep`, `now`,
`start_child`, `patched`, `continue_as_new`, `emit`, `current_run`...) asks
the current `Runtime` of its context for what it does. The Steadyflow engine's
activation of a run is one runtime (`sdk.engine`); another runner (Temporal's,
say) is another, with no change to flow code. A runtime is set for the tasks
of one run's flow, so two runs, two workers or two `FlowTestEnv`s in one
process never see each other's.

`ChildHandle` lives here too: it is the runtime's answer to `start_child`, and
its `result()` asks the runtime again.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Coroutine, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NoReturn

import attrs

from sdk.errors import ChildFailed, NotInRunError, RunCanceled

if TYPE_CHECKING:
    from sdk._core._values import Serializer
    from sdk.client._client import Client
    from sdk.model._flowdef import FlowDef
    from sdk.model._registry import Registry
    from sdk.model._stepspec import StepSpec
    from sdk.store import EventWatch, NewIntent, NewRun

__all__ = [
    "OUTSIDE",
    "ChildHandle",
    "RunInfo",
    "Runtime",
    "StepContext",
    "current_runtime",
    "run_var",
    "step_var",
]

OUTSIDE = (
    "{what} can only be used inside a running flow. To run a flow in a test, use "
    "testing.FlowTestEnv (or the flow_env pytest fixture)."
)


@attrs.frozen
class RunInfo:
    """The run a runtime executes, as flow code may know it (`current_run`)."""

    run_id: str
    flow: str
    flow_version: str | None
    tenant_id: str | None
    trace_id: str
    #: the root of the run's tree of children (the run itself for a top-level run)
    tree_root_run_id: str


@attrs.frozen
class StepContext:
    """The step being executed (see `current_step`).

    Attributes:
        run_id: the run.
        key: the step key, ``"{name}#{n}"``.
        attempt: 1 for the first attempt, 2 for the first retry...
        idempotency_key: ``"{lineage root run id}:{step key}"``: the same on every
            re-execution of this step (after a crash too). Pass it to the remote
            side so a repeated call has no second effect.
    """

    run_id: str
    key: str
    attempt: int
    idempotency_key: str
    # This attempt's outbox intents (`emit`); written with the step's result only.
    _intents: list[NewIntent] = attrs.field(init=False, factory=list, eq=False, repr=False)


class Runtime(abc.ABC):
    """What executes a run's flow code, as the flow-facing functions see it.

    Each call method is synchronous: it takes the call's key and position when
    it is made (so ``asyncio.gather`` numbers calls the same way every time)
    and returns the coroutine the flow awaits.
    """

    # -- the run ------------------------------------------------------------------

    @property
    @abc.abstractmethod
    def info(self) -> RunInfo:
        """The run being executed."""

    @property
    @abc.abstractmethod
    def is_replaying(self) -> bool:
        """Whether the flow is re-walking calls the journal already holds."""

    #: How the run's values become JSON (arguments, results, payloads).
    serializer: Serializer
    #: Where flow names are looked up (`start_child` by name), with the queues.
    registry: Registry

    @abc.abstractmethod
    def client(self) -> Client:
        """A client on the run's store (for steps)."""

    @abc.abstractmethod
    def time(self) -> float:
        """The runtime's clock (epoch seconds)."""

    @abc.abstractmethod
    def log_context(self, step_key: str | None) -> Mapping[str, str]:
        """Fields for the run's log records beyond its ids (a tracer's, say)."""

    @abc.abstractmethod
    def emitting(self, key: str, *, finished: bool) -> None:
        """An outbox `emit` of the current step begins (and, `finished`, is kept)."""

    @abc.abstractmethod
    def encode_args(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """The flow's arguments as the run's journal keeps them (`continue_as_new`)."""

    # -- the calls a flow makes ---------------------------------------------------------

    @abc.abstractmethod
    def step_call(
        self,
        spec: StepSpec,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Coroutine[Any, Any, Any]:
        """A call of a `@step` function."""

    @abc.abstractmethod
    def wait(
        self, name: str, timeout: float | None, human: bool, approvers: tuple[str, ...] | None
    ) -> Coroutine[Any, Any, Any]:
        """``wait_for(name)``: a signal's payload, or a `Decision`."""

    @abc.abstractmethod
    def wait_event(
        self, name: str, watch: EventWatch, timeout: float | None, match: dict[str, Any]
    ) -> Coroutine[Any, Any, Any]:
        """``wait_for_event(name, match=...)``: the event's data."""

    @abc.abstractmethod
    def sleep_until(self, until: float | None, duration: float | None) -> Coroutine[Any, Any, Any]:
        """A durable timer, until a time or for a duration."""

    @abc.abstractmethod
    def now(self) -> Coroutine[Any, Any, Any]:
        """The time, recorded once."""

    @abc.abstractmethod
    def uuid4(self) -> Coroutine[Any, Any, Any]:
        """A random UUID, recorded once."""

    @abc.abstractmethod
    def patched(self, change_id: str) -> Coroutine[Any, Any, bool]:
        """Whether the run takes the new path of the change `change_id`."""

    @abc.abstractmethod
    def deprecate_patch(self, change_id: str) -> None:
        """The place of a retired `patched(change_id)`."""

    @abc.abstractmethod
    def start_child(
        self, new: NewRun, fd: FlowDef | None, own_id: bool
    ) -> Coroutine[Any, Any, ChildHandle]:
        """Start the child run `new` (with its id when `own_id`, else the default)."""

    @abc.abstractmethod
    def child_result(self, handle: ChildHandle) -> Coroutine[Any, Any, Any]:
        """Wait for the child's outcome."""

    @abc.abstractmethod
    def continue_as_new(self, args: str) -> Coroutine[Any, Any, NoReturn]:
        """End this generation of the run; the next starts with `args`."""


#: The runtime executing the current task's flow (None: not in a run).
run_var: ContextVar[Runtime | None] = ContextVar("steadyflow_run", default=None)
#: The step the current task executes (None: not in a step).
step_var: ContextVar[StepContext | None] = ContextVar("steadyflow_step", default=None)


def current_runtime(what: str) -> Runtime:
    """The runtime of the calling flow code, for `what` (a call a flow body makes).

    Raises:
        NotInRunError: outside a run, or inside a step (steps run to completion).
    """
    rt = run_var.get()
    if rt is None:
        raise NotInRunError(OUTSIDE.format(what=what))
    if step_var.get() is not None:
        raise NotInRunError(
            f"{what} cannot be used inside a @step (steps run to completion); "
            "call it from the flow body"
        )
    return rt


class ChildHandle:
    """A child flow started by `start_child`: its run id, and its result.

    A handle is a value of the parent's journal: a replay gets an equal one.
    """

    __slots__ = ("_done", "_fd", "flow", "run_id")

    def __init__(self, run_id: str, flow: str, fd: FlowDef | None) -> None:
        self.run_id = run_id
        self.flow = flow
        self._fd = fd
        # the outcome, once awaited: (True, value) or (False, the exception)
        self._done: tuple[bool, Any] | None = None

    @property
    def flow_def(self) -> FlowDef | None:
        """The child flow's definition, when this process has it (its result's type)."""
        return self._fd

    def __repr__(self) -> str:
        return f"ChildHandle({self.run_id!r}, flow={self.flow!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChildHandle) and other.run_id == self.run_id

    def __hash__(self) -> int:
        return hash(self.run_id)

    async def result(self) -> Any:
        """Wait durably until the child ends; return its result.

        The parent parks (``waiting_for_signal``) and holds no worker; the
        child's end wakes it. The outcome is journaled in the parent, so a
        replay returns (or raises) the same without waiting. Awaiting it
        again returns the same outcome.

        Raises:
            ChildFailed: the child failed (a `RunFailed`; ``.error`` is the
                child's error).
            RunCanceled: the child was canceled.
        """
        if self._done is None:
            rt = current_runtime("ChildHandle.result()")
            try:
                value = await rt.child_result(self)
            except (ChildFailed, RunCanceled) as exc:
                self._done = (False, exc)
                raise
            self._done = (True, value)
            return value
        ok, outcome = self._done
        if not ok:
            raise outcome
        return outcome
