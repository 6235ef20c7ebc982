"""Bad arguments at every public entry point: a clear error that names the argument,
before anything is written (issue 8)."""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdk import Registry, RunOptions, Versions, Worker, flow, wait_for
from sdk.errors import InvalidArgument, SteadyflowError
from stores.redis import RedisStore
from testing import FlowTestEnv

REGISTRY = Registry()
PARKED = ("waiting", "deciding")


@flow(registry=REGISTRY, name="tests.boundary.waiter")
async def waiter() -> Any:
    return await wait_for("go")


@flow(registry=REGISTRY, name="tests.boundary.approval")
async def approval() -> Any:
    return await wait_for("ok", human=True)


# Anything a caller might pass where an id, a name or a number belongs.
ANYTHING = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=300),
    st.binary(max_size=20), st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.sampled_from(["", "x" * 257, "\ud800", "a\nb", "\x00", "ok", "\u202e", "värde"]),
)  # fmt: skip


class Boundary:
    """One env with a parked run of each kind, driven from sync Hypothesis tests."""

    def __init__(self) -> None:
        self.runner = asyncio.Runner()
        self.env = FlowTestEnv(registry=REGISTRY)
        self.run(self.env.__aenter__())
        self.waiting = self.run(self.env.start(waiter, run_id="waiting")).run_id
        self.deciding = self.run(self.env.start(approval, run_id="deciding")).run_id
        self.run(self.env.run_until_idle())

    def run(self, coro: Awaitable[Any]) -> Any:
        return self.runner.run(coro)  # type: ignore[arg-type]

    def close(self) -> None:
        self.run(self.env.__aexit__(None, None, None))
        self.runner.close()

    async def snapshot(self) -> list[Any]:
        c = self.env.client
        runs = sorted((r.run_id, r.status) for r in await c.list_runs(limit=1000))
        events = [len(await c.events(run_id, limit=1000)) for run_id in PARKED]
        return [runs, events]

    def check(self, call: Callable[[], Awaitable[Any]], argument: str) -> None:
        """`call` goes through, or refuses the argument with a short error naming it
        and writes nothing, or (for a valid argument) refuses the run's state."""
        before = self.run(self.snapshot())
        try:
            self.run(asyncio.wait_for(call(), 10))
        except InvalidArgument as exc:
            message = str(exc)
            assert argument in message, f"{argument!r} not named in {message!r}"
            assert len(message) < 600, message
            assert self.run(self.snapshot()) == before  # nothing written
        except SteadyflowError as exc:  # a valid argument, a run in another state
            assert "run" in str(exc), str(exc)
            assert len(str(exc)) < 600, str(exc)


@pytest.fixture(scope="module")
def boundary() -> Iterator[Boundary]:
    b = Boundary()
    yield b
    b.close()


SETTINGS = settings(
    max_examples=40,
    # the profile's suppressions (tests/conftest.py) and this one
    suppress_health_check=[*settings().suppress_health_check,
                           HealthCheck.function_scoped_fixture],
)  # fmt: skip


@SETTINGS
@given(value=ANYTHING, slot=st.sampled_from(["run_id", "priority", "queue", "tenant_id"]))
def test_start_checks_its_options(boundary: Boundary, value: Any, slot: str) -> None:
    c = boundary.env.client
    boundary.check(lambda: c.start(waiter, **{slot: value}), slot)


@SETTINGS
@given(
    value=ANYTHING,
    field=st.sampled_from(["thread_id", "trace_id", "environment", "policy_snapshot_id"]),
)
def test_start_checks_every_run_option(boundary: Boundary, value: Any, field: str) -> None:
    c = boundary.env.client
    boundary.check(lambda: c.start(waiter, options=RunOptions(**{field: value})), field)


@SETTINGS
@given(value=ANYTHING)
def test_start_checks_versions(boundary: Boundary, value: Any) -> None:
    c = boundary.env.client
    options = RunOptions(versions=Versions(capabilities=(value,), bindings={"model": value}))
    boundary.check(lambda: c.start(waiter, options=options), "options.versions")


