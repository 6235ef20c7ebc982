"""OpenTelemetry (sdk.otel): the span tree of a run with a retry, a wait, a sleep and a
crash; the caller's trace context carried into the run; child flows in their parent's
trace; no step span for a replayed step; metric values; correlated, replay-quiet logs."""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode, format_span_id, format_trace_id

from sdk import (
    Intent,
    RetryPolicy,
    RunOptions,
    channel,
    current_run,
    emit,
    flow,
    run_child,
    sleep,
    step,
    wait_for,
)
from sdk.errors import IdempotencyConflict
from sdk.otel import OtelInterceptor
from stores.redis import RedisStore
from testing import FakeClock, FlowTestEnv

START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
LEASE_TTL = 30.0
FLOW = "tests.otel.order"


@attrs.define
class Otel:
    interceptor: OtelInterceptor
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    tracer_provider: TracerProvider

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        return sorted(
            (s for s in self.finished() if s.name.startswith(prefix)),
            key=lambda s: s.start_time or 0,
        )

    def points(self, name: str) -> list[Any]:
        data = self.metrics.get_metrics_data()
        found: list[Any] = []
        if data is None:  # nothing recorded at all
            return found
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == name:
                        found.extend(m.data.data_points)
        return found

    def total(self, name: str, **labels: str) -> float:
        """The sum of a counter's points (or of a histogram's sums) matching `labels`."""
        out = 0.0
        for p in self.points(name):
            if all(p.attributes.get(f"steadyflow.{k}") == v for k, v in labels.items()):
                out += p.sum if hasattr(p, "bucket_counts") else p.value
        return out


@pytest.fixture(name="otel")
def otel_fixture() -> Iterator[Otel]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    interceptor = OtelInterceptor(tracer_provider=tracer_provider, meter_provider=meter_provider)
    yield Otel(interceptor, exporter, reader, tracer_provider)
    meter_provider.shutdown()
    tracer_provider.shutdown()


def instrument(env: FlowTestEnv, otel: Otel) -> None:
    """The env's client records trace contexts; its worker reports to `otel`."""
    env.client.interceptors.append(otel.interceptor)
    env.worker.engine.interceptors.append(otel.interceptor)


FLAKY: list[int] = []


@step(retry=RetryPolicy(max_attempts=3, initial_interval=1.0))
async def flaky(n: int) -> int:
    FLAKY.append(n)
    if len(FLAKY) == 1:
        raise ConnectionError("the service is down")
    return n


@step
async def charge(amount: int) -> int:
    current_run().logger.info("charging %d", amount)
    return amount * 2


@flow(name=FLOW)
async def order(n: int) -> int:
    current_run().logger.info("order begins")
    a = await flaky(n)
    bonus = await wait_for("go")
    await sleep(60)
    return await charge(a) + int(bonus)


def attr(span: ReadableSpan, name: str) -> Any:
    assert span.attributes is not None
    return span.attributes.get(name)


