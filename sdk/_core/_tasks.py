"""Ending a task that loops: cancel it until it has ended.

On Python 3.11 a cancellation that lands just as an awaited call completes
can be lost below our code (``asyncio.wait_for`` and ``asyncio.timeout``
inside redis-py and fakeredis): the call returns normally, the task goes on,
and a loop that only stops on cancellation runs on, so ``task.cancel();
await task`` waits for its next turn, maybe forever (a worker's heartbeat
did: tests/test_worker_registry.py). `cancel_and_wait`
cancels again whenever the task is still running `again_after` seconds after
the last request. A task that ends at once (the norm) is waited for as with
``await``, with no delay.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["cancel_and_wait"]


async def cancel_and_wait(task: asyncio.Future[Any], *, again_after: float = 1.0) -> None:
    """Cancel `task` and wait until it has ended (see the module).

    Its outcome is taken and dropped: a cancellation, a result, an exception.
    If the caller is cancelled meanwhile, that is raised (the task was asked to
    end, and is not waited for).
    """
    while not task.done():
        task.cancel()
        await asyncio.wait((task,), timeout=again_after)
    if not task.cancelled():
        task.exception()  # retrieved: not logged as never retrieved