@SETTINGS
@given(value=ANYTHING, slot=st.sampled_from(["name", "dedup_id", "actor"]))
def test_signal_checks_its_arguments(boundary: Boundary, value: Any, slot: str) -> None:
    c = boundary.env.client
    args: dict[str, Any] = {"name": "other", "dedup_id": None, "actor": None, slot: value}
    name = args.pop("name")
    what = {"name": "signal name"}.get(slot, slot)
    boundary.check(lambda: c.signal(boundary.waiting, name, 1, **args), what)


@SETTINGS
@given(value=ANYTHING, slot=st.sampled_from(["actor", "reason", "name"]), approve=st.booleans())
def test_decisions_check_their_arguments(
    boundary: Boundary, value: Any, slot: str, approve: bool
) -> None:
    c = boundary.env.client
    decide = c.approve if approve else c.deny
    args: dict[str, Any] = {"name": "other", "actor": "ann", "reason": None, slot: value}
    name = args.pop("name")
    what = {"name": "wait name"}.get(slot, slot)
    boundary.check(lambda: decide(boundary.deciding, name, **args), what)


@SETTINGS
@given(value=ANYTHING)
def test_every_run_id_argument_is_checked(boundary: Boundary, value: Any) -> None:
    c = boundary.env.client
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: c.get(value), lambda: c.events(value), lambda: c.checkpoints(value),
        lambda: c.intents(value), lambda: c.signal(value, "go"),
        lambda: c.cancel(value, reason="r"), lambda: c.resume(value), lambda: c.delete(value),
        lambda: c.replay(value), lambda: c.fork(value),
        lambda: c.approve(value, "ok", actor="ann"), lambda: c.handle(value).status(),
    ]  # fmt: skip
    for call in calls:
        boundary.check(call, "run")  # "run_id", or "run 'x'" of RunNotFound


@SETTINGS
@given(value=ANYTHING, slot=st.sampled_from(["reason", "actor"]))
def test_cancel_checks_its_arguments(boundary: Boundary, value: Any, slot: str) -> None:
    c = boundary.env.client
    args: dict[str, Any] = {"reason": "r", "actor": None, slot: value}
    run_id = boundary.run(c.start(waiter)).run_id  # a valid cancel ends it
    boundary.check(lambda: c.cancel(run_id, **args), slot)


@SETTINGS
@given(value=ANYTHING, slot=st.sampled_from(["limit", "cursor"]))
def test_reads_check_paging(boundary: Boundary, value: Any, slot: str) -> None:
    c = boundary.env.client
    boundary.check(lambda: c.events(boundary.waiting, **{slot: value}), slot)
    if slot == "limit":
        boundary.check(lambda: c.list_runs(limit=value), slot)
        boundary.check(lambda: c.list_runs(status=value), "status")


@SETTINGS
@given(
    value=ANYTHING,
    option=st.sampled_from(["queue", "priority", "tenant_id", "flow_version", "retry"]),
)
def test_fork_checks_its_options(boundary: Boundary, value: Any, option: str) -> None:
    c = boundary.env.client
    boundary.check(lambda: c.fork(boundary.waiting, **{option: value}), option)


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": True}, "concurrency"),
        ({"lease_ttl": math.nan}, "lease_ttl"),
        ({"lease_ttl": 0}, "lease_ttl"),
        ({"max_recoveries": -1}, "max_recoveries"),
        ({"grace_period": math.inf}, "grace_period"),
        ({"inline_backoff_max": "1"}, "inline_backoff_max"),
        ({"queues": "emails"}, "queues"),
        ({"queues": ["ok", ""]}, "queue"),
        ({"name": "w\n1"}, "name"),
    ],
)
async def test_worker_options_are_checked(kwargs: dict[str, Any], named: str) -> None:
    async with FlowTestEnv(registry=REGISTRY) as env:
        with pytest.raises(InvalidArgument, match=named):
            Worker(env.store, **kwargs)