async def test_a_run_with_a_retry_a_wait_a_sleep_and_a_crash_makes_the_expected_span_tree(
    store: RedisStore, otel: Otel, caplog: pytest.LogCaptureFixture
) -> None:
    FLAKY.clear()
    caplog.set_level(logging.INFO, logger="steadyflow.flow")
    tracer = otel.tracer_provider.get_tracer("the caller")
    async with FlowTestEnv(
        FakeClock(START), store=store, lease_ttl=LEASE_TTL, interceptors=[otel.interceptor]
    ) as env:
        with tracer.start_as_current_span("caller") as caller:
            handle = await env.start(order, 21, tenant_id="acme")
        await env.run_until_idle()  # flaky#1 fails: parked on its retry timer (due in 1s)
        await env.advance(5)  # retried 4s late; then waits for "go"
        await env.client.signal(handle.run_id, "go", 3)
        await env.run_until_idle()  # the wait completes; parked on the 60s sleep
        env.crash_at("charge#1", "after")
        await env.advance(70)  # the sleep fires 10s late; charge runs, its worker "dies"
        await env.advance(LEASE_TTL + 1)  # the lease is taken over: a recovery
        assert await handle.result() == 45

    trace_id = caller.get_span_context().trace_id
    (start,) = otel.named("start_run")
    assert start.name == f"start_run {FLOW}"
    assert start.kind is SpanKind.PRODUCER
    assert start.parent is not None and start.parent.span_id == caller.get_span_context().span_id

    acts = otel.named("activation")
    assert [attr(a, "steadyflow.activation.reason") for a in acts] == [
        "start", "wake_up", "wake_up", "wake_up", "recovery",
    ]  # fmt: skip
    assert [attr(a, "steadyflow.activation.outcome") for a in acts] == [
        "parked", "parked", "parked", "abandoned", "completed",
    ]  # fmt: skip
    for a in acts:  # every activation continues the caller's trace, under the start span
        assert a.context is not None and a.context.trace_id == trace_id
        assert a.parent is not None and a.parent.span_id == start.context.span_id
        assert a.kind is SpanKind.CONSUMER
        assert attr(a, "steadyflow.run_id") == handle.run_id
        assert attr(a, "steadyflow.flow") == FLOW
        assert attr(a, "steadyflow.tenant_id") == "acme"
        assert attr(a, "steadyflow.trace_id").startswith("00-")
    assert acts[3].status.status_code is StatusCode.ERROR  # the crash is visible
    assert acts[4].status.status_code is StatusCode.UNSET

    steps = otel.named("step")
    owner = {a.context.span_id: i for i, a in enumerate(acts)}
    seen = [
        (s.name, attr(s, "steadyflow.attempt"), s.status.status_code,
         owner[s.parent.span_id])  # type: ignore[union-attr]
        for s in steps
    ]  # fmt: skip
    # one span per live attempt; the replayed steps of later activations make none
    assert seen == [
        ("step flaky", 1, StatusCode.ERROR, 0),
        ("step flaky", 2, StatusCode.UNSET, 1),
        ("step charge", 1, StatusCode.ERROR, 3),  # cut off by the crash
        ("step charge", 1, StatusCode.UNSET, 4),  # run again by the recovery
    ]
    assert [attr(s, "steadyflow.step_key") for s in steps] == [
        "flaky#1", "flaky#1", "charge#1", "charge#1",
    ]  # fmt: skip
    failed = steps[0]
    assert attr(failed, "steadyflow.step.retrying") is True
    (exc_event,) = [e for e in failed.events if e.name == "exception"]
    assert exc_event.attributes is not None
    assert exc_event.attributes["exception.type"] == "ConnectionError"
    assert attr(steps[2], "steadyflow.step_key") == "charge#1"

    # waits and sleeps are events on the activation spans, named as the flow wrote them
    def events(i: int) -> list[tuple[str, Any, Any]]:
        return [
            (e.name, (e.attributes or {}).get("steadyflow.call"),
             (e.attributes or {}).get("steadyflow.call_kind"))
            for e in acts[i].events
        ]  # fmt: skip

    assert ("steadyflow.timer.fired", "flaky#1", "retry") in events(1)
    assert ("steadyflow.call.started", "wait go", "wait") in events(1)
    assert ("steadyflow.call.finished", "wait go", "wait") in events(2)
    assert ("steadyflow.call.started", "sleep", "sleep") in events(2)
    assert ("steadyflow.call.finished", "sleep", "sleep") in events(3)
    # a parking activation says what the run waits for; no journal key anywhere
    assert [attr(a, "steadyflow.waiting_on.kinds") for a in acts] == [
        ("retry",), ("signal",), ("sleep",), None, None,
    ]  # fmt: skip
    assert attr(acts[1], "steadyflow.waiting_on") == ("signal 'go'",)
    retry = "retry of step 'flaky#1' at 2026-01-05T09:00:01Z"
    assert attr(acts[0], "steadyflow.waiting_on") == (retry,)
    every = [v for a in acts for e in a.events for v in (e.attributes or {}).values()]
    every += [v for a in acts for v in (a.attributes or {}).values()]
    assert not any(isinstance(v, str) and v.startswith("~") for v in every)

    # metrics
    assert otel.total("steadyflow.runs.started", flow=FLOW) == 1
    assert otel.total("steadyflow.runs.completed", flow=FLOW) == 1
    assert otel.total("steadyflow.runs.failed", flow=FLOW) == 0
    assert otel.total("steadyflow.step.retries", flow=FLOW, step="flaky") == 1
    assert otel.total("steadyflow.lease.takeovers") == 1
    assert otel.total("steadyflow.timer.lag", **{"timer.kind": "retry"}) == 4.0
    assert otel.total("steadyflow.timer.lag", **{"timer.kind": "sleep"}) == 10.0
    assert otel.total("steadyflow.activations", **{"activation.reason": "recovery"}) == 1
    assert otel.total("steadyflow.activations", **{"activation.outcome": "parked"}) == 3
    replayed = [attr(a, "steadyflow.activation.replayed") for a in acts]
    assert replayed[0] == 0 and replayed[4] >= 3
    (hist,) = otel.points("steadyflow.activation.replayed")
    assert hist.count == 5 and hist.sum == sum(replayed)
    durations = {
        (p.attributes["steadyflow.step"], p.attributes["steadyflow.step.outcome"]): p.count
        for p in otel.points("steadyflow.step.duration")
    }
    assert durations == {("flaky", "error"): 1, ("flaky", "ok"): 1, ("charge", "ok"): 1}

    # logs: once each (replay-quiet), with the correlation ids and the OTel ids
    lines = [r for r in caplog.records if r.name == "steadyflow.flow"]
    begins = [r for r in lines if r.getMessage() == "order begins"]
    assert len(begins) == 1
    (begin,) = begins
    f = vars(begin)  # the record's attributes
    assert f["run_id"] == handle.run_id
    assert f["flow"] == FLOW
    assert f["tenant_id"] == "acme"
    assert f["step_key"] is None
    assert f["trace_id"] == attr(acts[0], "steadyflow.trace_id")
    assert f["otel_trace_id"] == format_trace_id(trace_id)
    assert acts[0].context is not None
    assert f["otel_span_id"] == format_span_id(acts[0].context.span_id)
    charging = [r for r in lines if r.getMessage() == "charging 21"]
    assert len(charging) == 2  # the crashed attempt and its re-run: both ran live
    assert {vars(r)["step_key"] for r in charging} == {"charge#1"}
    step_ids = [format_span_id(s.context.span_id) for s in steps[2:] if s.context is not None]
    assert [vars(r)["otel_span_id"] for r in charging] == step_ids


