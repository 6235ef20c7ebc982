"""Hostile values: refused with a short `SerializationError` naming them, or given back
equal after a replay; nothing hangs, and journal data never decides what code runs
(issue 8, items 2, 3, 4, 5, 7 and the value parts of 8)."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import pathlib
import sys
import uuid
from collections.abc import Awaitable, Iterator
from decimal import Decimal
from typing import Any, Protocol

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdk import Reason, Registry, RetryPolicy, RunStatus, Serializer, emit, flow, step, wait_for
from sdk._core._limits import MAX_DEPTH
from sdk._core._serde import dumps, encode_exception, loads, rebuild_exception, type_path
from sdk.errors import RunFailed, SerializationError, StepError
from stores.redis import RedisStore
from testing import FlowTestEnv

REGISTRY = Registry()
#: A short message: what it names, a cut-down value, and what to do.
SHORT = 600

# -- hostile values ------------------------------------------------------------------


def _cyclic(kind: str, inner: Any) -> Any:
    if kind == "list":
        x: list[Any] = [inner]
        x.append(x)
        return x
    if kind == "dict":
        d: dict[str, Any] = {"v": inner}
        d["self"] = d
        return d
    t = ([inner],)
    t[0].append(t)  # a tuple that holds itself, through a list
    return t


def _nested(depth: int, inner: Any) -> Any:
    for _ in range(depth):
        inner = [inner]
    return inner


surrogates = st.sampled_from(["\ud800", "\udcff", "a\udfffb"]) | st.builds(
    lambda a, b: a + "\udcff" + b, st.text(max_size=3), st.text(max_size=3)
)
huge_ints = (
    st.integers(min_value=2**63)
    | st.integers(max_value=-(2**63) - 1)
    | st.builds(pow, st.just(10), st.integers(1000, 6000))
)
fine_scalars = (
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8)
    | st.binary(max_size=6) | st.datetimes() | st.uuids() | st.decimals(allow_nan=False, places=2)
)  # fmt: skip
bad_scalars = huge_ints | st.sampled_from([math.nan, math.inf, -math.inf]) | surrogates
# one leaf in eight is bad: most values hold none, or one
scalars = st.integers(0, 7).flatmap(lambda i: bad_scalars if i == 0 else fine_scalars)
hashables = (
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.text(max_size=3)
    | st.floats(allow_nan=False)
)
keys = st.integers(0, 3).flatmap(
    lambda i: (
        st.text(max_size=4)
        if i
        else (surrogates | st.integers(-3, 3) | st.none() | st.booleans() | st.floats())
    )
)
trees = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.frozensets(hashables, max_size=3)
        | st.sets(hashables, max_size=3)
        | st.dictionaries(keys, inner, max_size=3)
    ),
    max_leaves=10,
)
hostile = st.integers(0, 9).flatmap(
    lambda i: (
        st.builds(_cyclic, st.sampled_from(["list", "dict", "tuple"]), fine_scalars)
        if i == 0
        else st.builds(_nested, st.integers(MAX_DEPTH - 2, MAX_DEPTH + 40), fine_scalars)
        if i == 1
        else trees
    )
)

SMALL = Serializer(max_payload_bytes=120)
DEFAULT = Serializer()


def assert_clear(exc: SerializationError, names: str) -> None:
    message = str(exc)
    assert names in message, f"{names!r} not named in {message!r}"
    assert len(message) < SHORT, message


def same(back: Any, value: Any) -> bool:
    return bool(back == value) and type(back) is type(value)


@settings(max_examples=300, deadline=None)
@given(value=hostile, serializer=st.sampled_from([DEFAULT, SMALL]))
def test_the_serializer_refuses_clearly_or_gives_back_an_equal_value(
    value: Any, serializer: Serializer
) -> None:
    what = "result of step 'hostile#1'"
    try:
        data, path = serializer.encode(value, None, what)
    except SerializationError as exc:
        assert_clear(exc, "hostile#1")
        return
    text = dumps(data)
    assert len(text.encode("utf-8")) <= serializer.max_payload_bytes  # storable, in bounds
    assert same(serializer.decode(loads(text), None, path, what), value)


@settings(max_examples=150, deadline=None)
@given(value=hostile, declared=st.sampled_from([list[Any], dict[str, Any], tuple[Any, ...]]))
def test_an_annotated_value_is_refused_clearly_or_given_back_equal(
    value: Any, declared: Any
) -> None:
    what = "flow 'f' argument 'x'"
    try:
        data, path = DEFAULT.encode(value, declared, what)
    except SerializationError as exc:
        assert_clear(exc, "argument 'x'")
        return
    assert path is None
    assert DEFAULT.decode(loads(dumps(data)), declared, None, what) == value


# -- the same values through runs ----------------------------------------------------------

VALUES: dict[str, Any] = {}
CALLS: dict[str, int] = {}


@step(name="hostile")
async def hostile_step(key: str) -> Any:  # Any: no annotation (the type is recorded)
    CALLS[key] = CALLS.get(key, 0) + 1
    return VALUES[key]


@flow(registry=REGISTRY, name="tests.bad_values.step_result")
async def step_result(key: str) -> bool:
    value = await hostile_step(key)
    await wait_for("again")  # the next activation replays the step from the journal
    return same(value, VALUES[key])


@flow(registry=REGISTRY, name="tests.bad_values.argument")
async def argument(key: str, value: Any) -> bool:
    await wait_for("again")  # and the argument is read back from the run again
    return same(value, VALUES[key])


class Runs:
    """One env, driven from sync Hypothesis tests."""

    def __init__(self) -> None:
        self.runner = asyncio.Runner()
        self.env = FlowTestEnv(registry=REGISTRY)
        self.run(self.env.__aenter__())
        self.n = 0

    def run(self, coro: Awaitable[Any]) -> Any:
        return self.runner.run(asyncio.wait_for(coro, 30))

    def key(self, value: Any) -> str:
        self.n += 1
        key = f"v{self.n}"
        VALUES[key] = value
        return key

    async def finish(self, run_id: str) -> Any:
        env = self.env
        await env.run_until_idle()
        if (await env.client.get(run_id)).status is RunStatus.WAITING_FOR_SIGNAL:
            await env.client.signal(run_id, "again")
            await env.run_until_idle()
        return await env.client.get(run_id)

    def close(self) -> None:
        self.run(self.env.__aexit__(None, None, None))
        self.runner.close()


@pytest.fixture(name="runs", scope="module")
def _runs() -> Iterator[Runs]:
    runs = Runs()
    yield runs
    runs.close()


RUN_SETTINGS = settings(
    max_examples=40,
    # the profile's suppressions (tests/conftest.py) and this one
    suppress_health_check=[*settings().suppress_health_check,
                           HealthCheck.function_scoped_fixture],
)  # fmt: skip


@RUN_SETTINGS
@given(value=hostile)
def test_a_hostile_step_result_fails_the_step_clearly_or_replays_equal(
    runs: Runs, value: Any
) -> None:
    key = runs.key(value)
    handle = runs.run(runs.env.start(step_result, key))
    record = runs.run(runs.finish(handle.run_id))
    assert CALLS[key] == 1  # never run again: a bad value is not a store error
    if record.status is RunStatus.COMPLETED:
        assert record.result is True
        return
    assert record.status is RunStatus.FAILED, record
    assert record.error is not None
    assert (record.error.reason, record.error.step_key) == ("serialization_error", "hostile#1")
    assert record.error.type == "sdk.errors:SerializationError"
    assert "hostile#1" in record.error.message
    assert len(record.error.message) < SHORT


@RUN_SETTINGS
@given(value=hostile)
def test_a_hostile_flow_argument_is_refused_at_start_or_read_back_equal(
    runs: Runs, value: Any
) -> None:
    key = runs.key(value)
    try:
        handle = runs.run(runs.env.start(argument, key, value))
    except SerializationError as exc:
        assert_clear(exc, "argument 'value'")
        return
    record = runs.run(runs.finish(handle.run_id))
    assert record.status is RunStatus.COMPLETED, record
    assert record.result is True


# -- issue 8 item 2: cycles never hang -------------------------------------------------------


@flow(registry=REGISTRY, name="tests.bad_values.echo")
async def echo(value: Any) -> Any:
    return value


@pytest.mark.timeout(10)
@pytest.mark.parametrize("kind", ["list", "dict", "tuple"])
async def test_a_cyclic_argument_is_refused_promptly(kind: str) -> None:
    async with FlowTestEnv(registry=REGISTRY) as env:
        with pytest.raises(SerializationError) as info:
            await asyncio.wait_for(env.client.start(echo, _cyclic(kind, 1)), timeout=5)
        assert_clear(info.value, "argument 'value'")
        assert "reference cycle" in str(info.value)
        assert await env.client.list_runs() == []


@attrs.define(eq=False)
class Node:
    name: str
    children: list[Node] = attrs.field(factory=list)


@pytest.mark.timeout(10)
async def test_serializer_work_on_a_cycle_through_objects_ends_promptly() -> None:
    root = Node("root")
    root.children.append(Node("child", [root]))
    with pytest.raises(SerializationError, match="reference cycle"):
        await asyncio.wait_for(
            asyncio.to_thread(DEFAULT.encode, root, Node, "result of step 'tree#1'"), 5
        )
    with pytest.raises(SerializationError, match="reference cycle"):
        await asyncio.wait_for(
            asyncio.to_thread(DEFAULT.encode, root, None, "result of step 'tree#1'"), 5
        )


@pytest.mark.timeout(10)
def test_a_shared_structure_that_expands_exponentially_is_refused_promptly() -> None:
    shared: Any = [0]
    for _ in range(80):  # 2**80 elements as JSON, from 80 lists
        shared = [shared, shared]
    with pytest.raises(SerializationError, match="over the limit") as info:
        SMALL.encode(shared, None, "payload of signal 'go'")
    assert_clear(info.value, "signal 'go'")


@step(name="loop")
async def loop_step() -> Any:
    x: list[Any] = []
    x.append(x)
    return x


@flow(registry=REGISTRY, name="tests.bad_values.loop")
async def loop_flow() -> None:
    await loop_step()


@pytest.mark.timeout(10)
async def test_a_step_returning_a_cycle_fails_with_serialization_error() -> None:
    async with FlowTestEnv(registry=REGISTRY) as env:
        handle = await env.start(loop_flow)
        await asyncio.wait_for(env.run_until_idle(), 5)
        with pytest.raises(RunFailed) as info:
            await handle.result(timeout=1)
    assert info.value.error.reason == "serialization_error"
    assert info.value.error.step_key == "loop#1"
    assert "reference cycle" in info.value.error.message


# -- item 3: an unstorable step result fails the step, once --------------------------------

RAN: list[str] = []


@step(name="listdir")
async def listdir_step() -> list[str]:
    RAN.append("listdir")
    return ["ok.txt", b"caf\xe9.txt".decode("utf-8", "surrogateescape")]  # as os.listdir does


@flow(registry=REGISTRY, name="tests.bad_values.listdir")
async def listdir_flow() -> list[str]:
    return await listdir_step()


async def test_a_lone_surrogate_in_a_step_result_fails_the_step_once() -> None:
    RAN.clear()
    async with FlowTestEnv(registry=REGISTRY) as env:
        handle = await env.start(listdir_flow)
        await env.run_until_idle()
        await env.advance(600)  # lease expiries would recover a run that the engine lost
        with pytest.raises(RunFailed) as info:
            await handle.result(timeout=1)
        events = [e.type for e in await env.client.events(handle.run_id)]
    assert RAN == ["listdir"]
    error = info.value.error
    assert (error.reason, error.step_key) == (Reason.SERIALIZATION_ERROR, "listdir#1")
    assert "lone surrogate" in error.message and "\\udce9" in error.message
    assert "step.failed" in events


@step(name="bad_message")
async def bad_message_step() -> None:
    RAN.append("bad_message")
    raise ValueError("no such file: caf\udce9.txt " + "x" * 100_000)


@flow(registry=REGISTRY, name="tests.bad_values.bad_message")
async def bad_message_flow() -> None:
    await bad_message_step()


async def test_a_step_failure_whose_message_is_not_storable_is_recorded_cleaned() -> None:
    RAN.clear()
    async with FlowTestEnv(registry=REGISTRY) as env:
        handle = await env.start(bad_message_flow)
        await env.run_until_idle()
        await env.advance(600)
        with pytest.raises(RunFailed) as info:
            await handle.result(timeout=1)
    assert RAN == ["bad_message"]
    error = info.value.error
    assert (error.type, error.reason) == ("builtins:ValueError", Reason.STEP_FAILED)
    assert error.message.startswith("no such file: caf\\udce9.txt xxx")
    assert error.message.endswith("more characters]") and len(error.message) < 4200


@flow(registry=REGISTRY, name="tests.bad_values.bad_flow_error")
async def bad_flow_error() -> None:
    raise RuntimeError("caf\udce9")


@flow(registry=REGISTRY, name="tests.bad_values.bad_flow_result")
async def bad_flow_result() -> Any:
    return {"name": "caf\udce9", "n": float("nan")}


async def test_a_flow_result_or_error_that_is_not_storable_fails_the_run_clearly() -> None:
    async with FlowTestEnv(registry=REGISTRY) as env:
        raised = await env.start(bad_flow_error)
        returned = await env.start(bad_flow_result)
        await env.run_until_idle()
        await env.advance(600)
        with pytest.raises(RunFailed) as info:
            await raised.result(timeout=1)
        assert (info.value.error.type, info.value.error.message) == (
            "builtins:RuntimeError",
            "caf\\udce9",
        )
        with pytest.raises(RunFailed) as info:
            await returned.result(timeout=1)
    assert info.value.error.reason == Reason.SERIALIZATION_ERROR
    assert "result of flow" in info.value.error.message


class Shape(Protocol):  # not runtime-checkable: isinstance() against it raises TypeError
    def area(self) -> float: ...


@attrs.frozen
class Square:
    side: float

    def area(self) -> float:
        return self.side**2


@step(name="shape")
async def shape_step() -> Shape:
    RAN.append("shape")
    return Square(2.0)


@flow(registry=REGISTRY, name="tests.bad_values.shape")
async def shape_flow() -> Shape:
    await shape_step()
    return Square(1.0)


async def test_any_error_while_storing_a_result_is_a_serialization_error_not_a_crash() -> None:
    RAN.clear()
    async with FlowTestEnv(registry=REGISTRY) as env:
        handle = await env.start(shape_flow)
        await env.run_until_idle()
        await env.advance(600)
        with pytest.raises(RunFailed) as info:
            await handle.result(timeout=1)
    assert RAN == ["shape"]
    assert (info.value.error.reason, info.value.error.step_key) == (
        "serialization_error",
        "shape#1",
    )
    assert "result of step 'shape#1': cannot be stored: TypeError" in info.value.error.message


# -- item 4: values that would change are refused; annotated they replay exactly ------------

CHANGED = (b"\x00\xff", {1, 2}, (3,), {None: 1})


def test_a_value_that_would_change_is_refused_saying_what_it_would_become() -> None:
    with pytest.raises(SerializationError) as info:
        DEFAULT.encode(CHANGED, None, "result of step 'mixed#1'")
    message = str(info.value)
    assert_clear(info.value, "mixed#1")
    assert "would come back as ('0RI', [1, 2], [3], {'null': 1})" in message
    assert "annotate" in message


@pytest.mark.parametrize(
    ("value", "declared"),
    [
        ({False: "no"}, dict[bool, str]),  # JSON writes the key "false"; bool("false") is True
        ([(1, 2)], list[Any]),
        ({"at": dt.datetime(2030, 1, 1)}, dict[str, Any]),
        ((1, 2), list[int]),
    ],
    ids=["bool-key", "tuple-in-any", "datetime-in-any", "tuple-as-list"],
)
def test_an_annotated_value_that_would_change_is_refused(value: Any, declared: Any) -> None:
    with pytest.raises(SerializationError, match="would come back as") as info:
        DEFAULT.encode(value, declared, "result of step 'shape#1'")
    assert_clear(info.value, "shape#1")


@step(name="typed_mixed")
async def typed_mixed() -> tuple[bytes, set[int], tuple[int, ...], dict[int, str]]:
    return (b"\x00\xff", {1, 2}, (3,), {1: "one"})


@flow(registry=REGISTRY, name="tests.bad_values.typed_mixed")
async def typed_mixed_flow() -> bool:
    value = await typed_mixed()
    await wait_for("again")
    return value == (b"\x00\xff", {1, 2}, (3,), {1: "one"})


async def test_the_same_value_annotated_replays_exactly() -> None:
    async with FlowTestEnv(registry=REGISTRY) as env:
        handle = await env.start(typed_mixed_flow)
        await env.run_until_idle()
        await env.client.signal(handle.run_id, "again")
        await env.run_until_idle()
        assert await handle.result(timeout=1) is True


# -- item 5: a recorded failure keeps its type name and message ------------------------------


@step(name="decode")
async def decode_step() -> str:
    return b"caf\xe9".decode("utf-8")


@flow(registry=REGISTRY, name="tests.bad_values.decode")
async def decode_flow() -> str:
    try:
        await decode_step()
    except UnicodeDecodeError as exc:  # on the replay too
        caught = f"{type(exc).__name__}: {exc}"
    await wait_for("again")
    return caught


async def test_a_replayed_unicode_decode_error_keeps_its_message_and_type() -> None:
    async with FlowTestEnv(registry=REGISTRY) as env:
        handle = await env.start(decode_flow)
        await env.run_until_idle()
        await env.client.signal(handle.run_id, "again")
        await env.run_until_idle()
        result = await handle.result(timeout=1)
    assert result == (
        "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe9 in position 3: "
        "unexpected end of data"
    )


def test_an_exception_whose_args_are_not_json_rebuilds_catchable_with_its_message() -> None:
    try:
        b"\xff".decode()
    except UnicodeDecodeError as exc:
        original = exc
    data = loads(dumps(encode_exception(original)))
    assert "args" not in data  # bytes: not kept
    back = rebuild_exception(data, "s#1")
    assert isinstance(back, UnicodeDecodeError)
    assert str(back) == str(original)
    assert (type(back).__module__, type(back).__qualname__) == ("builtins", "UnicodeDecodeError")


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


def test_an_exception_that_cannot_be_printed_is_still_recorded() -> None:
    data = encode_exception(Unprintable())
    assert data["message"] == "<Unprintable: its __str__ failed>"
    dumps(data).encode("utf-8")


# -- item 7: journal data never decides what code runs ---------------------------------------

NOT_IMPORTED = next(
    m for m in ("this", "tabnanny", "mailbox", "wave", "sndhdr") if m not in sys.modules
)


@attrs.frozen
class Point:
    x: int
    y: int


@pytest.mark.parametrize(
    "path",
    [
        f"{NOT_IMPORTED}:Thing",
        "pathlib:Path",
        "builtins:object",
        "os:system",
        "sdk:flow",
        "nowhere",
    ],
)
def test_a_recorded_type_outside_the_allow_list_is_refused_and_nothing_is_imported(
    path: str,
) -> None:
    with pytest.raises(SerializationError, match="not one replay may build") as info:
        DEFAULT.decode({"a": 1}, None, path, "result of step 'p#1'")
    assert_clear(info.value, "p#1")
    assert NOT_IMPORTED not in sys.modules


def test_allowed_types_resolve_from_loaded_modules_only() -> None:
    serializer = Serializer()
    assert serializer.resolve("builtins:tuple") is tuple
    found = serializer.resolve("datetime:datetime")  # (not freezegun's, while a FakeClock runs)
    assert found is not None and type_path(found) == "datetime:datetime"
    assert serializer.resolve("decimal:Decimal") is Decimal
    assert serializer.resolve(f"{__name__}:Point") is Point  # attrs, in a loaded module
    assert (
        serializer.resolve(f"{__name__}:Unprintable") is None
    )  # neither attrs, dataclass nor enum
    assert serializer.resolve("pathlib:PurePath") is None
    assert serializer.resolve("uuid:UUID") is uuid.UUID


@pytest.mark.parametrize(
    "path", [f"{NOT_IMPORTED}:Error", "builtins:SystemExit", "pathlib:Path", "os:system", "x"]
)
def test_a_recorded_exception_type_outside_loaded_exceptions_becomes_step_error(path: str) -> None:
    back = rebuild_exception({"type": path, "message": "boom"}, "s#1")
    assert isinstance(back, StepError)
    assert (back.type_name, back.message) == (path, "boom")
    assert NOT_IMPORTED not in sys.modules


def test_a_stored_retry_policy_does_not_import_its_exception_types() -> None:
    text = (
        RetryPolicy(non_retryable=(KeyError,))
        .to_json()
        .replace("builtins:KeyError", f"{NOT_IMPORTED}:E")
    )
    with pytest.raises(SerializationError, match="never imported"):
        RetryPolicy.from_json(text)
    assert NOT_IMPORTED not in sys.modules
    assert RetryPolicy.from_json(
        RetryPolicy(non_retryable=(KeyError,)).to_json()
    ).non_retryable == (KeyError,)


@step(name="point")
async def point_step() -> Any:  # Any: no annotation (its type is recorded)
    return Point(1, 2)


@flow(registry=REGISTRY, name="tests.bad_values.point")
async def point_flow() -> int:
    p = await point_step()
    await wait_for("again")
    return int(p.x + p.y)


async def test_a_tampered_type_in_the_journal_fails_the_run_without_importing() -> None:
    # no sticky cache: the wake-up replays the (tampered) journal
    async with FlowTestEnv(registry=REGISTRY, sticky_cache=0) as env:
        handle = await env.start(point_flow)
        await env.run_until_idle()
        store = env.store
        assert isinstance(store, RedisStore)
        key = store.keys.journal(handle.run_id)
        raw = await store.client.hget(key, "point#1")
        assert raw is not None
        record = loads(raw)
        assert record["type"] == f"{__name__}:Point"
        record["type"] = "pathlib:Path"
        await store.client.hset(key, "point#1", dumps(record))
        await env.client.signal(handle.run_id, "again")
        await env.run_until_idle()
        with pytest.raises(RunFailed) as info:
            await handle.result(timeout=1)
    assert info.value.error.reason == Reason.SERIALIZATION_ERROR
    assert "'pathlib:Path' is not one replay may build" in info.value.error.message


class Money:
    """Neither attrs nor a dataclass: stored by converter hooks."""

    def __init__(self, cents: int) -> None:
        self.cents = cents

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Money) and other.cents == self.cents

    def __hash__(self) -> int:
        return self.cents


def test_a_registered_type_is_stored_without_annotation_and_rebuilt() -> None:
    serializer = Serializer()
    serializer.converter.register_unstructure_hook(Money, lambda m: m.cents)
    serializer.converter.register_structure_hook(Money, lambda v, _: Money(v))
    with pytest.raises(SerializationError, match=r"cannot store a tests\.test_bad_values:Money"):
        serializer.encode(Money(5), None, "result of step 'm#1'")
    assert serializer.resolve(f"{__name__}:Money") is None
    assert serializer.register_type(Money) is Money
    data, path = serializer.encode(Money(5), None, "result of step 'm#1'")
    assert (data, path) == (5, f"{__name__}:Money")
    assert serializer.decode(data, None, path, "result of step 'm#1'") == Money(5)


def test_a_type_defined_in_a_function_is_refused_when_stored_not_on_replay() -> None:
    @attrs.frozen
    class Local:
        x: int

    with pytest.raises(SerializationError, match="define it at module level") as info:
        DEFAULT.encode(Local(1), None, "result of step 'local#1'")
    assert_clear(info.value, "local#1")


# -- item 8 (values): clear errors, documented limits ---------------------------------------


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (_nested(1000, 1), f"nested more than {MAX_DEPTH} levels"),
        (_nested(900, 1), f"nested more than {MAX_DEPTH} levels"),
        (_nested(100_000, 1), f"nested more than {MAX_DEPTH} levels"),
        (10**5000, "outside the signed 64-bit range"),
        (2**63, "outside the signed 64-bit range"),
        ([float("nan")], "the float nan"),
        ({"x": -math.inf}, "the float -inf"),
        ("caf\udce9", "lone surrogate"),
        ({"caf\udce9": 1}, "lone surrogate"),
        ("x" * 10_000_000, "over the limit of 2,000,000 bytes"),
        (["é" * 1_000_000], "over the limit of 2,000,000 bytes"),
        (pathlib.Path("/etc"), "cannot store a pathlib"),
    ],
    ids=[
        "depth-1000", "depth-900", "depth-100000", "int-5000-digits", "int-2**63", "nan",
        "inf", "surrogate", "surrogate-key", "10MB", "2MB-utf8", "path",
    ],
)  # fmt: skip
async def test_a_bad_argument_is_refused_at_start_with_a_short_clear_error(
    value: Any, says: str
) -> None:
    async with FlowTestEnv(registry=REGISTRY) as env:
        with pytest.raises(SerializationError) as info:
            await env.client.start(echo, value)
        assert says in str(info.value)
        assert_clear(info.value, "flow 'tests.bad_values.echo' argument 'value'")
        assert await env.client.list_runs() == []


def test_the_limits_hold_at_their_edges() -> None:
    assert DEFAULT.max_payload_bytes == 2_000_000
    assert DEFAULT.encode(_nested(MAX_DEPTH, 1), None, "x")[0] == _nested(MAX_DEPTH, 1)
    assert DEFAULT.encode([2**63 - 1, -(2**63)], None, "x")[0] == [2**63 - 1, -(2**63)]
    edge = "x" * (DEFAULT.max_payload_bytes - 2)  # its JSON: the limit exactly
    assert DEFAULT.encode(edge, None, "x")[0] is edge
    with pytest.raises(SerializationError, match="2,000,001 bytes"):
        DEFAULT.encode(edge + "x", None, "x")
    with pytest.raises(ValueError, match="max_payload_bytes"):
        Serializer(max_payload_bytes=0)


@flow(registry=REGISTRY, name="tests.bad_values.pair")
async def pair(a: str, b: str) -> str:
    return a + b


async def test_the_payload_limit_applies_to_a_flows_arguments_together() -> None:
    async with FlowTestEnv(registry=REGISTRY, converter=Serializer(max_payload_bytes=300)) as env:
        with pytest.raises(SerializationError, match=r"arguments of flow .*over the limit of 300"):
            await env.client.start(pair, "x" * 200, b="y" * 200)
        handle = await env.start(pair, "x" * 100, b="y" * 100)
        await env.run_until_idle()
        assert await handle.result(timeout=1) == "x" * 100 + "y" * 100


@flow(registry=REGISTRY, name="tests.bad_values.waits")
async def waits() -> Any:
    return await wait_for("go")


@step(name="emits")
async def emits() -> None:
    emit("mail", "x" * 500)


@step(name="big")
async def big() -> str:
    return "x" * 500


@flow(registry=REGISTRY, name="tests.bad_values.sizes")
async def sizes(which: str) -> None:
    await (emits() if which == "emit" else big())


async def test_the_payload_limit_applies_to_every_stored_value() -> None:
    small = Serializer(max_payload_bytes=200)
    async with FlowTestEnv(registry=REGISTRY, converter=small, channels=[]) as env:
        with pytest.raises(SerializationError, match=r"argument 'value'.*over the limit of 200"):
            await env.client.start(echo, "x" * 500)
        handle = await env.start(waits)
        await env.run_until_idle()
        with pytest.raises(SerializationError, match=r"payload of signal 'go'.*over the limit"):
            await env.client.signal(handle.run_id, "go", {"blob": "x" * 500})
        step_run = await env.start(sizes, "big")
        emit_run = await env.start(sizes, "emit")
        await env.client.signal(handle.run_id, "go", "fits")
        await env.run_until_idle()
        assert await handle.result(timeout=1) == "fits"
        for run, key, says in (
            (step_run, "big#1", "result of step"),
            (emit_run, "emits#1", "payload of intent"),
        ):
            with pytest.raises(RunFailed) as info:
                await run.result(timeout=1)
            assert info.value.error.step_key == key
            assert (
                says in info.value.error.message
                and "over the limit of 200" in info.value.error.message
            )
