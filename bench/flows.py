"""The flows the benchmarks run.

Importable by a worker process too: ``python -m sdk.worker bench.flows``.
Flow names are fixed (``bench.*``) so a client and a worker in separate
processes agree on them.
"""

from __future__ import annotations

import asyncio
import time

from sdk import flow, step, wait_for

__all__ = [
    "chain",
    "gathered",
    "noop",
    "noop_plain",
    "one_step",
    "overhead",
    "replay_then_wait",
    "timed_calls",
    "trivial",
    "wait_once",
]


async def noop_plain(i: int) -> int:
    """The undecorated twin of `noop`."""
    return i


@step(name="noop")
async def noop(i: int) -> int:
    """A trivial async step: all of its cost is Steadyflow's."""
    return i


@flow(name="bench.overhead")
async def overhead(n: int) -> list[list[float]]:
    """Times `n` step calls and `n` plain calls, interleaved, from inside the flow.

    Returns ``[step_seconds, plain_seconds]``, one entry per call.
    """
    return await timed_calls(n)


async def timed_calls(n: int) -> list[list[float]]:
    """The body of `overhead` (shared with ``bench.flows_checkpointed``)."""
    clock = time.perf_counter
    steps: list[float] = []
    plain: list[float] = []
    for i in range(n):
        t0 = clock()
        await noop_plain(i)
        t1 = clock()
        await noop(i)
        t2 = clock()
        plain.append(t1 - t0)
        steps.append(t2 - t1)
    return [steps, plain]


@flow(name="bench.chain")
async def chain(n: int) -> int:
    """`n` sequential trivial steps."""
    for i in range(n):
        await noop(i)
    return n


@flow(name="bench.gathered")
async def gathered(n: int) -> int:
    """`n` trivial steps at once: ``asyncio.gather`` of them."""
    return sum(await asyncio.gather(*(noop(i) for i in range(n))))


@flow(name="bench.replay_then_wait")
async def replay_then_wait(n: int) -> int:
    """`n` steps, then a wait: signalled, it re-activates and replays all `n`."""
    for i in range(n):
        await noop(i)
    await wait_for("go")
    return n


@flow(name="bench.wait_once")
async def wait_once() -> int:
    """One step, one wait, one step: the shape of a suspend and a wake-up."""
    await noop(0)
    payload = await wait_for("go")
    await noop(1)
    return int(payload)


@flow(name="bench.trivial")
async def trivial() -> int:
    """No step at all: start-to-result latency is all engine and store."""
    return 1


@flow(name="bench.one_step")
async def one_step() -> int:
    """One trivial step."""
    return await noop(1)
