"""The ambient run and step context, held in context variables.

Two `FlowTestEnv`s (or two workers) in one process never see each other's
runs: each activation sets its own context in its own task.
"""

from __future__ import annotations

import asyncio
import logging
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import attrs

from sdk.errors import NotInRunError, NotInStepError

if TYPE_CHECKING:
    from sdk._activation import Activation
    from sdk._client import Client
    from sdk._outbox import NewIntent

__all__ = ["RunContext", "StepContext", "current_run", "current_step"]

_run_var: ContextVar[Activation | None] = ContextVar("steadyflow_run", default=None)
_step_var: ContextVar[StepContext | None] = ContextVar("steadyflow_step", default=None)

_OUTSIDE = (
    "{what} can only be used inside a running flow. To run a flow in a test, use "
    "testing.FlowTestEnv (or the flow_env pytest fixture)."
)


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


class _ReplayQuietLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Drops records while the run is replaying, so a line is logged once.

    Each record carries the run's correlation ids as attributes: ``run_id``,
    ``flow``, ``flow_version``, ``tenant_id``, ``trace_id``, ``step_key`` (None
    outside a step), and what the worker's interceptors add (`sdk.otel`: the
    OpenTelemetry ``otel_trace_id`` and ``otel_span_id``).
    """

    def __init__(self, logger: logging.Logger, activation: Activation) -> None:
        stored = activation.stored
        super().__init__(
            logger,
            {
                "run_id": activation.run_id,
                "flow": activation.flow.name,
                "flow_version": stored.flow_version,
                "tenant_id": stored.tenant_id,
                "trace_id": stored.trace_id or activation.run_id,
            },
        )
        self._activation = activation

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if self._activation.is_replaying:
            return
        super().log(level, msg, *args, **kwargs)

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        extra = dict(self.extra or {})
        act = self._activation
        step = _step_var.get()
        key = step.key if step is not None and step.run_id == act.run_id else None
        extra["step_key"] = key
        for hook in act.engine.interceptors:
            extra.update(hook.log_context(act.run_id, key))
        extra.update(kwargs.get("extra") or {})  # the caller's own fields win
        kwargs["extra"] = extra
        return msg, kwargs


class RunContext:
    """What a flow can know about its run (see `current_run`)."""

    __slots__ = ("_activation", "_logger")

    def __init__(self, activation: Activation) -> None:
        self._activation = activation
        self._logger: _ReplayQuietLogger | None = None

    @property
    def run_id(self) -> str:
        return self._activation.run_id

    @property
    def flow(self) -> str:
        return self._activation.flow.name

    @property
    def tenant_id(self) -> str | None:
        return self._activation.stored.tenant_id

    @property
    def flow_version(self) -> str | None:
        """The flow version the run was started with (`@flow(version=...)`)."""
        return self._activation.stored.flow_version

    @property
    def client(self) -> Client:
        """A `Client` on the store this run lives in, with the worker's registry and
        serializer: for a step that starts, signals or reads other runs.

        Raises:
            NotInStepError: in a flow body, which does no I/O (its effects would
                not be journaled): call it from a step.

        Example::

            @step
            async def notify_parent(parent_id: str, total: int) -> None:
                await current_run().client.signal(parent_id, "child-done", total)
        """
        from sdk._aio import FlowLoop

        if isinstance(asyncio._get_running_loop(), FlowLoop):
            raise NotInStepError(
                "current_run().client is for steps: a flow body does no I/O (what it did "
                "would not be journaled); call the client from a @step"
            )
        return self._activation.engine.client()

    @property
    def is_replaying(self) -> bool:
        """True while the flow is re-walking calls the journal already holds."""
        return self._activation.is_replaying

    @property
    def logger(self) -> logging.LoggerAdapter:  # type: ignore[type-arg]
        """A logger (``steadyflow.flow``) that stays quiet while replaying."""
        if self._logger is None:
            self._logger = _ReplayQuietLogger(
                logging.getLogger("steadyflow.flow"), self._activation
            )
        return self._logger


def current_run() -> RunContext:
    """The run the calling flow code belongs to.

    Raises:
        NotInRunError: outside a run.
    """
    act = _run_var.get()
    if act is None:
        raise NotInRunError(_OUTSIDE.format(what="current_run()"))
    return act.context


def current_step() -> StepContext:
    """The step being executed, with its stable idempotency key.

    Raises:
        NotInRunError: outside a step of a run.
    """
    ctx = _step_var.get()
    if ctx is None:
        raise NotInRunError(_OUTSIDE.format(what="current_step() (inside a @step)"))
    return ctx