@step
async def child_step(x: int) -> int:
    return x + 1


@flow(name="tests.otel.child")
async def child(x: int) -> int:
    return int(await child_step(x))


@flow(name="tests.otel.parent")
async def parent(x: int) -> int:
    return int(await run_child(child, x, run_id="otel-child-1"))


async def test_a_child_flow_joins_its_parents_trace(store: RedisStore, otel: Otel) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        instrument(env, otel)
        handle = await env.start(parent, 1, run_id="otel-parent-1")
        await env.run_until_idle()
        assert await handle.result() == 2

    (start,) = otel.named("start_run")
    parents = otel.named("activation tests.otel.parent")
    children = otel.named("activation tests.otel.child")
    assert parents and children
    trace_id = start.context.trace_id
    for span in parents + children:
        assert span.context.trace_id == trace_id
    for span in children:
        assert attr(span, "steadyflow.parent_run_id") == "otel-parent-1"
        assert attr(span, "steadyflow.run_id") == "otel-child-1"
    child_steps = [s for s in otel.named("step child_step")]
    assert len(child_steps) == 1
    assert child_steps[0].parent.span_id == children[0].context.span_id  # type: ignore[union-attr]
    events = [e.attributes for a in parents for e in a.events]
    assert any(e and e.get("steadyflow.call_kind") == "child" for e in events)


