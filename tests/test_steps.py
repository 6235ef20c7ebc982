"""Steps: journaling, crash recovery, replayed types and failures, gather, nesting."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import inspect
import uuid
from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, cast

import attrs
import pytest

from sdk import current_run, current_step, flow, step, wait_for
from sdk.errors import NotInRunError, RunFailed, SerializationError
from stores.redis import RedisStore
from testing import FlowTestEnv

# Executions of step bodies, by step key (or a label), across activations.
RUNS: Counter[str] = Counter()
# Idempotency keys seen by step bodies, in execution order.
KEYS: list[tuple[str, str]] = []
# What replayed / live flow code saw, one entry per activation.
SEEN: list[Any] = []


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> None:
    RUNS.clear()
    KEYS.clear()
    SEEN.clear()


async def journal(env: FlowTestEnv, run_id: str) -> dict[str, str]:
    """The run's journal hash as stored: step key -> record JSON."""
    store = env.store
    assert isinstance(store, RedisStore)
    raw = cast("dict[str, str]", await store.client.hgetall(store.keys.journal(run_id)))
    return raw


# -- completed steps are not re-run after a crash --------------------------------------


@step
async def reserve(order: str) -> str:
    ctx = current_step()
    RUNS[ctx.key] += 1
    KEYS.append((ctx.key, ctx.idempotency_key))
    return f"reserved:{order}"


@step
async def charge(order: str) -> str:
    ctx = current_step()
    RUNS[ctx.key] += 1
    KEYS.append((ctx.key, ctx.idempotency_key))
    return f"charged:{order}"


@step
async def ship(order: str) -> str:
    ctx = current_step()
    RUNS[ctx.key] += 1
    KEYS.append((ctx.key, ctx.idempotency_key))
    return f"shipped:{order}"


@flow(name="tests.steps.checkout")
async def checkout(order: str) -> list[str]:
    return [await reserve(order), await charge(order), await ship(order)]


