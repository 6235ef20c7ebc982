"""Hello, Steadyflow: a flow with three steps.

Serve it in one terminal and start a run from another::

    steadyflow worker examples.hello
    python -m examples.hello --name Ada

Both use the store ``$STEADYFLOW_STORE`` (else ``redis://127.0.0.1:6379/0``)
and the key prefix ``$STEADYFLOW_PREFIX`` (else ``sf``), unless given
``--store`` / ``--prefix``. The second command starts a run (a new run id each
time), waits for its result and prints it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from sdk import Client, current_run, flow, step
from stores import open_store


@step
async def compose(name: str) -> str:
    """Build the greeting."""
    return f"Hello, {name}"


@step
async def punctuate(text: str) -> str:
    """Add the punctuation."""
    return f"{text}!"


@step
async def sign(text: str) -> str:
    """Sign it. A real step would call a service; this one cannot fail."""
    return f"{text} (from Steadyflow)"


# An explicit name: it is stored with every run, and it must not change while
# runs are in flight. The default, f"{module}.{qualname}", would differ between
# `python -m examples.hello` (module "__main__") and the worker's import.
@flow(name="examples.hello")
async def hello(name: str) -> str:
    """Greet `name` in three journaled steps."""
    current_run().logger.info("greeting %s", name)  # quiet while replaying
    text = await compose(name)
    text = await punctuate(text)
    return await sign(text)


async def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m examples.hello", description="Start a hello run and print its result."
    )
    # Default None: open_store() reads $STEADYFLOW_STORE / $STEADYFLOW_PREFIX, as the worker does.
    p.add_argument("--store", default=None, help="store URL ($STEADYFLOW_STORE or local Redis)")
    p.add_argument("--prefix", default=None, help="key prefix ($STEADYFLOW_PREFIX or sf)")
    p.add_argument("--name", default="world")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the result")
    args = p.parse_args(argv)

    store = open_store(args.store, prefix=args.prefix)  # inside the event loop
    try:
        handle = await Client(store).start(hello, args.name)
        try:
            result = await handle.result(timeout=args.timeout)
        except TimeoutError as exc:  # it says whether any live worker serves the run
            where = store.describe()  # what open_store() chose, password redacted
            print(
                f"{exc}\nstart a worker: steadyflow worker examples.hello "
                f"--store {where['store']} --prefix {where['prefix']}",
                file=sys.stderr,
            )
            return 1
        print(result)
        return 0
    finally:
        await store.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
