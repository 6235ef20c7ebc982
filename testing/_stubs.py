"""Stubs: a test's stand-ins for step bodies (`FlowTestEnv.stub`), as an interceptor.

The engine knows nothing of them: the env's worker runs every live step attempt
through its interceptors (`Interceptor.execute_step`), and this one, the
innermost, runs the stand-in instead of the body for the steps it was given.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from sdk.model._intercept import Interceptor, StepCall

__all__ = ["Stubs"]


class Stubs(Interceptor):
    """Step name -> the callable run instead of its body, with the step's arguments."""

    def __init__(self) -> None:
        self.bodies: dict[str, Callable[..., Any]] = {}

    async def execute_step(self, call: StepCall, proceed: Callable[[], Awaitable[Any]]) -> Any:
        stub = self.bodies.get(call.name)
        if stub is None:
            return await proceed()
        value = stub(*call.args, **call.kwargs)
        return await value if inspect.isawaitable(value) else value