@pytest.mark.parametrize(
    "duration", [math.nan, math.inf, -math.inf, 1e300, timedelta.max, "5", None]
)
async def test_sleep_and_timeouts_refuse_durations_a_timer_cannot_hold(duration: Any) -> None:
    from sdk import sleep

    @flow(registry=REGISTRY, name=f"tests.boundary.sleeper.{duration!r}")
    async def sleeper() -> None:
        await sleep(duration)

    async with FlowTestEnv(registry=REGISTRY) as env:
        handle = await env.start(sleeper)
        await env.run_until_idle()
        record = await env.client.get(handle.run_id)
    assert record.error is not None
    assert record.error.type == "sdk.errors:InvalidArgument"
    assert "sleep duration" in record.error.message


async def test_a_huge_argument_makes_a_short_message() -> None:
    async with FlowTestEnv(registry=REGISTRY) as env:
        with pytest.raises(InvalidArgument) as info:
            await env.client.start(waiter, tenant_id="t" * 10_000_000)
    assert "tenant_id" in str(info.value)
    assert len(str(info.value)) < 300


async def test_bytes_as_a_tenant_id_are_refused_before_anything_is_written() -> None:
    async with FlowTestEnv(registry=REGISTRY) as env:
        with pytest.raises(InvalidArgument, match="tenant_id must be a str, got a bytes"):
            await env.client.start(waiter, run_id="bytes", tenant_id=b"\xff")  # type: ignore[arg-type]
        assert await env.client.list_runs() == []


async def test_cancel_without_a_reason_names_the_reason() -> None:
    async with FlowTestEnv(registry=REGISTRY) as env:
        handle = await env.start(waiter)
        with pytest.raises(InvalidArgument, match=r"cancel\(\): reason must be a str"):
            await env.client.cancel(handle.run_id, reason=None)  # type: ignore[arg-type]
        assert await handle.status() == "pending"


async def test_invalid_argument_is_a_value_error_and_a_type_error() -> None:
    async with FlowTestEnv(registry=REGISTRY) as env:
        with pytest.raises(ValueError):
            await env.client.start(waiter, priority=5000)
        with pytest.raises(TypeError):
            await env.client.start(waiter, priority="high")  # type: ignore[arg-type]


# -- the reproductions of issue 8, item 8 --------------------------------------------


async def test_a_non_str_run_id_names_the_run_id_not_the_key_builder() -> None:
    async with FlowTestEnv(registry=REGISTRY) as env:
        for call in (env.client.get(42), env.client.signal(42, "go"), env.client.resume(42)):  # type: ignore[arg-type]
            with pytest.raises(InvalidArgument, match="run_id must be a str, got a int: 42"):
                await call


async def test_a_non_str_run_option_names_the_field() -> None:
    async with FlowTestEnv(registry=REGISTRY) as env:
        with pytest.raises(InvalidArgument, match=r"options\.thread_id must be a str, got a int"):
            await env.client.start(waiter, options=RunOptions(thread_id=5))  # type: ignore[arg-type]
        assert await env.client.list_runs() == []


async def test_lone_surrogates_in_ids_are_refused_at_the_call() -> None:
    async with FlowTestEnv(registry=REGISTRY) as env:
        with pytest.raises(InvalidArgument, match="run_id holds a lone surrogate"):
            await env.client.start(waiter, run_id="order-\udcff")
        handle = await env.start(waiter)
        await env.run_until_idle()
        before = await env.client.events(handle.run_id)
        with pytest.raises(InvalidArgument, match="dedup_id holds a lone surrogate"):
            await env.client.signal(handle.run_id, "go", 1, dedup_id="\ud800")
        with pytest.raises(InvalidArgument, match=r"approve\(\): actor holds a lone surrogate"):
            await env.client.approve(handle.run_id, "go", actor="\udc80")
        assert await env.client.events(handle.run_id) == before  # nothing written


# -- values the client would have changed on the way ----------------------------------


