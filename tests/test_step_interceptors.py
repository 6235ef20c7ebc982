"""`Interceptor.execute_step`: interceptors that wrap a step attempt's body.

The engine runs every live attempt through the worker's interceptors that
override it, in their order (the first is the outermost); the test kit's stubs
are one of them, the innermost, so the engine has no test branch for stubs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from sdk import RetryPolicy, RunHandle, current_step, flow, step, wait_for
from sdk.model._intercept import Interceptor, StepCall
from testing import FlowTestEnv

seen: list[str] = []


@step
async def double(n: int) -> int:
    seen.append(f"body {n}")
    return 2 * n


@step
def triple(n: int) -> int:  # a plain function: the chain awaits nothing of it
    seen.append(f"sync body {n}")
    return 3 * n


_flaky: dict[str, int] = {}


@step(retry=RetryPolicy(max_attempts=3, initial_interval=0.0))
async def flaky() -> str:
    _flaky["calls"] = _flaky.get("calls", 0) + 1
    return "ok"


@flow(name="tests.step_interceptors.twice")
async def twice(n: int) -> list[int]:
    first = await double(n)
    await wait_for("go")
    return [first, await triple(n)]  # type: ignore[misc]  # (in a flow, a sync step is awaited)


@flow(name="tests.step_interceptors.retrying")
async def retrying() -> str:
    return await flaky()


async def _result(env: FlowTestEnv, handle: RunHandle) -> Any:
    await env.run_until_idle()
    return await handle.result()


class Around(Interceptor):
    """Records what it sees and adds its tag around the body's result."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.calls: list[StepCall] = []

    async def execute_step(self, call: StepCall, proceed: Callable[[], Awaitable[Any]]) -> Any:
        self.calls.append(call)
        seen.append(f"{self.tag} in {current_step().key}")
        value = await proceed()
        seen.append(f"{self.tag} out")
        return value + 100 if isinstance(value, int) else value


class FailFirst(Interceptor):
    """Raises in place of the body's first attempt: the step's retry policy applies."""

    async def execute_step(self, call: StepCall, proceed: Callable[[], Awaitable[Any]]) -> Any:
        if call.attempt == 1:
            raise ConnectionError(f"{call.key}: refused")
        return await proceed()


async def test_interceptors_nest_in_order_around_live_attempts_and_not_on_replay() -> None:
    seen.clear()
    outer, inner = Around("outer"), Around("inner")
    async with FlowTestEnv(interceptors=[outer, inner]) as env:
        handle = await env.start(twice, 4)
        await env.run_until_idle()
        # the inner one's result (+100) is what the outer one gets (+100 again)
        assert seen == ["outer in double#1", "inner in double#1", "body 4", "inner out",
                        "outer out"]  # fmt: skip
        seen.clear()
        await env.client.signal(handle.run_id, "go")  # the wake-up replays double#1
        assert await _result(env, handle) == [208, 212]
    assert seen == ["outer in triple#1", "inner in triple#1", "sync body 4", "inner out",
                    "outer out"]  # fmt: skip
    call = outer.calls[0]
    assert (call.run_id, call.key, call.name, call.attempt, call.args, call.kwargs) == (
        handle.run_id, "double#1", "double", 1, (4,), {},
    )  # fmt: skip
    assert [c.key for c in inner.calls] == ["double#1", "triple#1"]


async def test_what_an_interceptor_raises_is_the_attempts_failure_and_is_retried() -> None:
    _flaky.clear()
    async with FlowTestEnv(interceptors=[FailFirst()]) as env:
        handle = await env.start(retrying)
        await env.run_until_idle()
        assert await _result(env, handle) == "ok"
        history = await env.history(handle.run_id)
    assert _flaky == {"calls": 1}  # the first attempt never reached the body
    assert [(h.key, h.attempts) for h in history] == [("flaky#1", 2)]


async def test_a_users_interceptor_wraps_a_stub_as_it_would_the_body() -> None:
    seen.clear()
    around = Around("user")
    async with FlowTestEnv(interceptors=[around]) as env:
        env.stub(double, side_effect=lambda n: -n)
        handle = await env.start(twice, 5)
        await env.run_until_idle()
        await env.client.signal(handle.run_id, "go")
        assert await _result(env, handle) == [95, 115]
    assert "body 5" not in seen  # the stub stood in for the body
    assert seen[:2] == ["user in double#1", "user out"]
