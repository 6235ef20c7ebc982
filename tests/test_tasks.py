"""`sdk._core._tasks.cancel_and_wait`: a looping task ends even when a cancellation is lost.

Python 3.11 can lose a cancellation that lands as an awaited call completes
(`asyncio.wait_for` inside redis-py and fakeredis); the stand-in here is a
loop that swallows its first cancellation, as such a call would.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from sdk._core._tasks import cancel_and_wait
from sdk.client._follow import END, read_ahead


def stubborn(lost: int) -> tuple[asyncio.Task[None], list[int]]:
    """A task looping on sleeps that loses its first `lost` cancellations; how
    many turns it took."""
    turns = [0]

    async def loop() -> None:
        left = lost
        while True:
            turns[0] += 1
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if left:
                    left -= 1  # lost below us: the call "returned", the loop goes on
                    continue
                raise

    return asyncio.create_task(loop()), turns


async def test_a_task_that_loses_its_cancellations_still_ends() -> None:
    task, turns = stubborn(lost=2)
    await asyncio.sleep(0)
    started = time.monotonic()
    await asyncio.wait_for(cancel_and_wait(task, again_after=0.05), 5)
    assert task.cancelled() and turns[0] == 3
    assert time.monotonic() - started < 2


async def test_plain_cancel_and_await_would_wait_for_the_next_turn() -> None:
    # what cancel_and_wait guards against: one cancel, and the task runs on
    task, _ = stubborn(lost=1)
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(asyncio.shield(task), 0.2)
    await cancel_and_wait(task, again_after=0.05)
    assert task.cancelled()


async def test_a_task_that_ends_at_once_is_waited_for_without_delay() -> None:
    task, _ = stubborn(lost=0)
    await asyncio.sleep(0)
    started = time.monotonic()
    await cancel_and_wait(task, again_after=30)
    assert task.cancelled() and time.monotonic() - started < 1


async def test_the_tasks_outcome_is_taken_and_dropped() -> None:
    async def fails() -> None:
        raise ValueError("boom")

    async def returns() -> int:
        return 1

    for make in (fails, returns):
        task = asyncio.create_task(make())
        await asyncio.sleep(0)
        await cancel_and_wait(task)  # neither raised nor logged as never retrieved
        assert task.done()


async def test_the_callers_own_cancellation_is_raised() -> None:
    task, _ = stubborn(lost=1000)
    await asyncio.sleep(0)
    waiting = asyncio.create_task(cancel_and_wait(task, again_after=10))
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not task.done()
    # let it go for good
    for _ in range(1001):
        task.cancel()
        await asyncio.sleep(0)
        if task.done():
            break
    assert task.done()


async def test_a_read_ahead_whose_source_loses_a_cancellation_still_closes() -> None:
    lost = [1]

    async def source() -> AsyncIterator[int]:
        yield 1
        while True:
            try:
                await asyncio.sleep(3600)  # a quiet feed
            except asyncio.CancelledError:
                if lost[0]:
                    lost[0] -= 1
                    continue
                raise

    async def consume() -> list[object]:
        got = []
        async with read_ahead(source()) as queue:
            got.append(await queue.get())
        return got  # the context closed: the reader ended

    closing = asyncio.create_task(consume())
    done, _ = await asyncio.wait({closing}, timeout=4)  # the retry comes after 1 s
    if not done:  # (cancelling it would end the reader through the await: not the point)
        closing.cancel()
    assert closing in done and closing.result() == [1] and lost == [0] and END is not None