async def test_a_traceparent_given_as_trace_id_is_continued(otel: Otel) -> None:
    given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with FlowTestEnv(FakeClock(START)) as env:
        instrument(env, otel)
        handle = await env.start(child, 1, options=RunOptions(trace_id=given))
        await env.run_until_idle()
        assert await handle.result() == 2
        assert (await env.client.get(handle.run_id)).trace_id == given

    assert otel.named("start_run") == []  # the caller's own trace id is kept as given
    (act,) = otel.named("activation")
    assert format_trace_id(act.context.trace_id) == "0af7651916cd43dd8448eb211c80319c"
    assert act.parent is not None and format_span_id(act.parent.span_id) == "b7ad6b7169203331"


async def test_without_a_client_interceptor_each_activation_is_a_trace_of_its_own(
    otel: Otel,
) -> None:
    async with FlowTestEnv(FakeClock(START)) as env:
        env.worker.engine.interceptors.append(otel.interceptor)
        handle = await env.start(child, 1)
        await env.run_until_idle()
        assert await handle.result() == 2
        assert (await env.client.get(handle.run_id)).trace_id == handle.run_id

    (act,) = otel.named("activation")
    assert act.parent is None
    assert attr(act, "steadyflow.trace_id") == handle.run_id
    (st,) = otel.named("step")
    assert st.parent.span_id == act.context.span_id  # type: ignore[union-attr]


