"""Interceptors: hooks around the execution of steps and durable calls, for tools and test kits.

The engine calls every interceptor of its worker around each step attempt, as
each wait, sleep or child start begins, as each wait or sleep completes and
each child run is created, around each outbox `emit` and each delivery of an
intent to its channel's handler. An interceptor observes (tracing, metrics);
wraps a step attempt's body (`Interceptor.execute_step`: a span or a context
around it, or a stand-in for it, as the test kit's `FlowTestEnv.stub`); or,
for the test kit, simulates a crash by raising `Abandon`: the activation then
stops at once, as if its process had died there (see
`testing.FlowTestEnv.crash_at`).
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from sdk._core._types import RunOptions, WaitingOn

__all__ = [
    "Abandon",
    "ActivationInfo",
    "ActivationOutcome",
    "ActivationReason",
    "Interceptor",
    "StepCall",
    "wrapping",
]


class ActivationReason(enum.StrEnum):
    """Why an activation runs (`ActivationInfo.reason`)."""

    START = "start"
    """The run's first activation (also a new generation after `continue_as_new`)."""
    WAKE_UP = "wake_up"
    """A signal, an approval, a timer, a resume or a retry made a parked run ready."""
    RECOVERY = "recovery"
    """The previous activation's lease expired (its worker died or hung) and no
    progress was journaled since: this one takes the run over."""
    REPLAY = "replay"
    """The first activation of a run derived by `Client.replay` or `Client.fork`."""


class ActivationOutcome(enum.StrEnum):
    """How an activation ended (`Interceptor.activation_finished`)."""

    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"
    PARKED = "parked"
    """The run waits (signal, approval, timer, retry backoff, child)."""
    CONTINUED_AS_NEW = "continued_as_new"
    ABANDONED = "abandoned"
    """Stopped without an outcome: a (simulated) crash, a lost lease or a store
    error; the run is recovered when its lease expires."""
    INTERRUPTED = "interrupted"
    """The worker stopped (or the heartbeat found the lease gone) while it ran."""


@attrs.frozen
class ActivationInfo:
    """One activation, as interceptors see it (`Interceptor.activation_started`).

    Attributes:
        run_id, flow, flow_version, tenant_id, trace_id, schedule_id,
        parent_run_id, queue: the run's correlation ids and where it runs.
        reason: an `ActivationReason`.
        replayed: journal entries the activation found (it replays them).
        recoveries: lease expiries without progress so far.
        generation: how many times the run continued as new.
        created_at: when the run was created (epoch seconds, the worker's clock).
        claimed_at: when this activation began (epoch seconds, the worker's clock).
    """

    run_id: str
    flow: str
    flow_version: str | None
    tenant_id: str | None
    trace_id: str | None
    schedule_id: str | None
    parent_run_id: str | None
    queue: str
    reason: ActivationReason
    replayed: int
    recoveries: int
    generation: int
    created_at: float
    claimed_at: float


@attrs.frozen
class StepCall:
    """One attempt of a step's body, as `Interceptor.execute_step` sees it.

    Attributes:
        run_id: the run.
        key: the step key, ``"{name}#{n}"``.
        name: the step's name (``@step(name=...)``, default the function's ``__qualname__``).
        attempt: 1 for the first attempt, 2 for the first retry...
        args, kwargs: the arguments the flow called the step with.
    """

    run_id: str
    key: str
    name: str
    attempt: int
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]


class Abandon(BaseException):
    """Stop the activation at once, as if the worker process died at this point.

    Nothing more is written by the activation (writes already sent complete);
    its lease is left to expire, and another activation continues the run.
    A `BaseException`, so flow and step code cannot swallow it with
    ``except Exception``. The worker's other activations go on; the test kit,
    which simulates the death of the whole process, also drops the worker's
    kept activations (`testing.FlowTestEnv.crash_at`).
    """


