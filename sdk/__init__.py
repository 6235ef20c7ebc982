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

The names are loaded when first used (PEP 562): ``import sdk`` alone imports
no part of the SDK, so a process that needs one part (a store, which imports
only the seam `sdk.store`; the command line) does not load the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sdk._core._clock import Clock, SystemClock
    from sdk._core._retry import RetryPolicy
    from sdk._core._types import (
        AuditEntry,
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
    from sdk._core._values import Serializer
    from sdk.client._client import Authorizer, Client, RunHandle
    from sdk.client._roles import Role, RoleAuthorizer
    from sdk.model._channels import Intent, IntentStatus
    from sdk.model._decorators import channel, flow
    from sdk.model._queues import Queue, QueueInfo, RateLimit
    from sdk.model._registry import Registry
    from sdk.model._schedules import ScheduleInfo, scheduled
    from sdk.runtime._children import run_child, start_child
    from sdk.runtime._context import RunContext, StepContext, current_run, current_step
    from sdk.runtime._emit import emit
    from sdk.runtime._primitives import (
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
    from sdk.runtime._runtime import ChildHandle
    from sdk.runtime._step import step
    from sdk.worker._worker import Worker

#: public name -> the module that defines it
_WHERE = {
    "AuditEntry": "sdk._core._types",
    "Authorizer": "sdk.client._client",
    "Checkpoint": "sdk._core._types",
    "CheckpointKind": "sdk._core._types",
    "ChildHandle": "sdk.runtime._runtime",
    "Client": "sdk.client._client",
    "Clock": "sdk._core._clock",
    "Decision": "sdk._core._types",
    "ErrorInfo": "sdk._core._types",
    "Event": "sdk._core._types",
    "EventType": "sdk._core._types",
    "Intent": "sdk.model._channels",
    "IntentStatus": "sdk.model._channels",
    "Queue": "sdk.model._queues",
    "QueueInfo": "sdk.model._queues",
    "RateLimit": "sdk.model._queues",
    "Reason": "sdk._core._types",
    "Registry": "sdk.model._registry",
    "RetryPolicy": "sdk._core._retry",
    "Role": "sdk.client._roles",
    "RoleAuthorizer": "sdk.client._roles",
    "RunContext": "sdk.runtime._context",
    "RunHandle": "sdk.client._client",
    "RunOptions": "sdk._core._types",
    "RunRecord": "sdk._core._types",
    "RunStatus": "sdk._core._types",
    "ScheduleInfo": "sdk.model._schedules",
    "Serializer": "sdk._core._values",
    "StepContext": "sdk.runtime._context",
    "SystemClock": "sdk._core._clock",
    "Versions": "sdk._core._types",
    "WaitKind": "sdk._core._types",
    "WaitingOn": "sdk._core._types",
    "Worker": "sdk.worker._worker",
    "WorkerInfo": "sdk._core._types",
    "channel": "sdk.model._decorators",
    "continue_as_new": "sdk.runtime._primitives",
    "current_run": "sdk.runtime._context",
    "current_step": "sdk.runtime._context",
    "deprecate_patch": "sdk.runtime._primitives",
    "emit": "sdk.runtime._emit",
    "flow": "sdk.model._decorators",
    "now": "sdk.runtime._primitives",
    "patched": "sdk.runtime._primitives",
    "run_child": "sdk.runtime._children",
    "scheduled": "sdk.model._schedules",
    "sleep": "sdk.runtime._primitives",
    "sleep_until": "sdk.runtime._primitives",
    "start_child": "sdk.runtime._children",
    "step": "sdk.runtime._step",
    "uuid4": "sdk.runtime._primitives",
    "wait_for": "sdk.runtime._primitives",
    "wait_for_event": "sdk.runtime._primitives",
}

__all__ = [
    "AuditEntry",
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
    "Role",
    "RoleAuthorizer",
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


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'sdk' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value  # the next lookup finds it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
