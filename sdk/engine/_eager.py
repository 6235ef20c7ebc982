"""A coroutine started at once and finished later, in the task that awaits it.

asyncio runs a coroutine only in a task, and a task takes its first step at
the next turn of the loop. `Started` runs a coroutine's first step now, in the
caller, up to where it first waits (for a store write: the command is on the
wire, the reply not yet read), and whoever awaits it later goes on from there,
in its own task (as Python 3.12's eager tasks start, without a task of its own).

The activation uses it to write a step's outcome and go on with the flow's
own code while the write is on the wire (`sdk.engine._writes.Writes.send`); nothing
that has an effect happens before the write is awaited. What holds:

- the coroutine's first step runs in the caller's task and context; the rest
  runs in the awaiting task (the activation's, the same one), so redis-py's
  timeouts and cancellation see the task they expect;
- awaited once; an exception of the first step is raised to the awaiter;
- one never awaited is finished by `finish`, in a task of its own, so its
  ``finally`` blocks run at the right point (a connection's reply is read
  before the connection is used again), never when it is garbage-collected.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar

__all__ = ["Started"]

_T = TypeVar("_T")

#: `Started.finish` tasks (strong references until they end).
_finishing: set[asyncio.Task[Any]] = set()


class Started(Generic[_T]):
    """`coro` run to where it first waits (see the module docstring)."""

    __slots__ = ("_coro", "_error", "_value", "_wait")

    def __init__(self, coro: Coroutine[Any, Any, _T]) -> None:
        self._coro: Coroutine[Any, Any, _T] | None = coro
        self._wait: Any = None  # what the coroutine yielded (a future, or None)
        self._value: Any = None
        self._error: BaseException | None = None
        try:
            self._wait = coro.send(None)
        except StopIteration as stop:
            self._coro, self._value = None, stop.value
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as error:  # the awaiter's, as if it had run it
            self._coro, self._error = None, error

    def __await__(self) -> Generator[Any, None, _T]:
        coro, self._coro = self._coro, None
        if coro is None:
            error, self._error = self._error, None
            if error is not None:
                raise error
            return self._value  # type: ignore[no-any-return]
        out = self._wait
        self._wait = None
        while True:
            thrown: BaseException | None = None
            sent: Any = None
            # A future that is already done needs no turn of the loop: the
            # coroutine reads its result (or exception) itself on resuming.
            if not (isinstance(out, asyncio.Future) and out.done()):
                try:
                    sent = yield out
                except BaseException as error:  # a cancel, thrown into our task
                    thrown = error
            try:
                out = coro.send(sent) if thrown is None else coro.throw(thrown)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]

    def finish(self) -> None:
        """Finish it in a task of its own, its outcome dropped (nobody awaits it)."""
        if self._coro is None:
            self._error = None
            return

        async def run() -> None:
            await self

        task = asyncio.ensure_future(run())
        _finishing.add(task)
        task.add_done_callback(_finished)


def _finished(task: asyncio.Task[Any]) -> None:
    _finishing.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: the activation that dropped it stopped already