async def test_completed_steps_are_not_rerun_after_a_crash(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        env.crash_at("charge#1", when="after")
        handle = await env.start(checkout, "o-1", run_id="checkout-o-1")
        await env.run_until_idle()
        # The worker "died" after charge ran but before it was recorded: the lease is held.
        assert await handle.status() == "running"
        assert RUNS == {"reserve#1": 1, "charge#1": 1}

        await env.advance(env.worker.lease_ttl + 1)

        assert await handle.result() == ["reserved:o-1", "charged:o-1", "shipped:o-1"]
        assert RUNS == {"reserve#1": 1, "charge#1": 2, "ship#1": 1}
        charge_keys = [ik for key, ik in KEYS if key == "charge#1"]
        assert charge_keys == ["checkout-o-1:charge#1", "checkout-o-1:charge#1"]


async def test_crash_before_a_step_runs_it_once_after_recovery() -> None:
    async with FlowTestEnv() as env:
        env.crash_at("ship#1", when="before")
        handle = await env.start(checkout, "o-2")
        await env.run_until_idle()
        assert RUNS == {"reserve#1": 1, "charge#1": 1}

        await env.advance(31)

        assert await handle.result() == ["reserved:o-2", "charged:o-2", "shipped:o-2"]
        assert RUNS == {"reserve#1": 1, "charge#1": 1, "ship#1": 1}


async def test_a_crashed_run_is_not_recovered_before_its_lease_expires() -> None:
    async with FlowTestEnv(lease_ttl=10) as env:
        env.crash_at("charge#1")
        handle = await env.start(checkout, "o-3")
        await env.run_until_idle()
        await env.advance(9)
        assert await handle.status() == "running"
        assert RUNS["charge#1"] == 1

        await env.advance(2)

        assert await handle.status() == "completed"
        assert RUNS["charge#1"] == 2


async def test_each_call_of_a_step_gets_the_next_key_and_a_stable_idempotency_key() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(repeat_charge, 3, run_id="rep")
        await env.run_until_idle()
        assert await handle.result() == 3
        assert [(f"charge#{n}", f"rep:charge#{n}") for n in (1, 2, 3)] == KEYS
        assert set(await journal(env, "rep")) == {"charge#1", "charge#2", "charge#3"}


@flow(name="tests.steps.repeat_charge")
async def repeat_charge(times: int) -> int:
    for i in range(times):
        await charge(f"item-{i}")
    return times


# -- a replayed step returns the live type --------------------------------------------


def live_type(value: object) -> type:
    """The type of a value, seen through freezegun.

    While a FakeClock runs, freezegun swaps `datetime.datetime` for its subclass
    `FakeDatetime`, so values rebuilt under it have that type.
    """
    tp = type(value)
    return datetime if isinstance(value, datetime) and tp.__name__ == "FakeDatetime" else tp


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@attrs.frozen
class Money:
    amount: Decimal
    currency: str


@dataclasses.dataclass(frozen=True)
class Parcel:
    parcel_id: uuid.UUID
    weight: float
    sent_at: datetime


PARCEL_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")
SENT_AT = datetime(2031, 5, 17, 9, 30, 15, 123456, tzinfo=UTC)


@step
async def get_money() -> Money:
    RUNS["get_money"] += 1
    return Money(Decimal("12.50"), "EUR")


@step
async def get_parcel() -> Parcel:
    RUNS["get_parcel"] += 1
    return Parcel(PARCEL_ID, 1.25, SENT_AT)


@step
async def get_color() -> Color:
    RUNS["get_color"] += 1
    return Color.BLUE


@step
async def get_time() -> datetime:
    RUNS["get_time"] += 1
    return SENT_AT


@step
async def get_uuid() -> uuid.UUID:
    RUNS["get_uuid"] += 1
    return PARCEL_ID


@step
async def get_decimal() -> Decimal:
    RUNS["get_decimal"] += 1
    return Decimal("0.1")


@step
async def get_monies() -> list[Money]:
    RUNS["get_monies"] += 1
    return [Money(Decimal("1"), "USD"), Money(Decimal("2.00"), "JPY")]


@step
async def get_parcels() -> dict[str, Parcel]:
    RUNS["get_parcels"] += 1
    return {"a": Parcel(PARCEL_ID, 2.0, SENT_AT)}


@step
async def get_unannotated():  # type: ignore[no-untyped-def]  # no annotation on purpose
    RUNS["get_unannotated"] += 1
    return Money(Decimal("7"), "GBP")


@step
async def get_unannotated_parcel():  # type: ignore[no-untyped-def]
    RUNS["get_unannotated_parcel"] += 1
    return Parcel(PARCEL_ID, 3.5, SENT_AT)


@step
async def get_pair() -> tuple[int, str]:
    RUNS["get_pair"] += 1
    return (7, "seven")


@step
async def get_unannotated_tuple():  # type: ignore[no-untyped-def]
    RUNS["get_unannotated_tuple"] += 1
    return (1, "one")


@step
async def get_plain() -> dict[str, Any]:
    RUNS["get_plain"] += 1
    return {"n": 1, "items": [1, 2.5, None, "x"], "nested": {"ok": True}}


RICH_STEPS = [
    get_money,
    get_parcel,
    get_color,
    get_time,
    get_uuid,
    get_decimal,
    get_monies,
    get_parcels,
    get_unannotated,
    get_unannotated_parcel,
    get_pair,
    get_unannotated_tuple,
    get_plain,
]


@flow(name="tests.steps.rich_types")
async def rich_types() -> int:
    values = [await s() for s in RICH_STEPS]
    SEEN.append(values)
    await wait_for("again")  # parks: the next activation replays every step above
    return len(values)


async def test_a_replayed_step_returns_the_live_type_and_value() -> None:
    async with FlowTestEnv(sticky_cache=0) as env:  # every wake-up replays
        handle = await env.start(rich_types)
        await env.run_until_idle()
        await env.client.signal(handle.run_id, "again")
        await env.run_until_idle()
        assert await handle.result() == len(RICH_STEPS)

    live, replayed = SEEN
    assert all(n == 1 for n in RUNS.values()), RUNS  # replay ran no step body
    assert len(RUNS) == len(RICH_STEPS)
    for a, b in zip(live, replayed, strict=True):
        assert live_type(b) is type(a), (a, b)
        assert a == b
    expected_types = [
        Money,
        Parcel,
        Color,
        datetime,
        uuid.UUID,
        Decimal,
        list,
        dict,
        Money,
        Parcel,
        tuple,
        tuple,
        dict,
    ]
    assert [live_type(v) for v in replayed] == expected_types
    assert all(type(m) is Money for m in replayed[6])
    assert type(replayed[7]["a"]) is Parcel
    assert replayed[1].sent_at.tzinfo is not None
    assert str(replayed[5]) == "0.1"  # exact, not a float


# -- a recorded failure re-raises the same type and message ---------------------------


class QuotaExceeded(Exception):
    """An exception whose constructor does not take the message."""

    def __init__(self, user: str, limit: int) -> None:
        super().__init__(f"{user} is over the quota of {limit}")
        self.user = user
        self.limit = limit


class RemoteError(Exception):
    """An exception with several constructor args and a custom __str__."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(code, detail)
        self.code = code
        self.detail = detail

    def __str__(self) -> str:
        return f"remote said {self.code}: {self.detail}"


@step
async def validate(value: str) -> str:
    RUNS["validate"] += 1
    raise ValueError(f"bad input {value!r}")


@step
async def check_quota(user: str) -> None:
    RUNS["check_quota"] += 1
    raise QuotaExceeded(user, 3)


@step
async def call_remote() -> None:
    RUNS["call_remote"] += 1
    raise RemoteError(503, "busy")


@flow(name="tests.steps.catching")
async def catching() -> str:
    seen = []
    for call in (lambda: validate("x"), lambda: check_quota("ada"), call_remote):
        try:
            await call()
        except Exception as exc:
            seen.append((type(exc), str(exc), exc.args))
    SEEN.append(seen)
    await wait_for("again")
    return "done"


async def test_a_recorded_failure_reraises_the_same_type_and_message_on_replay() -> None:
    async with FlowTestEnv(sticky_cache=0) as env:  # every wake-up replays
        handle = await env.start(catching)
        await env.run_until_idle()
        await env.client.signal(handle.run_id, "again")
        await env.run_until_idle()
        assert await handle.result() == "done"

    live, replayed = SEEN
    assert RUNS == {"validate": 1, "check_quota": 1, "call_remote": 1}
    assert [(t, m) for t, m, _ in live] == [
        (ValueError, "bad input 'x'"),
        (QuotaExceeded, "ada is over the quota of 3"),
        (RemoteError, "remote said 503: busy"),
    ]
    assert [(t, m) for t, m, _ in replayed] == [(t, m) for t, m, _ in live]
    # Args that JSON can hold come back too.
    assert replayed[0][2] == ("bad input 'x'",)
    assert replayed[2][2] == (503, "busy")


@flow(name="tests.steps.uncaught")
async def uncaught() -> None:
    await reserve("o")
    await check_quota("bob")


async def test_an_uncaught_step_failure_fails_the_run_with_its_type_and_step() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(uncaught)
        await env.run_until_idle()
        with pytest.raises(RunFailed) as info:
            await handle.result()
    err = info.value.error
    assert err.type == f"{QuotaExceeded.__module__}:QuotaExceeded"
    assert err.message == "bob is over the quota of 3"
    assert err.step_key == "check_quota#1"
    assert err.reason == "step_failed"
    assert RUNS["check_quota"] == 1


# -- unserializable results -----------------------------------------------------------


class Opaque:
    """Not attrs, not a dataclass, no cattrs hook: the journal cannot hold it."""


@step
async def make_opaque():  # type: ignore[no-untyped-def]
    RUNS["make_opaque"] += 1
    return Opaque()


@step
async def make_opaque_list():  # type: ignore[no-untyped-def]
    return [1, Opaque()]


@flow(name="tests.steps.unserializable")
async def unserializable() -> None:
    await make_opaque()  # type: ignore[no-untyped-call]


@flow(name="tests.steps.unserializable_caught")
async def unserializable_caught() -> str:
    messages = []
    for call in (make_opaque, make_opaque_list):
        try:
            await call()  # type: ignore[no-untyped-call]
        except SerializationError as exc:
            messages.append(str(exc))
    SEEN.append(messages)
    await wait_for("again")
    return " | ".join(messages)


async def test_an_unserializable_step_result_fails_the_step_naming_its_key() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(unserializable)
        await env.run_until_idle()
        with pytest.raises(RunFailed) as info:
            await handle.result()
        raw = await journal(env, handle.run_id)
    err = info.value.error
    assert err.type == "sdk.errors:SerializationError"
    assert err.step_key == "make_opaque#1"
    assert err.reason == "serialization_error"
    assert "make_opaque#1" in err.message
    assert '"state":"failed"' in raw["make_opaque#1"]


async def test_an_unserializable_result_reraises_serialization_error_on_replay() -> None:
    async with FlowTestEnv(sticky_cache=0) as env:  # every wake-up replays
        handle = await env.start(unserializable_caught)
        await env.run_until_idle()
        await env.client.signal(handle.run_id, "again")
        await env.run_until_idle()
        result = await handle.result()
    live, replayed = SEEN
    assert live == replayed
    assert "make_opaque#1" in live[0]
    assert "make_opaque_list#1" in live[1]
    assert result == " | ".join(live)
    assert RUNS["make_opaque"] == 1


@step
async def mislabeled() -> int:
    RUNS["mislabeled"] += 1
    return "abc"  # type: ignore[return-value]  # the annotation is wrong


@flow(name="tests.steps.mislabeled")
async def mislabeled_flow() -> str:
    value = await mislabeled()
    await wait_for("again")
    return repr(value)


async def test_a_result_that_does_not_fit_its_annotation_fails_when_recorded() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(mislabeled_flow)
        await env.run_until_idle()
        # The live step fails at once, as an unserializable result does.
        assert await handle.status() == "failed"
        with pytest.raises(RunFailed) as info:
            await handle.result()
    assert info.value.error.step_key == "mislabeled#1"
    assert info.value.error.reason == "serialization_error"


# -- steps outside runs and inside steps --------------------------------------------


@step
def add(a: int, b: int) -> int:
    """Adds two numbers."""
    return a + b


@step(name="tests.steps.async_add")
async def async_add(a: int, b: int) -> int:
    """Adds two numbers, asynchronously."""
    return a + b


def test_a_sync_step_outside_a_run_is_the_plain_function() -> None:
    assert add(2, 3) == 5
    assert add.__name__ == "add"
    assert add.__doc__ == "Adds two numbers."
    assert list(inspect.signature(add).parameters) == ["a", "b"]
    assert not inspect.iscoroutinefunction(add)


async def test_an_async_step_outside_a_run_is_the_plain_function() -> None:
    assert inspect.iscoroutinefunction(async_add)
    assert await async_add(2, 3) == 5
    assert async_add.__doc__ == "Adds two numbers, asynchronously."


@step
async def inner(x: int) -> int:
    ctx = current_step()
    KEYS.append(("inner", ctx.key))
    RUNS["inner"] += 1
    return x * 10


@step
async def outer(x: int) -> int:
    RUNS["outer"] += 1
    total = await inner(x) + add(x, 1)  # a plain call of an async and a sync step
    KEYS.append(("outer", current_step().key))
    return total


@flow(name="tests.steps.nested")
async def nested(x: int) -> int:
    first = await outer(x)
    total: int = first + await add(1, 1)  # type: ignore[misc]  # a sync step in a flow is awaited
    await wait_for("again")
    return total


async def test_a_step_called_inside_a_step_is_a_plain_call() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(nested, 4)
        await env.run_until_idle()
        await env.client.signal(handle.run_id, "again")
        await env.run_until_idle()
        assert await handle.result() == 4 * 10 + 5 + 2
        keys = set(await journal(env, handle.run_id))
    assert keys == {"outer#1", "add#1", "~wait:again#1"}
    # inner ran as part of outer#1 (its context), once, and was not journaled on its own.
    assert KEYS == [("inner", "outer#1"), ("outer", "outer#1")]
    assert RUNS == {"outer": 1, "inner": 1}


def test_a_step_name_may_not_use_the_reserved_namespace() -> None:
    with pytest.raises(ValueError, match="~"):
        step(name="~wait:x")(add)


# -- gather -------------------------------------------------------------------------


@step
async def fetch(item: int, delay_turns: int) -> str:
    for _ in range(delay_turns):  # finish in a different order than called
        await asyncio.sleep(0)
    ctx = current_step()
    RUNS[f"fetch({item})"] += 1
    KEYS.append((ctx.key, str(item)))
    return f"item-{item}"


@flow(name="tests.steps.gathering")
async def gathering() -> list[str]:
    values = await asyncio.gather(fetch(1, 30), fetch(2, 60), fetch(3, 0))
    SEEN.append(list(values))
    return list(values)


async def test_gather_of_one_step_gets_keys_by_call_order() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(gathering)
        await env.run_until_idle()
        assert await handle.result() == ["item-1", "item-2", "item-3"]
    assert sorted(KEYS) == [("fetch#1", "1"), ("fetch#2", "2"), ("fetch#3", "3")]
    assert [item for _, item in KEYS] == ["3", "1", "2"]  # completion order differed


async def test_gather_after_a_crash_returns_the_same_values_to_the_same_positions() -> None:
    async with FlowTestEnv() as env:
        env.crash_at("fetch#2", when="after")  # the slowest: 1 and 3 are recorded first
        handle = await env.start(gathering)
        await env.run_until_idle()
        assert await handle.status() == "running"
        await env.advance(31)
        assert await handle.result() == ["item-1", "item-2", "item-3"]
    assert RUNS == {"fetch(1)": 1, "fetch(2)": 2, "fetch(3)": 1}
    assert SEEN == [["item-1", "item-2", "item-3"]]  # only the recovered activation finished


@step
async def quick(label: str) -> str:
    RUNS[label] += 1
    return label.upper()


@flow(name="tests.steps.gather_with_wait")
async def gather_with_wait() -> list[Any]:
    values = await asyncio.gather(quick("a"), wait_for("go"), quick("b"))
    return list(values)


async def test_gather_with_a_wait_records_its_steps_before_the_run_parks() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(gather_with_wait)
        await env.run_until_idle()
        assert await handle.status() == "waiting_for_signal"
        raw = await journal(env, handle.run_id)
        assert '"state":"ok"' in raw["quick#1"]
        assert '"state":"ok"' in raw["quick#2"]
        assert '"state":"pending"' in raw["~wait:go#1"]

        await env.client.signal(handle.run_id, "go", {"n": 1})
        await env.run_until_idle()
        assert await handle.result() == ["A", {"n": 1}, "B"]
    assert RUNS == {"a": 1, "b": 1}


# -- context ----------------------------------------------------------------------


def test_current_step_outside_a_step_raises_not_in_run_error() -> None:
    with pytest.raises(NotInRunError, match="FlowTestEnv"):
        current_step()


# -- steps that are methods --------------------------------------------------------


class Account:
    def __init__(self, name: str) -> None:
        self.name = name

    @step(name="tests.steps.Account.label")
    async def label(self, suffix: str) -> str:
        await asyncio.sleep(0)  # let the other call interleave
        return f"{self.name}{suffix}"


@flow(name="tests.steps.method_steps")
async def method_steps() -> list[str]:
    a, b = Account("a"), Account("b")
    return list(await asyncio.gather(a.label("!"), b.label("?"), a.label(".")))


async def test_concurrent_method_steps_run_on_their_own_instances() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(method_steps)
        await env.run_until_idle()
        assert await handle.result() == ["a!", "b?", "a."]


# -- a step reaches the store through the run's client -------------------------------


@step
async def tell(other: str, value: int) -> bool:
    return await current_run().client.signal(other, "from-a-step", value)


@flow(name="tests.steps.teller")
async def teller(other: str) -> bool:
    return await tell(other, 7)


@flow(name="tests.steps.listener")
async def listener() -> Any:
    return await wait_for("from-a-step")


@flow(name="tests.steps.client_in_body")
async def client_in_body() -> Any:
    return current_run().client


async def test_a_step_signals_another_run_through_current_run_client() -> None:
    async with FlowTestEnv() as env:
        other = await env.start(listener)
        await env.run_until_idle()
        handle = await env.start(teller, other.run_id)
        await env.run_until_idle()
        assert await handle.result() is True
        assert await other.result() == 7
        version = await env.start(version_of)
        await env.run_until_idle()
        assert await version.result() == "v7"


@flow(name="tests.steps.version_of", version="v7")
async def version_of() -> str | None:
    return current_run().flow_version


async def test_the_client_is_refused_in_a_flow_body() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(client_in_body)
        await env.run_until_idle()
        with pytest.raises(RunFailed) as info:
            await handle.result()
    assert info.value.error.type == "sdk.errors:NotInStepError"
