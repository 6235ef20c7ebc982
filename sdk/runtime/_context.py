"""What flow and step code can know of its run and step: `current_run`, `current_step`.

Both read the context variables of `sdk.runtime._runtime`: two `FlowTestEnv`s
(or two workers) in one process never see each other's runs.
"""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING, Any

from sdk.errors import NotInRunError
from sdk.runtime._runtime import OUTSIDE, Runtime, StepContext, run_var, step_var

if TYPE_CHECKING:
    from sdk.client._client import Client

__all__ = ["RunContext", "StepContext", "current_run", "current_step"]


class _ReplayQuietLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Drops records while the run is replaying, so a line is logged once.

    Each record carries the run's correlation ids as attributes: ``run_id``,
    ``flow``, ``flow_version``, ``tenant_id``, ``trace_id``, ``step_key`` (None
    outside a step), and what the worker's interceptors add (`sdk.otel`: the
    OpenTelemetry ``otel_trace_id`` and ``otel_span_id``).
    """

    def __init__(self, logger: logging.Logger, runtime: Runtime) -> None:
        info = runtime.info
        super().__init__(
            logger,
            {
                "run_id": info.run_id,
                "flow": info.flow,
                "flow_version": info.flow_version,
                "tenant_id": info.tenant_id,
                "trace_id": info.trace_id,
            },
        )
        self._runtime = runtime

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if self._runtime.is_replaying:
            return
        super().log(level, msg, *args, **kwargs)

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        extra = dict(self.extra or {})
        rt = self._runtime
        step = step_var.get()
        key = step.key if step is not None and step.run_id == rt.info.run_id else None
        extra["step_key"] = key
        extra.update(rt.log_context(key))
        extra.update(kwargs.get("extra") or {})  # the caller's own fields win
        kwargs["extra"] = extra
        return msg, kwargs


class RunContext:
    """What a flow can know about its run (see `current_run`)."""

    __slots__ = ("_logger", "_runtime")

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._logger: _ReplayQuietLogger | None = None

    @property
    def run_id(self) -> str:
        return self._runtime.info.run_id

    @property
    def flow(self) -> str:
        return self._runtime.info.flow

    @property
    def tenant_id(self) -> str | None:
        return self._runtime.info.tenant_id

    @property
    def flow_version(self) -> str | None:
        """The flow version the run was started with (`@flow(version=...)`)."""
        return self._runtime.info.flow_version

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
        return self._runtime.client()

    @property
    def is_replaying(self) -> bool:
        """True while the flow is re-walking calls the journal already holds."""
        return self._runtime.is_replaying

    @property
    def logger(self) -> logging.LoggerAdapter:  # type: ignore[type-arg]
        """A logger (``steadyflow.flow``) that stays quiet while replaying."""
        if self._logger is None:
            self._logger = _ReplayQuietLogger(logging.getLogger("steadyflow.flow"), self._runtime)
        return self._logger


# one RunContext per runtime (its logger is made once), for as long as the runtime lives
_contexts: weakref.WeakKeyDictionary[Runtime, RunContext] = weakref.WeakKeyDictionary()


def current_run() -> RunContext:
    """The run the calling flow code belongs to.

    Raises:
        NotInRunError: outside a run.
    """
    rt = run_var.get()
    if rt is None:
        raise NotInRunError(OUTSIDE.format(what="current_run()"))
    ctx = _contexts.get(rt)
    if ctx is None:
        ctx = _contexts[rt] = RunContext(rt)
    return ctx


def current_step() -> StepContext:
    """The step being executed, with its stable idempotency key.

    Raises:
        NotInRunError: outside a step of a run.
    """
    ctx = step_var.get()
    if ctx is None:
        raise NotInRunError(OUTSIDE.format(what="current_step() (inside a @step)"))
    return ctx