@pytest.mark.parametrize("payload", [(1, 2), {1, 2}, timedelta(seconds=3)])
async def test_a_signal_payload_json_would_change_is_refused(payload: Any) -> None:
    from sdk.errors import SerializationError

    async with FlowTestEnv(registry=REGISTRY) as env:
        handle = await env.start(waiter)
        await env.run_until_idle()
        with pytest.raises(SerializationError, match=r"payload of signal 'go': a .* would reach"):
            await env.client.signal(handle.run_id, "go", payload)
        with pytest.raises(SerializationError, match="payload of approve 'ok'"):
            await env.client.approve(handle.run_id, "ok", actor="ann", payload=payload)
        await env.client.signal(handle.run_id, "go", {"plain": [1, 2]})
        await env.run_until_idle()
        assert await handle.result() == {"plain": [1, 2]}


@flow(registry=REGISTRY, name="tests.boundary.echo")
async def echo(value):  # type: ignore[no-untyped-def]  # unannotated: the recorded type counts
    return value


async def test_a_flow_started_by_name_gets_its_arguments_with_their_types() -> None:
    async with FlowTestEnv(registry=REGISTRY) as env:
        handle = await env.client.start("tests.boundary.echo", (1, "a"))
        await env.run_until_idle()
        assert await handle.result() == (1, "a")
        handle = await env.client.start("tests.boundary.echo", value=frozenset({3}))
        await env.run_until_idle()
        assert await handle.result() == frozenset({3})


async def test_names_starting_with_a_tilde_are_reserved() -> None:
    async with FlowTestEnv(registry=REGISTRY) as env:
        handle = await env.start(waiter)
        with pytest.raises(InvalidArgument, match="signal name must not start with '~'"):
            await env.client.signal(handle.run_id, "~event:abc", 1)


async def test_run_ids_of_archived_generations_are_reserved() -> None:
    async with FlowTestEnv(registry=REGISTRY) as env:
        with pytest.raises(InvalidArgument, match=r"run_id must not end in '~g<number>'"):
            await env.client.start(waiter, run_id="loop~g3")
        await env.client.start(waiter, run_id="loop~gx")  # only a number is reserved


# -- hostile nesting: a value thousands of levels deep, anywhere (issue 30) -------------

#: A list nested 5,000 deep: its repr, or any recursive check, blows the stack.
DEEP: Any = 1
for _ in range(5_000):
    DEEP = [DEEP]


def _valid(name: str, boundary: Boundary) -> Any:
    """A valid value for a Client method's parameter `name` (the others of the call)."""
    if "run_id" in name:
        return boundary.waiting
    return {"flow": waiter, "reason": "r", "cron": "* * * * *", "actor": "ann"}.get(name, "go")


async def _outcome(call: Callable[[], Any]) -> str:
    """What a call did: "ok", the error's type (its message short), or "RecursionError"."""
    try:
        result = call()
        if inspect.isawaitable(result):
            await asyncio.wait_for(result, 10)
    except RecursionError:
        return "RecursionError"
    except Exception as exc:
        assert len(str(exc)) < 600, str(exc)
        return type(exc).__name__
    return "ok"


def test_a_deeply_nested_value_in_any_client_argument_is_refused_not_recursed(
    boundary: Boundary,
) -> None:
    c = boundary.env.client
    recursed = []
    for name, method in inspect.getmembers(c, inspect.ismethod):
        if name.startswith("_") or name in ("follow", "handle"):
            continue
        params = [p for p in inspect.signature(method).parameters.values()
                  if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]  # fmt: skip
        for target in params:
            args = {p.name: DEEP if p is target else _valid(p.name, boundary)
                    for p in params if p is target or p.default is p.empty}  # fmt: skip
            before = boundary.run(boundary.snapshot())
            got = boundary.run(_outcome(lambda m=method, a=args: m(**a)))  # type: ignore[misc]
            if got == "RecursionError":
                recursed.append(f"Client.{name}({target.name}=...)")
            elif got != "ok":
                assert boundary.run(boundary.snapshot()) == before, (name, target.name)
    assert recursed == []


