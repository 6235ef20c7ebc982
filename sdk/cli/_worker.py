"""``steadyflow worker MODULE...`` (also ``python -m sdk.worker``): run a worker process.

Imports the modules (their ``@flow`` definitions register), then serves runs
until SIGTERM or SIGINT: it stops claiming, lets in-flight activations finish
within the grace period and hands the rest back to the queue, and exits 0.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import sys
from collections.abc import Sequence

import click

from sdk.cli._options import CONTEXT_SETTINGS, EXIT_CODES, StoreOptions, store_options
from sdk.errors import InvalidArgument
from sdk.model._intercept import Interceptor
from sdk.store import PartitionsMismatch
from sdk.worker._worker import Worker

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@click.command("worker", context_settings=CONTEXT_SETTINGS, epilog=EXIT_CODES)
@click.argument("modules", nargs=-1, required=True, metavar="MODULE...")
@store_options
@click.option(
    "--concurrency",
    metavar="N",
    type=click.IntRange(min=1),
    default=16,
    show_default=True,
    help="Activations executing at once in this process.",
)
@click.option(
    "--lease-ttl",
    metavar="SECONDS",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    help="Seconds a claimed run stays owned without a heartbeat.",
)
@click.option(
    "--queues", metavar="A,B", default=None, help="Comma-separated queues to serve. [default: all]"
)
@click.option(
    "--grace",
    metavar="SECONDS",
    type=click.FloatRange(min=0),
    default=None,
    help="Seconds a stopping worker lets in-flight activations finish. [default: the lease TTL]",
)
@click.option(
    "--sticky-cache",
    metavar="N",
    type=click.IntRange(min=0),
    default=1000,
    show_default=True,
    help="Parked runs kept in memory: their wake-ups continue the flow instead of "
    "replaying its journal (0: replay every wake-up).",
)
@click.option(
    "--sticky-delay",
    metavar="SECONDS",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Seconds a kept run's wake-up waits for this worker before any worker takes it.",
)
@click.option(
    "--log-level", metavar="LEVEL", type=click.Choice(LOG_LEVELS, case_sensitive=False),
    envvar="STEADYFLOW_LOG_LEVEL", show_envvar=True, default="INFO", show_default=True,
    help="Log level; logs go to stderr.",
)  # fmt: skip
@click.option(
    "--otel", is_flag=True, default=False,
    help="Trace and measure activations with OpenTelemetry (sdk.otel), on the global "
    "providers: run under opentelemetry-instrument or configure OTEL_* variables.",
)  # fmt: skip
def worker(
    modules: tuple[str, ...],
    store: StoreOptions,
    concurrency: int,
    lease_ttl: float,
    queues: str | None,
    grace: float | None,
    sticky_cache: int,
    sticky_delay: float,
    log_level: str,
    otel: bool,
) -> None:
    """Serve the flows that the MODULEs define, until SIGTERM or SIGINT.

    The current directory is on the import path. Stopping lets in-flight
    activations finish within the grace period and hands the rest back.
    """
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    import_flow_modules(modules)
    served = [q for q in queues.split(",") if q] if queues else None
    interceptors = [otel_interceptor()] if otel else []
    asyncio.run(
        serve(
            store, concurrency, lease_ttl, served, grace, interceptors,
            sticky=(sticky_cache, sticky_delay),
        )
    )  # fmt: skip


def otel_interceptor() -> Interceptor:
    """`sdk.otel.OtelInterceptor` on the global tracer and meter providers (set them up
    with ``opentelemetry-instrument`` or the ``OTEL_*`` environment variables)."""
    try:
        from sdk.otel import OtelInterceptor
    except ImportError as exc:
        raise click.UsageError(
            f"--otel needs OpenTelemetry: pip install 'steadyflow[otel]' ({exc})"
        ) from None
    return OtelInterceptor()


def import_flow_modules(modules: tuple[str, ...]) -> None:
    """Import each module; one that does not exist is a clear error (exit 1).

    An exception raised by the module's own code propagates with its
    traceback: that is a bug to read, not a usage error.
    """
    if os.getcwd() not in sys.path:  # the console script's sys.path[0] is its bin/
        sys.path.insert(0, os.getcwd())
    for module in modules:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name is None or not (module == e.name or module.startswith(e.name + ".")):
                raise  # the module exists; something it imports does not
            raise click.ClickException(
                f"cannot import the flow module {module!r}: {e} "
                f"(the current directory {os.getcwd()} is on the import path)"
            ) from e


async def serve(
    options: StoreOptions,
    concurrency: int,
    lease_ttl: float,
    queues: list[str] | None,
    grace: float | None,
    interceptors: Sequence[Interceptor] = (),
    *,
    sticky: tuple[int, float] = (1000, 1.0),
) -> None:
    """Run a worker until SIGTERM or SIGINT, then close the store (`sticky`: the
    worker's sticky_cache and sticky_delay)."""
    store = options.open()
    try:
        worker = Worker(
            store, concurrency=concurrency, lease_ttl=lease_ttl, queues=queues,
            grace_period=grace, interceptors=interceptors, sticky_cache=sticky[0],
            sticky_delay=sticky[1],
        )  # fmt: skip
    except InvalidArgument as exc:  # an option out of range: a usage error, not a crash
        await store.close()
        raise click.UsageError(str(exc)) from None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _stop, worker, sig)
    try:
        await worker.run()
    except PartitionsMismatch as exc:  # a wrong --partitions: a usage error, not a crash
        raise click.UsageError(str(exc)) from None
    finally:
        await store.close()


def _stop(worker: Worker, sig: signal.Signals) -> None:
    logging.getLogger("steadyflow.worker").info("%s received: stopping", sig.name)
    asyncio.get_running_loop().create_task(worker.stop())