def test_import_sdk_does_not_need_opentelemetry() -> None:
    """`import sdk` works where OpenTelemetry cannot be imported, and loads no sdk.otel."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'opentelemetry':\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import sdk, stores, testing\n"
        "assert 'sdk.otel' not in sys.modules\n"
        "assert not any(m.startswith('opentelemetry') for m in sys.modules), sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@step
async def refuse(x: int) -> int:
    raise ValueError(f"no {x}")


@flow(name="tests.otel.failing")
async def failing(x: int) -> int:
    return int(await refuse(x))


async def test_a_failed_run_is_counted_and_its_activation_span_is_an_error(
    store: RedisStore, otel: Otel
) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        instrument(env, otel)
        handle = await env.start(failing, 7)
        await env.run_until_idle()
        assert (await env.client.get(handle.run_id)).status == "failed"

    (act,) = otel.named("activation")
    assert attr(act, "steadyflow.activation.outcome") == "failed"
    assert act.status.status_code is StatusCode.ERROR
    (st,) = otel.named("step")
    assert st.status.status_code is StatusCode.ERROR
    assert attr(st, "steadyflow.step.retrying") is False
    assert otel.total("steadyflow.runs.failed", flow="tests.otel.failing") == 1
    assert otel.total("steadyflow.runs.completed", flow="tests.otel.failing") == 0
    assert otel.total("steadyflow.step.retries") == 0


async def test_a_replayed_run_says_so_and_makes_no_span_for_reused_steps(
    store: RedisStore, otel: Otel
) -> None:
    async with FlowTestEnv(FakeClock(START), store=store) as env:
        instrument(env, otel)
        first = await env.start(child, 1)
        await env.run_until_idle()
        again = await env.client.replay(first.run_id)
        await env.run_until_idle()
        assert await again.result() == 2

    acts = otel.named("activation")
    assert [attr(a, "steadyflow.activation.reason") for a in acts] == ["start", "replay"]
    assert [attr(a, "steadyflow.run_id") for a in acts] == [first.run_id, again.run_id]
    # the replay reuses the recorded result of child_step: only the first run ran it
    assert [attr(s, "steadyflow.run_id") for s in otel.named("step")] == [first.run_id]
    assert otel.total("steadyflow.runs.started") == 2


async def test_the_queue_gauges_report_the_last_sample(otel: Otel) -> None:
    async with FlowTestEnv(FakeClock(START)) as env:
        await env.start(child, 1)
        env.clock.advance(30)
        await env.start(child, 2)
        assert otel.points("steadyflow.queue.depth") == []  # nothing sampled yet
        await otel.interceptor.sample_queues(env.client)

    def default(name: str) -> float:
        # (queues declared in the default registry by other modules are reported too)
        (point,) = [p for p in otel.points(name) if p.attributes == {"steadyflow.queue": "default"}]
        return float(point.value)

    assert default("steadyflow.queue.depth") == 2
    assert default("steadyflow.queue.age") == 30.0
    assert default("steadyflow.queue.executing") == 0


async def test_a_start_that_raises_leaves_an_error_start_span(otel: Otel) -> None:
    async with FlowTestEnv(FakeClock(START)) as env:
        instrument(env, otel)
        await env.start(child, 1, run_id="otel-same")
        with pytest.raises(IdempotencyConflict):
            await env.start(child, 2, run_id="otel-same")

    ok, refused = otel.named("start_run")
    assert ok.status.status_code is StatusCode.UNSET
    assert refused.status.status_code is StatusCode.ERROR
    assert [e.name for e in refused.events] == ["exception"]
    assert attr(refused, "steadyflow.run_id") == "otel-same"


def test_sdk_otel_exports_the_interceptor() -> None:
    import inspect

    import sdk.otel

    assert sdk.otel.__all__ == ["OtelInterceptor"]
    assert inspect.getdoc(sdk.otel.OtelInterceptor)


@channel("tests.otel.mail")
async def mail(intent: Intent) -> None:
    pass


@step
async def announce(x: int) -> int:
    emit("tests.otel.mail", {"x": x})
    return x


@flow(name="tests.otel.emitting")
async def emitting(x: int) -> int:
    return int(await announce(x))


async def test_an_outbox_emit_is_an_event_on_its_steps_span(otel: Otel) -> None:
    async with FlowTestEnv(FakeClock(START)) as env:
        instrument(env, otel)
        handle = await env.start(emitting, 5)
        await env.run_until_idle()
        assert await handle.result() == 5

    (st,) = otel.named("step announce")
    kinds = [(e.name, (e.attributes or {}).get("steadyflow.call_kind")) for e in st.events]
    assert kinds == [("steadyflow.call.started", "emit"), ("steadyflow.call.finished", "emit")]
    for act in otel.named("activation"):  # delivering the intent is no part of an activation
        assert all(
            (e.attributes or {}).get("steadyflow.call_kind") != "deliver" for e in act.events
        )


@flow(name="tests.otel.patient")
async def patient() -> str:
    with contextlib.suppress(TimeoutError):
        await wait_for("never", timeout=10)
    await wait_for("go")
    return "done"


async def test_a_wait_deadline_reports_its_lag_and_a_cancel_is_counted(otel: Otel) -> None:
    async with FlowTestEnv(FakeClock(START)) as env:
        instrument(env, otel)
        handle = await env.start(patient)
        await env.run_until_idle()
        await env.advance(12)  # the deadline (10s) fires 2s late; then waits for "go"
        await env.client.cancel(handle.run_id, reason="not needed")
        await env.run_until_idle()
        assert (await env.client.get(handle.run_id)).status == "canceled"

    assert otel.total("steadyflow.timer.lag", **{"timer.kind": "wait"}) == 2.0
    outcomes = [attr(a, "steadyflow.activation.outcome") for a in otel.named("activation")]
    assert outcomes == ["parked", "parked", "canceled"]
    assert otel.total("steadyflow.runs.canceled", flow="tests.otel.patient") == 1
    assert otel.total("steadyflow.runs.completed", flow="tests.otel.patient") == 0


def test_the_worker_command_installs_the_interceptor_with_otel() -> None:
    from click.testing import CliRunner

    from sdk.cli import cli
    from sdk.cli._worker import otel_interceptor

    assert isinstance(otel_interceptor(), OtelInterceptor)  # on the global providers
    shown = CliRunner().invoke(cli, ["worker", "--help"])
    assert shown.exit_code == 0 and "--otel" in shown.output
