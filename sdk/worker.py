"""``python -m sdk.worker MODULE [MODULE...] --store URL``: run a worker process.

Imports the modules (their ``@flow`` definitions register), then serves runs
until SIGTERM or SIGINT: it stops claiming, lets in-flight activations finish
within the grace period and hands the rest back to the queue. This module is
the CLI only; `sdk` never imports it, so it is not imported twice.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import signal
import sys
from collections.abc import Sequence

from sdk._worker import Worker


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m sdk.worker",
        description="Run a Steadyflow worker serving the flows defined in MODULEs.",
    )
    p.add_argument("modules", nargs="+", metavar="MODULE", help="module(s) that define flows")
    p.add_argument(
        "--store",
        default=None,
        help="store URL: redis://, rediss:// or memory:// "
        "(default: $STEADYFLOW_STORE or redis://127.0.0.1:6379/0)",
    )
    p.add_argument("--concurrency", type=int, default=16, help="activations at once (16)")
    p.add_argument("--lease-ttl", type=float, default=30.0, help="lease seconds (30)")
    p.add_argument("--queues", default=None, help="comma-separated queues (default: all)")
    p.add_argument("--grace", type=float, default=None, help="shutdown grace seconds (lease TTL)")
    p.add_argument("--prefix", default=None, help="key prefix ($STEADYFLOW_PREFIX or sf)")
    p.add_argument(
        "--partitions", type=int, default=1,
        help="hash-tag partitions; the same in every process of a deployment (1)",
    )  # fmt: skip
    p.add_argument("--log-level", default=os.environ.get("STEADYFLOW_LOG_LEVEL", "INFO"))
    return p.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    from stores import open_store

    store = open_store(args.store, prefix=args.prefix, partitions=args.partitions)
    queues = [q for q in args.queues.split(",") if q] if args.queues else None
    worker = Worker(
        store,
        concurrency=args.concurrency,
        lease_ttl=args.lease_ttl,
        queues=queues,
        grace_period=args.grace,
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _stop, worker, sig)
    try:
        await worker.run()
    finally:
        await store.close()


def _stop(worker: Worker, sig: signal.Signals) -> None:
    logging.getLogger("steadyflow.worker").info("%s received: stopping", sig.name)
    asyncio.get_running_loop().create_task(worker.stop())


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for module in args.modules:
        importlib.import_module(module)
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