class Interceptor:
    """Hooks around step attempts and durable calls. Each one does nothing unless
    overridden.

    Arguments of the step hooks: the run id, the step key, and the attempt
    number (1 for the first).
    """

    def step_started(self, run_id: str, key: str, attempt: int) -> None:
        """Before the step's body runs."""

    def step_finished(self, run_id: str, key: str, attempt: int) -> None:
        """After the body returned, before its result is recorded."""

    def step_ended(self, run_id: str, key: str, attempt: int, error: BaseException | None) -> None:
        """After every attempt's body, before its outcome is recorded: the body
        returned (`error` is None; `step_finished` follows) or raised `error`
        (its failure or retry is recorded next; then `step_failed`)."""

    async def execute_step(self, call: StepCall, proceed: Callable[[], Awaitable[Any]]) -> Any:
        """Run one attempt of a step's body: ``return await proceed()`` runs it.

        Override it to wrap the body (a span, a context variable, a measure) or
        to stand in for it (a stub returns without calling `proceed`). What it
        returns is the attempt's result; what it raises, the attempt's failure
        (retried under the step's retry policy). It runs inside the step
        (`sdk.current_step` is the attempt's), between `step_started` and
        `step_ended`, and only for live attempts: a step replayed from the
        journal runs no body. The worker's interceptors nest in their order:
        the first one's `proceed` runs the second's `execute_step`, and the
        last one's runs the body. Not overriding it costs nothing.
        """
        return await proceed()

    def call_started(self, run_id: str, key: str, kind: str) -> None:
        """A durable call begins. By `kind`:

        - ``"wait"``, ``"sleep"``, ``"child"``: the call (its journal key) begins
          at the live frontier, before anything of it is written. A call that
          parks the run begins again in each activation until it completes.
        - ``"emit"``: a step's `sdk.emit` call, before the intent is kept
          (`key`: ``"~emit:"`` + the intent's idempotency key).
        - ``"deliver"``: the dispatcher claimed an intent (its delivery is
          counted, its lease taken) and is about to call the channel's handler
          (`key`: ``"~deliver:"`` + the intent's idempotency key; `run_id`: the
          run that emitted it). A worker's dispatcher calls the worker's
          interceptors.
        """

    def call_finished(self, run_id: str, key: str, kind: str) -> None:
        """A durable call completed its part. By `kind`:

        - ``"wait"``, ``"sleep"``: the outcome is recorded, before the flow is
          given it.
        - ``"child"``: the child run is created (or found, with the same
          arguments), before the parent's journal records its start.
        - ``"emit"``: the intent is kept with the step attempt, to be written
          with its result.
        - ``"deliver"``: the handler returned, before the intent is marked sent.
        """

    # -- activations, failures, timers (observability) -------------------------------

    def activation_started(self, info: ActivationInfo) -> None:
        """A worker begins executing a claimed run, before the flow's code runs."""

    def activation_finished(self, info: ActivationInfo, outcome: ActivationOutcome) -> None:
        """The activation ended (`info` is the object `activation_started` got)."""

    def step_failed(
        self, run_id: str, key: str, attempt: int, error: BaseException, retrying: bool
    ) -> None:
        """A step attempt raised `error` and the failure is recorded; `retrying`:
        another attempt follows (now or at its backoff's due time)."""

    def timer_fired(self, run_id: str, key: str, kind: str, due: float, fired: float) -> None:
        """A durable timer that was due at `due` fired at `fired` (epoch seconds of
        the worker's clock). `kind`: ``"sleep"``, ``"wait"`` (a wait's deadline
        passed) or ``"retry"`` (a step's retry backoff is over)."""

    def run_parked(self, run_id: str, waiting_on: Sequence[WaitingOn]) -> None:
        """The activation parked the run: what it waits for, as the flow wrote it
        (the `RunRecord.waiting_on` the park wrote: a human approval, a signal, an
        event, a child run, a sleep, a retry), before `activation_finished`."""

    def leases_recovered(self, count: int) -> None:
        """A worker's poll took over `count` runs whose lease had expired."""

    def log_context(self, run_id: str, step_key: str | None) -> Mapping[str, str]:
        """Fields for the run's `current_run().logger` records (e.g. trace ids)."""
        return {}

    def run_starting(self, flow: str, run_id: str, options: RunOptions) -> RunOptions:
        """`Client.start` (of a client given this interceptor) is about to create
        run `run_id` of `flow`: returns the options to record (e.g. with a trace
        context in `RunOptions.trace_id`)."""
        return options

    def run_started(self, run_id: str, error: BaseException | None) -> None:
        """After `run_starting`: the start is written (or found: the same run id
        started again), or it raised `error` (e.g. `QueueFull`)."""


def wrapping(interceptors: Sequence[Interceptor]) -> tuple[Interceptor, ...]:
    """The interceptors that override `Interceptor.execute_step`, in their order."""
    return tuple(i for i in interceptors if type(i).execute_step is not Interceptor.execute_step)


def execute_step(
    wrappers: Sequence[Interceptor], call: StepCall, body: Callable[..., Any]
) -> Awaitable[Any]:
    """One attempt of `body` (a step function, ``async`` or not) through `wrappers`."""

    async def innermost() -> Any:
        value = body(*call.args, **call.kwargs)
        return await value if inspect.isawaitable(value) else value

    proceed: Callable[[], Awaitable[Any]] = innermost
    for hook in reversed(wrappers):
        proceed = _bind(hook, call, proceed)
    return proceed()


def _bind(
    hook: Interceptor, call: StepCall, proceed: Callable[[], Awaitable[Any]]
) -> Callable[[], Awaitable[Any]]:
    return lambda: hook.execute_step(call, proceed)
