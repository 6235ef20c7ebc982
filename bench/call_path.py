"""The path of one run through the code, from `Client.start` to its result.

A flow of N steps and a wait for a signal runs on a real Redis (a worker in
this process: `run_until_idle`, the signal, `run_until_idle` again);
`sys.setprofile` watches every Python call made meanwhile and counts those
into the project's own modules (`sdk`, `stores`): how many calls, and how many
distinct modules they cross, from `Client.start` to the result. Two runs, of
2 and of 12 steps, give what one more step costs (calls, and the modules a
step goes through). The figures describe the structure (how far a reader
follows a run through the code), not its speed: `bench.step_overhead` times
a step.

It uses the public API only, so the same file measures an older checkout too:
``python -m bench.call_path [--store URL]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import types
import uuid
from collections import Counter
from typing import Any

from sdk import Client, Worker, flow, step, wait_for
from stores import open_store

_OURS = ("sdk", "stores")


@step(name="bench.call_path.one")
async def one(n: int) -> int:
    return n + 1


@flow(name="bench.call_path.flow")
async def steps(n: int) -> int:
    total = 0
    for _ in range(n // 2):
        total = await one(total)
    await wait_for("go")  # a park, a wake-up and a replay
    for _ in range(n - n // 2):
        total = await one(total)
    return total


class Watch:
    """Counts the calls into the project's modules while it is on."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def __call__(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if module.split(".")[0] in _OURS:
            self.calls[module] += 1

    def __enter__(self) -> Watch:
        sys.setprofile(self)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)


async def measure(url: str, n: int) -> Counter[str]:
    store = open_store(url, prefix=f"bench-path-{uuid.uuid4().hex[:8]}")
    try:
        client = Client(store)
        worker = Worker(store, [steps], sticky_cache=0)
        with Watch() as whole:
            handle = await client.start(steps, n)
            await worker.run_until_idle()
            await client.signal(handle.run_id, "go")
            await worker.run_until_idle()
            result = await handle.result(timeout=10)
        assert result == n, result
        await worker.stop()
    finally:
        await store.close()
    return whole.calls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", default="redis://127.0.0.1:6379/15")
    args = p.parse_args()
    small = asyncio.run(measure(args.store, 2))
    big = asyncio.run(measure(args.store, 12))
    per_step = (sum(big.values()) - sum(small.values())) / 10
    stepping = sorted(m for m in big if big[m] - small.get(m, 0) >= 10)
    print(
        f"start -> result, 2 steps and a signal: {sum(small.values())} calls into "
        f"sdk/stores, {len(small)} modules crossed"
    )
    print(f"one more step: {per_step:.0f} calls, through {len(stepping)} modules:")
    print("  " + " ".join(stepping))


if __name__ == "__main__":
    main()
