"""The event loop a flow's own code runs on, and the one adapter to asyncio internals.

A flow body does not run on the worker's event loop. It runs on a `FlowLoop`:
a loop with no I/O that its activation drives by hand. The activation runs
the loop's ready callbacks until there are none (a *round*), then decides
what happens next (a step result, a signal, a timer) and delivers it in the
next round. So the order in which a flow sees completions is the order the
activation chose and journaled, never the order I/O happened to finish in,
and a replay delivers them in the same rounds: ``asyncio.gather``,
``asyncio.wait(..., return_when=FIRST_COMPLETED)``, ``asyncio.timeout`` and
plain tasks behave the same live and on replay. Step bodies (the I/O) run on
the worker's loop.

Timers (``loop.call_at``: ``asyncio.sleep``, ``asyncio.timeout``,
``asyncio.wait(timeout=)``) are durable timers journaled by the activation
(its `TimerHost`).

Private asyncio API used here, and only here: ``asyncio.events._set_running_loop``
(to run the flow loop's callbacks while the worker's loop is running, as
temporalio does) and, on Python 3.14+, ``asyncio.tasks._enter_task`` /
``_leave_task`` (3.14 keeps one current task per thread, so the worker's task
steps aside while a round runs).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import logging
import sys
from asyncio import events, tasks
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Protocol, TypeVarTuple

from sdk.errors import NotInStepError

__all__ = ["FlowLoop", "FlowTask", "TimerHost", "interested"]

log = logging.getLogger("steadyflow.flow")

_Ts = TypeVarTuple("_Ts")

_SWAP_TASK = sys.version_info >= (3, 14)


class TimerHost(Protocol):
    """What a `FlowLoop` asks its activation for: time and durable timers."""

    def time(self) -> float: ...

    def timer(
        self,
        loop: FlowLoop,
        when: float,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: contextvars.Context | None,
    ) -> asyncio.TimerHandle: ...

    def timer_cancelled(self, handle: asyncio.TimerHandle) -> None: ...


class FlowTask(asyncio.Task):  # type: ignore[type-arg]
    """A task of a flow: remembers which tasks wait for it (see `interested`).

    Every done-callback is added by some code running in some task of the
    flow (``await t`` adds the awaiting task's wake-up, ``gather`` and
    ``asyncio.wait`` add theirs from the task that called them), so the task
    current at that moment is the one interested in this task's result.
    """

    # (callback, the flow task that added it or None)
    _awaiters: list[tuple[object, asyncio.Task[Any] | None]]
    _had_awaiters: bool

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._awaiters = []
        self._had_awaiters = False
        super().__init__(*args, **kwargs)

    def add_done_callback(
        self, fn: Callable[[Any], object], *, context: contextvars.Context | None = None
    ) -> None:
        self._awaiters.append((fn, asyncio.current_task()))
        self._had_awaiters = True
        super().add_done_callback(fn, context=context)

    def remove_done_callback(self, fn: Callable[[Any], object]) -> int:
        self._awaiters = [(f, t) for f, t in self._awaiters if f != fn]
        return super().remove_done_callback(fn)


def interested(task: asyncio.Task[Any] | None, main: asyncio.Task[Any] | None) -> bool:
    """Whether the flow still waits for what `task` is doing.

    The flow's main task is; so is a task nobody ever awaited (it runs on its
    own: a background task); so is a task that a task of interest awaits
    (``await``, ``gather``, ``asyncio.wait``, ``shield``...). A task whose
    last waiter went away (the losers of ``asyncio.wait(...,
    return_when=FIRST_COMPLETED)`` once it returned) is not, until something
    awaits it again.
    """
    seen: set[int] = set()
    todo = [task]
    while todo:
        t = todo.pop()
        if t is None or t is main:
            return True
        if id(t) in seen or t.done():
            continue
        seen.add(id(t))
        if not isinstance(t, FlowTask) or not t._had_awaiters:
            return True
        todo.extend(owner for _, owner in t._awaiters)
    return False


class _Call:
    """What `FlowLoop.call_soon` schedules: asyncio's `Handle`, minus its debug and
    repr machinery (a round runs thousands of these)."""

    __slots__ = ("_args", "_callback", "_cancelled", "_context", "_loop")

    def __init__(
        self,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        loop: FlowLoop,
        context: contextvars.Context | None,
    ) -> None:
        self._callback = callback
        self._args = args
        self._loop = loop
        self._context = contextvars.copy_context() if context is None else context
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True

    def cancelled(self) -> bool:
        return self._cancelled

    def get_context(self) -> contextvars.Context:
        return self._context

    def _run(self) -> None:
        if self._cancelled:
            return
        try:
            self._context.run(self._callback, *self._args)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._loop.call_exception_handler(
                {"message": f"Exception in callback {self._callback!r}", "exception": exc}
            )


class FlowLoop(asyncio.AbstractEventLoop):
    """A loop with no I/O, run a round at a time by its activation (`run_ready`)."""

    def __init__(self, host: TimerHost) -> None:
        self._ready: collections.deque[_Call | asyncio.Handle] = collections.deque()
        self._host = host
        # Strong references: a pending task that is garbage-collected has its
        # coroutine closed at an arbitrary moment (running its finally blocks).
        self.tasks: list[FlowTask] = []
        self.failures: list[BaseException] = []  # exceptions nothing handled
        self._exception_handler: Any = None

    # -- driving --------------------------------------------------------------

    def run_ready(self) -> None:
        """Run callbacks until none is ready (one round), as the running loop."""
        outer = events._get_running_loop()
        current = tasks.current_task(outer) if (_SWAP_TASK and outer is not None) else None
        if current is not None:
            tasks._leave_task(outer, current)  # type: ignore[arg-type]
        events._set_running_loop(self)
        try:
            ready = self._ready
            while ready:
                ready.popleft()._run()
        finally:
            events._set_running_loop(outer)
            if current is not None:
                tasks._enter_task(outer, current)  # type: ignore[arg-type]

    def quiet(self) -> bool:
        """Whether nothing but the running task is ready to run in this round."""
        return not self._ready

    def schedule(self, handle: asyncio.Handle) -> None:
        """Run `handle` in the coming round (a durable timer that fired)."""
        self._ready.append(handle)

    def pending_tasks(self) -> list[FlowTask]:
        return [t for t in self.tasks if not t.done()]

    def unwind(self, signal: Callable[[], BaseException], passes: int = 100) -> int:
        """End every pending task, top down; returns how many would not end.

        A task is unwound only once nothing that awaits it is still pending, so
        no flow code sees a task end and takes another branch (the loser of a
        race "winning" as the flow is discarded). A task waiting on a future gets
        `signal()` raised there; one about to start, or awaiting a task, is
        canceled. Exceptions of the ended tasks are marked as retrieved.
        """
        for _ in range(passes):
            pending = self.pending_tasks()
            if not pending:
                break
            alive = set(pending)
            roots = [t for t in pending if not any(o in alive for _, o in t._awaiters)]
            for task in roots or pending:
                waiter = getattr(task, "_fut_waiter", None)  # what the task awaits
                if (
                    isinstance(waiter, asyncio.Future)
                    and not isinstance(waiter, asyncio.Task)
                    and not waiter.done()
                ):
                    waiter.set_exception(signal())
                else:
                    task.cancel()
            self.run_ready()
        left = len(self.pending_tasks())
        for task in self.tasks:  # their exceptions are the unwinding itself
            if task.done() and not task.cancelled():
                task.exception()
        self.tasks.clear()
        return left

    # -- what asyncio asks of a loop -------------------------------------------

    def call_soon(
        self,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        handle = _Call(callback, args, self, context)
        self._ready.append(handle)
        return handle  # type: ignore[return-value]  # the part of Handle asyncio uses

    def call_later(
        self,
        delay: float,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        return self.call_at(self.time() + delay, callback, *args, context=context)

    def call_at(
        self,
        when: float,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        return self._host.timer(self, when, callback, args, context)

    def _timer_handle_cancelled(self, handle: asyncio.TimerHandle) -> None:
        self._host.timer_cancelled(handle)

    def time(self) -> float:
        return self._host.time()

    def create_future(self) -> asyncio.Future[Any]:
        return asyncio.Future(loop=self)

    def create_task(
        self,
        coro: Coroutine[Any, Any, Any] | Generator[Any, None, Any],
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> FlowTask:
        task = FlowTask(coro, loop=self, name=name, context=context)
        # Discarded pending tasks are expected (a parked flow): not an error.
        task._log_destroy_pending = False  # type: ignore[attr-defined]
        self.tasks.append(task)
        return task

    def get_debug(self) -> bool:
        return False

    def is_running(self) -> bool:
        return True

    def is_closed(self) -> bool:
        return False

    def get_exception_handler(self) -> Any:
        return self._exception_handler

    def set_exception_handler(self, handler: Any) -> None:
        self._exception_handler = handler

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, BaseException):
            self.failures.append(exc)
        log.debug("unhandled in a flow: %s", context.get("message"), exc_info=exc)

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        if self._exception_handler is not None:
            self._exception_handler(self, context)
        else:
            self.default_exception_handler(context)

    def get_task_factory(self) -> None:
        return None


def _refuse(name: str) -> Callable[..., Any]:
    def refused(self: FlowLoop, *args: Any, **kwargs: Any) -> Any:
        raise NotInStepError(
            f"loop.{name}() is not available in a flow body: a flow's own code runs on "
            "Steadyflow's deterministic loop, which does no I/O. Move the I/O into a @step "
            "(a step body runs on the worker's event loop)."
        )

    refused.__name__ = name
    return refused


# Everything that would do I/O, run threads or watch the process: a step's job.
for _name in (
    "run_in_executor", "set_default_executor", "getaddrinfo", "getnameinfo",
    "create_connection", "create_server", "create_unix_connection", "create_unix_server",
    "create_datagram_endpoint", "connect_accepted_socket", "sendfile", "start_tls",
    "sock_recv", "sock_recv_into", "sock_recvfrom", "sock_recvfrom_into", "sock_sendall",
    "sock_sendto", "sock_connect", "sock_accept", "sock_sendfile", "connect_read_pipe",
    "connect_write_pipe", "subprocess_shell", "subprocess_exec", "add_reader",
    "remove_reader", "add_writer", "remove_writer", "add_signal_handler",
    "remove_signal_handler", "run_forever", "run_until_complete", "stop", "close",
    "shutdown_asyncgens", "shutdown_default_executor", "call_soon_threadsafe",
    "set_task_factory",
):  # fmt: skip
    setattr(FlowLoop, _name, _refuse(_name))
