"""Steadyflow: durable execution for Python.

A flow is a plain ``async def`` decorated with `flow`; its `step` calls and
`wait_for` / `sleep` awaits are journaled in Redis, so a run that is executed
again (after a crash, a deploy, a signal, a timer) skips what it already did.

    from sdk import flow, step, sleep

    @step
    async def send(to: str) -> str: ...

    @flow
    async def onboard(user: str) -> None:
        await send(user)
        await sleep(86400)
        await send(user)
"""

from sdk._children import ChildHandle, run_child, start_child
from sdk._client import Authorizer, Client, RunHandle
from sdk._clock import Clock, SystemClock
from sdk._context import RunContext, StepContext, current_run, current_step
from sdk._flowdef import flow
from sdk._outbox import Intent, IntentStatus, channel, emit
from sdk._primitives import (
    continue_as_new,
    deprecate_patch,
    now,
    patched,
    sleep,
    sleep_until,
    uuid4,
    wait_for,
    wait_for_event,
)
from sdk._queues import Queue, QueueInfo, RateLimit
from sdk._registry import Registry
from sdk._retry import RetryPolicy
from sdk._schedules import ScheduleInfo, scheduled
from sdk._step import step
from sdk._types import (
    Checkpoint,
    CheckpointKind,
    Decision,
    ErrorInfo,
    Event,
    EventType,
    Reason,
    RunOptions,
    RunRecord,
    RunStatus,
    Versions,
    WaitingOn,
    WaitKind,
    WorkerInfo,
)
from sdk._values import Serializer
from sdk._worker import Worker

__all__ = [
    "Authorizer",
    "Checkpoint",
    "CheckpointKind",
    "ChildHandle",
    "Client",
    "Clock",
    "Decision",
    "ErrorInfo",
    "Event",
    "EventType",
    "Intent",
    "IntentStatus",
    "Queue",
    "QueueInfo",
    "RateLimit",
    "Reason",
    "Registry",
    "RetryPolicy",
    "RunContext",
    "RunHandle",
    "RunOptions",
    "RunRecord",
    "RunStatus",
    "ScheduleInfo",
    "Serializer",
    "StepContext",
    "SystemClock",
    "Versions",
    "WaitKind",
    "WaitingOn",
    "Worker",
    "WorkerInfo",
    "channel",
    "continue_as_new",
    "current_run",
    "current_step",
    "deprecate_patch",
    "emit",
    "flow",
    "now",
    "patched",
    "run_child",
    "scheduled",
    "sleep",
    "sleep_until",
    "start_child",
    "step",
    "uuid4",
    "wait_for",
    "wait_for_event",
]

__version__ = "0.1.0"
