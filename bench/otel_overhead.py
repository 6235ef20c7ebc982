"""Per-step overhead with the OpenTelemetry interceptor on, against no interceptor.

The flow of ``bench.step_overhead`` (a trivial step timed against the same
function undecorated, inside the flow) runs on two in-process workers over one
real Redis: ``off`` has no interceptor (the engine's default: its hooks cost a
test of an empty list), ``on`` has `sdk.otel.OtelInterceptor` with the OTel SDK's
`TracerProvider` (the batching span processor, as in production, in front of
an in-memory exporter emptied after each round) and `MeterProvider` (an in-memory reader):
every step makes its span and records its duration. Runs alternate off, on,
off, on... so machine noise falls on both alike. Reported: per-step overhead
(step - undecorated median) for each, and what the interceptor adds.

    python -m bench.otel_overhead [--steps 500] [--rounds 10] [--store URL] [--json]
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bench import flows
from bench._common import bench_store, emit, new_prefix, parser, summary, table
from sdk import Client, Worker
from sdk.otel import OtelInterceptor

__all__ = ["main", "measure"]


async def measure(url: str, steps: int = 500, rounds: int = 10) -> dict[str, Any]:
    exporter = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(BatchSpanProcessor(exporter))
    meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    otel = OtelInterceptor(tracer_provider=tracing, meter_provider=meters)
    timed: dict[str, tuple[list[float], list[float]]] = {"off": ([], []), "on": ([], [])}
    spans = 0
    async with bench_store(url, new_prefix("otel")) as store:
        client = Client(store)
        workers = {
            "off": Worker(store, [flows.overhead], concurrency=1),
            "on": Worker(store, [flows.overhead], concurrency=1, interceptors=[otel]),
        }

        async def run(mode: str, n: int) -> tuple[list[float], list[float]]:
            handle = await client.start(flows.overhead, n)
            await workers[mode].run_until_idle()
            s, p = await handle.result(timeout=60)
            return s, p

        for mode in workers:  # warm up both
            await run(mode, 100)
        tracing.force_flush()
        exporter.clear()
        for _ in range(rounds):
            for mode in ("off", "on"):
                s, p = await run(mode, steps)
                timed[mode][0].extend(s)
                timed[mode][1].extend(p)
            tracing.force_flush()
            spans += len(exporter.get_finished_spans())
            exporter.clear()
    meters.shutdown()
    tracing.shutdown()
    out: dict[str, Any] = {"steps": steps, "rounds": rounds, "spans_per_round": spans / rounds}
    for mode, (s, p) in timed.items():
        plain = summary(p)["median"]
        out[f"overhead_{mode}_us"] = summary([x - plain for x in s], 1e6)
    out["added_median_us"] = out["overhead_on_us"]["median"] - out["overhead_off_us"]["median"]
    return out


def report(r: dict[str, Any]) -> str:
    rows = [
        (f"per-step overhead, {mode}", *(r[f"overhead_{mode}_us"][q] for q in ("median", "p90")))
        for mode in ("off", "on")
    ]
    return (
        f"OpenTelemetry interceptor: {r['steps']} sequential steps x {r['rounds']} runs per mode"
        f" ({r['spans_per_round']:.0f} spans per round with it on)\n"
        f"{table(rows, ['µs', 'median', 'p90'])}\n"
        f"added by the interceptor (median): {r['added_median_us']:.1f} µs per step"
    )


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--rounds", type=int, default=10)
    a = p.parse_args()
    t0 = time.perf_counter()
    r = asyncio.run(measure(a.store, a.steps, a.rounds))
    print(report(r))
    print(f"({time.perf_counter() - t0:.1f}s)")
    emit("otel_overhead", r, a.json)


if __name__ == "__main__":
    main()
