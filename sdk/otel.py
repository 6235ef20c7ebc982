"""OpenTelemetry traces and metrics for Steadyflow (the ``steadyflow[otel]`` extra).

One interceptor does both. Give it to the workers and to the clients that start
runs; ``import sdk`` never imports OpenTelemetry, this module does::

    from sdk.otel import OtelInterceptor

    otel = OtelInterceptor()                       # the global providers by default
    client = Client(store, interceptors=[otel])    # start: records the caller's trace
    worker = Worker(store, interceptors=[otel])    # activations, steps, waits, metrics

Spans (see docs/observability.md for every name and attribute):

- ``start_run {flow}`` (PRODUCER): `Client.start`, a child of the caller's
  current span. Its W3C ``traceparent`` is recorded as the run's
  `RunOptions.trace_id` (unless the caller gave a trace id), so every later
  activation of the run, on any worker, continues the caller's trace; child
  flows inherit the trace id, so their spans join the same trace.
- ``activation {flow}`` (CONSUMER): one per activation, with why it runs
  (``steadyflow.activation.reason``: start, wake_up, recovery, replay) and how
  it ended; waits, sleeps, child starts and timers are its span events.
- ``step {name}`` (INTERNAL): one per live step attempt, a child of its
  activation's span and the current span while the step's body runs. A failed
  attempt has status ERROR and an exception event. Replayed steps do not run:
  they make no span.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Mapping, Sequence
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any

import attrs
from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sdk._core._waiting import key_label, kinds
from sdk.model._intercept import ActivationInfo, ActivationOutcome, ActivationReason, Interceptor

if TYPE_CHECKING:
    from sdk._core._types import RunOptions, WaitingOn
    from sdk.client._client import Client
    from sdk.model._queues import QueueInfo

__all__ = ["OtelInterceptor"]

_SCOPE = "steadyflow"
_PROPAGATOR = TraceContextTextMapPropagator()
_STARTS = (ActivationReason.START, ActivationReason.REPLAY)
#: the `start_run` span of the `Client.start` under way in this task: run id, span,
#: the token of its attached context, and the entry of an enclosing start
_starting: ContextVar[tuple[str, Span, Token[otel_context.Context], Any] | None] = ContextVar(
    "steadyflow_otel_starting", default=None
)
_RUN_ENDS = {
    ActivationOutcome.COMPLETED: "completed",
    ActivationOutcome.FAILED: "failed",
    ActivationOutcome.CANCELED: "canceled",
}


def _trace_context(trace_id: str | None) -> otel_context.Context:
    """The OTel context a run's `trace_id` continues: its span when it is a W3C
    ``traceparent``, else an empty context (the activation span starts a trace)."""
    if trace_id is None:
        return otel_context.Context()
    return _PROPAGATOR.extract({"traceparent": trace_id}, context=otel_context.Context())


def _step_name(key: str) -> str:
    """``"charge#2"`` -> ``"charge"``: metrics are per step name, never per call."""
    return key.rpartition("#")[0] or key


@attrs.define
class _Step:
    span: Span
    started: float  # perf_counter
    token: Token[otel_context.Context]  # attached while the body runs


@attrs.define
class _Live:
    """One activation in progress on this worker."""

    info: ActivationInfo
    span: Span
    ctx: otel_context.Context
    started: float  # perf_counter
    common: dict[str, Any]  # the correlation attributes of its spans
    steps: dict[str, _Step] = attrs.field(factory=dict)


class OtelInterceptor(Interceptor):
    """Spans, metrics and log correlation through the OpenTelemetry API.

    Args:
        tracer_provider: default the global one (`opentelemetry.trace`).
        meter_provider: default the global one (`opentelemetry.metrics`).

    Pass the same instance to `Client(interceptors=[...])` (to record the caller's
    trace context with each run it starts) and to `Worker(interceptors=[...])`.
    For the queue gauges, run `watch_queues` (or call `sample_queues`).
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        self._tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(_SCOPE, meter_provider=meter_provider)
        self._live: dict[str, _Live] = {}
        self._queues: list[QueueInfo] = []
        self._runs_started = meter.create_counter(
            "steadyflow.runs.started", "{run}", "Runs that began executing (first activation)"
        )
        self._runs_ended = {
            name: meter.create_counter(
                f"steadyflow.runs.{name}", "{run}", f"Runs that ended {name}"
            )
            for name in _RUN_ENDS.values()
        }
        self._activations = meter.create_counter(
            "steadyflow.activations", "{activation}", "Activations, by reason and outcome"
        )
        self._activation_duration = meter.create_histogram(
            "steadyflow.activation.duration", "s", "Wall time of an activation"
        )
        self._replayed = meter.create_histogram(
            "steadyflow.activation.replayed", "{entry}", "Journal entries replayed per activation"
        )
        self._step_duration = meter.create_histogram(
            "steadyflow.step.duration", "s", "Wall time of a live step attempt"
        )
        self._retries = meter.create_counter(
            "steadyflow.step.retries", "{attempt}", "Failed step attempts that will be retried"
        )
        self._takeovers = meter.create_counter(
            "steadyflow.lease.takeovers", "{run}", "Runs whose expired lease a worker took over"
        )
        self._timer_lag = meter.create_histogram(
            "steadyflow.timer.lag", "s", "How late a durable timer fired (fired - due)"
        )
        meter.create_observable_gauge(
            "steadyflow.queue.depth", [self._observe_depth], "{run}",
            "Ready runs per queue (last sample_queues)",
        )  # fmt: skip
        meter.create_observable_gauge(
            "steadyflow.queue.executing", [self._observe_executing], "{run}",
            "Executing runs per queue (last sample_queues)",
        )  # fmt: skip
        meter.create_observable_gauge(
            "steadyflow.queue.age", [self._observe_age], "s",
            "Age of the oldest ready run per queue (last sample_queues)",
        )  # fmt: skip

    # -- client side -------------------------------------------------------------

    def run_starting(self, flow: str, run_id: str, options: RunOptions) -> RunOptions:
        if options.trace_id is not None:
            return options  # the caller's own trace id (or traceparent) wins
        span = self._tracer.start_span(
            f"start_run {flow}",
            kind=SpanKind.PRODUCER,
            attributes={"steadyflow.run_id": run_id, "steadyflow.flow": flow},
        )
        ctx = trace.set_span_in_context(span)
        # current while the start is written (the store's own spans nest in it)
        _starting.set((run_id, span, otel_context.attach(ctx), _starting.get()))
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=ctx)
        traceparent = carrier.get("traceparent")
        if traceparent is None:  # no SDK installed: a no-op span has no context
            return options
        return attrs.evolve(options, trace_id=traceparent)

    def run_started(self, run_id: str, error: BaseException | None) -> None:
        started = _starting.get()
        if started is None or started[0] != run_id:
            return  # run_starting made no span (a trace id was given)
        _, span, token, outer = started
        otel_context.detach(token)
        _starting.set(outer)
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:200]))
        span.end()

    # -- activations ----------------------------------------------------------------

    def activation_started(self, info: ActivationInfo) -> None:
        common: dict[str, Any] = {
            "steadyflow.run_id": info.run_id,
            "steadyflow.flow": info.flow,
            "steadyflow.trace_id": info.trace_id or info.run_id,
        }
        optional = {
            "steadyflow.flow_version": info.flow_version,
            "steadyflow.tenant_id": info.tenant_id,
            "steadyflow.schedule_id": info.schedule_id,
            "steadyflow.parent_run_id": info.parent_run_id,
        }
        common.update({k: v for k, v in optional.items() if v is not None})
        span = self._tracer.start_span(
            f"activation {info.flow}",
            context=_trace_context(info.trace_id),
            kind=SpanKind.CONSUMER,
            attributes={
                **common,
                "steadyflow.queue": info.queue,
                "steadyflow.activation.reason": info.reason.value,
                "steadyflow.activation.replayed": info.replayed,
                "steadyflow.recoveries": info.recoveries,
                "steadyflow.generation": info.generation,
            },
        )
        self._live[info.run_id] = _Live(
            info, span, trace.set_span_in_context(span), time.perf_counter(), common
        )
        flow = {"steadyflow.flow": info.flow}
        self._replayed.record(info.replayed, flow)
        if info.reason in _STARTS and info.generation == 0:
            self._runs_started.add(1, flow)

    def activation_finished(self, info: ActivationInfo, outcome: ActivationOutcome) -> None:
        live = self._live.get(info.run_id)
        if live is None or live.info is not info:
            return  # a newer activation of the run took over the entry
        del self._live[info.run_id]
        for step in live.steps.values():  # cut off by a crash, a lost lease or a stop
            step.span.set_status(Status(StatusCode.ERROR, f"activation {outcome.value}"))
            step.span.end()
        span = live.span
        span.set_attribute("steadyflow.activation.outcome", outcome.value)
        if outcome in (ActivationOutcome.FAILED, ActivationOutcome.ABANDONED):
            span.set_status(Status(StatusCode.ERROR, f"activation {outcome.value}"))
        span.end()
        flow = {"steadyflow.flow": info.flow}
        self._activations.add(
            1,
            {**flow, "steadyflow.activation.reason": info.reason.value,
             "steadyflow.activation.outcome": outcome.value},
        )  # fmt: skip
        self._activation_duration.record(time.perf_counter() - live.started, flow)
        ended = _RUN_ENDS.get(outcome)
        if ended is not None:
            self._runs_ended[ended].add(1, flow)

    # -- steps ----------------------------------------------------------------------

    def step_started(self, run_id: str, key: str, attempt: int) -> None:
        live = self._live.get(run_id)
        if live is None:
            return
        span = self._tracer.start_span(
            f"step {_step_name(key)}",
            context=live.ctx,
            attributes={**live.common, "steadyflow.step_key": key, "steadyflow.attempt": attempt},
        )
        # the step's own instrumented calls (HTTP, DB) become children of its span
        token = otel_context.attach(trace.set_span_in_context(span))
        live.steps[key] = _Step(span, time.perf_counter(), token)

    def step_finished(self, run_id: str, key: str, attempt: int) -> None:
        self._end_step(run_id, key, None, False)

    def step_failed(
        self, run_id: str, key: str, attempt: int, error: BaseException, retrying: bool
    ) -> None:
        self._end_step(run_id, key, error, retrying)

    def _end_step(self, run_id: str, key: str, error: BaseException | None, retrying: bool) -> None:
        live = self._live.get(run_id)
        step = live.steps.pop(key, None) if live is not None else None
        if live is None or step is None:
            return
        otel_context.detach(step.token)
        span = step.span
        labels = {"steadyflow.flow": live.info.flow, "steadyflow.step": _step_name(key)}
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:200]))
            span.set_attribute("steadyflow.step.retrying", retrying)
            if retrying:
                self._retries.add(1, labels)
        span.end()
        outcome = "ok" if error is None else "error"
        self._step_duration.record(
            time.perf_counter() - step.started, {**labels, "steadyflow.step.outcome": outcome}
        )

    # -- waits, sleeps, child starts, timers -------------------------------------------

    def call_started(self, run_id: str, key: str, kind: str) -> None:
        self._event(run_id, "steadyflow.call.started", key, kind)

    def call_finished(self, run_id: str, key: str, kind: str) -> None:
        self._event(run_id, "steadyflow.call.finished", key, kind)

    def _event(self, run_id: str, name: str, key: str, kind: str, **more: Any) -> None:
        live = self._live.get(run_id)
        if live is None or kind == "deliver":  # a delivery: not a part of an activation
            return
        span = live.span
        if kind == "emit":  # in a step's body: its span (or the step's own) is current
            current = trace.get_current_span()
            if current.is_recording():
                span = current
        # the call as the flow wrote it ("wait approve", "sleep", "child shop.line"), not
        # its journal key
        call = key_label(key) or key
        span.add_event(name, {"steadyflow.call": call, "steadyflow.call_kind": kind, **more})

    def run_parked(self, run_id: str, waiting_on: Sequence[WaitingOn]) -> None:
        live = self._live.get(run_id)
        if live is None:
            return
        live.span.set_attributes({
            "steadyflow.waiting_on": [w.describe() for w in waiting_on],
            "steadyflow.waiting_on.kinds": kinds(waiting_on),
        })  # fmt: skip

    def timer_fired(self, run_id: str, key: str, kind: str, due: float, fired: float) -> None:
        lag = max(fired - due, 0.0)
        self._event(run_id, "steadyflow.timer.fired", key, kind, **{"steadyflow.timer.lag": lag})
        live = self._live.get(run_id)
        labels = {"steadyflow.timer.kind": kind}
        if live is not None:
            labels["steadyflow.flow"] = live.info.flow
        self._timer_lag.record(lag, labels)

    def leases_recovered(self, count: int) -> None:
        self._takeovers.add(count)

    # -- logs -------------------------------------------------------------------------

    def log_context(self, run_id: str, step_key: str | None) -> Mapping[str, str]:
        live = self._live.get(run_id)
        if live is None:
            return {}
        step = live.steps.get(step_key) if step_key is not None else None
        ctx = (step.span if step is not None else live.span).get_span_context()
        if not ctx.is_valid:
            return {}
        return {
            "otel_trace_id": trace.format_trace_id(ctx.trace_id),
            "otel_span_id": trace.format_span_id(ctx.span_id),
        }

    # -- queue gauges ---------------------------------------------------------------------

    async def sample_queues(self, client: Client) -> None:
        """Read `Client.queues` once (one store call); the queue gauges report it."""
        self._queues = await client.queues()

    async def watch_queues(self, client: Client, interval: float = 15.0) -> None:
        """`sample_queues` every `interval` seconds, until cancelled (run it as a task
        beside a worker: a gauge's callback cannot wait for the store itself). A
        failed read keeps the last sample."""
        while True:
            with contextlib.suppress(Exception):  # an outage: the workers log it
                await self.sample_queues(client)
            await asyncio.sleep(interval)

    def _observe(self, values: Iterable[tuple[str, float | None]]) -> list[Observation]:
        return [Observation(v, {"steadyflow.queue": q}) for q, v in values if v is not None]

    def _observe_depth(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._observe((q.name, q.pending) for q in self._queues)

    def _observe_executing(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._observe((q.name, q.executing) for q in self._queues)

    def _observe_age(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._observe((q.name, q.oldest_pending_age) for q in self._queues)