async def test_a_deeply_nested_value_in_any_definition_is_refused_not_recursed(
    memory_store: RedisStore,
) -> None:
    from sdk import Queue, RateLimit, RetryPolicy, channel, scheduled, step

    store = memory_store
    calls: dict[str, Callable[[], Any]] = {
        "flow(name)": lambda: flow(name=DEEP, registry=Registry())(waiter),
        "flow(queue)": lambda: flow(queue=DEEP, registry=Registry())(waiter),
        "flow(timeout)": lambda: flow(timeout=DEEP, registry=Registry())(waiter),
        "flow(retention)": lambda: flow(retention=DEEP, registry=Registry())(waiter),
        "step(name)": lambda: step(name=DEEP)(waiter),
        "step(timeout)": lambda: step(timeout=DEEP)(waiter),
        "step(retry)": lambda: step(retry=DEEP)(waiter),
        "channel(name)": lambda: channel(DEEP),
        "channel(retry)": lambda: channel("c", retry=DEEP),
        "scheduled(cron)": lambda: scheduled(DEEP),
        "scheduled(tz)": lambda: scheduled("* * * * *", tz=DEEP),
        "scheduled(catchup)": lambda: scheduled("* * * * *", catchup=DEEP),
        "Queue(name)": lambda: Queue(DEEP),
        "Queue(concurrency)": lambda: Queue("q", concurrency=DEEP),
        "Queue(rate_limit)": lambda: Queue("q", rate_limit=DEEP),
        "RateLimit(period)": lambda: RateLimit(1, DEEP),
        "RetryPolicy(max_attempts)": lambda: RetryPolicy(max_attempts=DEEP),
        "RetryPolicy(backoff)": lambda: RetryPolicy(backoff=DEEP),
        "Worker(flows)": lambda: Worker(store, flows=[DEEP]),
        "Worker(queues)": lambda: Worker(store, queues=DEEP),
        "Worker(lease_ttl)": lambda: Worker(store, lease_ttl=DEEP),
    }
    outcomes = {what: await _outcome(call) for what, call in calls.items()}
    assert [w for w, got in outcomes.items() if got in ("ok", "RecursionError")] == []


@flow(registry=REGISTRY, name="tests.boundary.deep_calls")
async def deep_calls() -> list[str]:
    from sdk import patched, sleep, sleep_until, start_child, wait_for_event

    calls: list[Callable[[], Any]] = [
        lambda: wait_for(DEEP), lambda: wait_for("go", timeout=DEEP),
        lambda: wait_for("ok", human=True, approvers=DEEP), lambda: sleep(DEEP),
        lambda: sleep_until(DEEP), lambda: wait_for_event(DEEP),
        lambda: wait_for_event("e", match=DEEP), lambda: wait_for_event("e", match={"k": DEEP}),
        lambda: start_child(DEEP), lambda: start_child(waiter, run_id=DEEP),
        lambda: start_child(waiter, start_in=DEEP), lambda: patched(DEEP),
    ]  # fmt: skip
    return [await _outcome(call) for call in calls]


async def test_a_deeply_nested_value_in_any_flow_call_is_refused_not_recursed() -> None:
    async with FlowTestEnv(registry=REGISTRY) as env:
        handle = await env.start(deep_calls)
        await env.run_until_idle()
        outcomes = await handle.result()
    assert "RecursionError" not in outcomes and "ok" not in outcomes, outcomes


@pytest.mark.parametrize("depth", [101, 100_000])
def test_a_command_line_payload_nested_past_the_bound_exits_2(depth: int) -> None:
    from click.testing import CliRunner

    from sdk.cli import cli

    payload = "[" * depth + "]" * depth
    done = CliRunner().invoke(cli, ["signal", "r1", "go", "--payload", payload,
                                    "--store", "memory://"])  # fmt: skip
    assert done.exit_code == 2, done.output
    assert "the JSON nests more than 100 levels deep" in done.output
