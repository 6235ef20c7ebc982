"""Registries are objects: names are identities, and a test can build an isolated one."""

from __future__ import annotations

from typing import Any

import pytest

from sdk import Intent, Registry, channel, flow, step
from sdk.errors import FlowNotFound, RegistryConflict, RunFailed
from testing import FlowTestEnv


@step
async def shout(text: str) -> str:
    return text.upper()


@flow(name="tests.registry.hello", registry=Registry())  # not in the default registry
async def private_hello(name: str) -> str:
    return await shout(f"hello {name}")


def test_a_second_function_under_a_taken_flow_name_raises() -> None:
    registry = Registry()

    async def first() -> None: ...

    async def second() -> None: ...

    flow(name="tests.registry.taken", registry=registry)(first)
    with pytest.raises(RegistryConflict, match=r"'tests.registry.taken' is already registered"):
        flow(name="tests.registry.taken", registry=registry)(second)
    assert registry.flow("tests.registry.taken").fn is first  # the first one stays


def test_the_same_definition_registered_again_replaces_the_entry() -> None:
    registry = Registry()
    for version in ("1", "2"):  # a module imported twice, or reloaded

        @flow(name="tests.registry.reloaded", version=version, registry=registry)
        async def reloaded() -> None: ...

    assert registry.flow("tests.registry.reloaded").version == "2"


def test_a_second_handler_for_a_channel_raises() -> None:
    registry = Registry()

    async def one(intent: Intent) -> None: ...

    async def two(intent: Intent) -> None: ...

    channel("tests.registry.mail", registry=registry)(one)
    with pytest.raises(RegistryConflict, match="already handled by"):
        channel("tests.registry.mail", registry=registry)(two)


def test_a_registry_reports_unknown_flows_and_rejects_other_objects() -> None:
    registry = Registry(private_hello)
    assert set(registry.flows()) == {"tests.registry.hello"}
    with pytest.raises(FlowNotFound, match="nope"):
        registry.flow("nope")
    with pytest.raises(TypeError, match="neither a @flow"):
        registry.add(shout)
    assert "tests.registry.hello" not in Registry.default().flows()


async def test_an_env_with_its_own_registry_serves_only_its_flows() -> None:
    async with FlowTestEnv(registry=Registry(private_hello)) as env:
        handle = await env.start("tests.registry.hello", "ada")  # found by name
        await env.run_until_idle()
        assert await handle.result() == "HELLO ADA"
        assert env.worker.registry is env.registry is env.client.registry
    async with FlowTestEnv() as env:  # the default registry does not know it
        handle = await env.start("tests.registry.hello", "bob")
        await env.run_until_idle()
        assert await handle.status() == "pending"  # no worker serves it


class Twin:
    @step(name="twin")
    async def a(self) -> str:
        return "a"


class Other:
    @step(name="twin")  # the same step name for another function
    async def b(self) -> str:
        return "b"


@flow(name="tests.registry.twins")
async def twins() -> list[Any]:
    return [await Twin().a(), await Other().b()]


async def test_a_run_that_calls_two_steps_of_one_name_fails_clearly() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(twins)
        await env.run_until_idle()
        with pytest.raises(RunFailed) as info:
            await handle.result()
    assert info.value.error.type == "sdk.errors:RegistryConflict"
    assert "two different steps named 'twin'" in info.value.error.message
