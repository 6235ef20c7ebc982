"""The converter is an object you pass: hooks for your own types, on client and worker alike."""

from __future__ import annotations

from decimal import Decimal

import cattrs
import pytest

from sdk import Client, Serializer, flow, step, wait_for
from sdk.errors import SerializationError
from stores import open_store
from testing import FlowTestEnv


class Money:
    """Not attrs, not a dataclass: JSON needs a hook for it."""

    def __init__(self, amount: Decimal, currency: str) -> None:
        self.amount = amount
        self.currency = currency

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Money) and (self.amount, self.currency) == (
            other.amount,
            other.currency,
        )

    def __hash__(self) -> int:
        return hash((self.amount, self.currency))


def money_serializer() -> Serializer:
    serializer = Serializer()
    serializer.converter.register_unstructure_hook(Money, lambda m: f"{m.amount} {m.currency}")
    serializer.converter.register_structure_hook(
        Money, lambda s, _: Money(Decimal(s.split()[0]), s.split()[1])
    )
    return serializer


@step
async def add_tax(price: Money) -> Money:
    return Money(price.amount * Decimal("1.2"), price.currency)


@flow(name="tests.serializer.priced")
async def priced(price: Money) -> Money:
    taxed = await add_tax(price)
    await wait_for("confirm")  # the next activation replays add_tax from the journal
    return taxed


async def test_hooks_on_the_serializer_store_and_rebuild_your_types() -> None:
    async with FlowTestEnv(converter=money_serializer()) as env:
        handle = await env.start(priced, Money(Decimal("10"), "EUR"))
        await env.run_until_idle()
        await env.client.signal(handle.run_id, "confirm")
        await env.run_until_idle()
        assert await handle.result() == Money(Decimal("12.0"), "EUR")
        assert (await env.client.get(handle.run_id)).result == Money(Decimal("12.0"), "EUR")


async def test_a_cattrs_converter_is_accepted_and_wrapped() -> None:
    converter = money_serializer().converter
    assert isinstance(converter, cattrs.Converter)
    async with FlowTestEnv(converter=converter) as env:
        assert env.client.serializer.converter is converter
        assert env.worker.engine.serializer.converter is converter


async def test_without_the_hooks_a_start_fails_before_anything_is_written() -> None:
    store = open_store("memory://")
    try:
        with pytest.raises(SerializationError, match="argument 'price'"):
            await Client(store).start(priced, Money(Decimal("1"), "EUR"), run_id="m-1")
        assert await store.get_run("m-1") is None
    finally:
        await store.close()


def test_converter_must_be_a_serializer_or_a_cattrs_converter() -> None:
    with pytest.raises(TypeError, match="Serializer or a cattrs Converter"):
        Serializer.of("json")  # type: ignore[arg-type]
    assert Serializer.of(None) is Serializer.default()


def test_a_value_recorded_before_the_sdk_layout_moved_its_class_still_decodes() -> None:
    # A Decision (or a RunStatus) stored without an annotation names its class by
    # module; the SDK's modules moved (issue 29): the old names still resolve.
    import importlib.util

    from sdk import Decision, RunStatus
    from sdk._core._serde import MOVED, find_loaded

    ser = Serializer.default()
    data, path = ser.encode(Decision(True, "ada", "ok", None), None, "a value")
    assert path == "sdk._core._types:Decision"
    old = ser.decode(data, None, "sdk._types:Decision", "a value recorded before")
    assert old == Decision(True, "ada", "ok", None)
    assert find_loaded("stores._lifecycle:RunStatus") is RunStatus
    assert find_loaded("sdk._types:NoSuchThing") is None
    assert all(importlib.util.find_spec(new) is not None for new in MOVED.values())
    assert all(new not in MOVED for new in MOVED.values())  # one hop, no chains
