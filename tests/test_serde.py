"""Round trips through the one converter: journal records and values (Hypothesis)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import uuid
from decimal import Decimal
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sdk import Serializer, flow, step
from sdk._core._journal import Journal, Kind, Record, State
from sdk._core._serde import (
    FORMAT_VERSION,
    acyclic_encoder,
    dumps,
    encode_exception,
    loads,
    rebuild_exception,
)
from sdk.errors import SerializationError, StepError
from testing import FlowTestEnv

encode_value = Serializer().encode
decode_value = Serializer().decode

# -- strategies --------------------------------------------------------------------

int64s = st.integers(min_value=-(2**63), max_value=2**63 - 1)  # the documented range
json_scalars = (
    st.none()
    | st.booleans()
    | int64s
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
finite_floats = st.floats(allow_nan=False, allow_infinity=False)

errors = st.none() | st.fixed_dictionaries(
    {"type": st.text(min_size=1), "message": st.text()},
    optional={"args": st.lists(json_values, max_size=3)},
)

records = st.builds(
    Record,
    key=st.text(min_size=1),
    pos=st.integers(min_value=0, max_value=2**31),
    kind=st.sampled_from(Kind),
    state=st.sampled_from(State),
    value=json_values,
    type=st.none() | st.text(min_size=1),
    error=errors,
    reason=st.none() | st.text(),
    attempts=st.integers(min_value=0, max_value=1000),
    due=st.none() | finite_floats,
)


@given(records)
def test_a_record_round_trips_through_json(record: Record) -> None:
    text = record.to_json()
    assert Record.from_json(text) == record
    assert loads(text)["key"] == record.key  # plain JSON, readable by anything


@given(records, json_values)
def test_a_spliced_payload_decodes_as_the_records_value(record: Record, payload: Any) -> None:
    without_value = attrs.evolve(record, value=None)
    text = without_value.splice_prefix() + dumps(payload) + "}"
    assert Record.from_json(text) == attrs.evolve(record, value=payload)


@given(st.lists(records, max_size=8))
def test_a_journal_indexes_records_by_key_and_position(items: list[Record]) -> None:
    raw = {r.key: r.to_json() for r in items}
    journal = Journal.from_raw(raw)
    assert set(journal.by_key) == set(raw)
    for key, rec in journal.by_key.items():
        assert journal.by_pos[rec.pos].pos == rec.pos
        assert Record.from_json(raw[key]) == rec
    assert journal.last_pos == max((r.pos for r in journal.by_key.values()), default=-1)


def test_records_carry_the_format_version() -> None:
    rec = Record("a#1", 0, Kind.STEP, State.OK, value=1)
    assert rec.v == FORMAT_VERSION == 2
    assert Record.from_json(rec.to_json()).v == 2


# -- values ------------------------------------------------------------------------


class Size(enum.Enum):
    SMALL = "s"
    LARGE = "l"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@attrs.frozen
class Item:
    sku: str
    price: Decimal
    size: Size


@dataclasses.dataclass(frozen=True)
class Shipment:
    shipment_id: uuid.UUID
    items: list[Item]
    at: dt.datetime
    note: str | None = None


decimals = st.decimals(allow_nan=False, allow_infinity=False)
aware_datetimes = st.datetimes(timezones=st.just(dt.UTC))
items = st.builds(Item, sku=st.text(), price=decimals, size=st.sampled_from(Size))
shipments = st.builds(
    Shipment,
    shipment_id=st.uuids(),
    items=st.lists(items, max_size=3),
    at=aware_datetimes,
    note=st.none() | st.text(),
)

# (strategy, declared type) pairs for annotated round trips
TYPED: list[tuple[st.SearchStrategy[Any], Any]] = [
    (json_values, Any),
    (int64s, int),
    (finite_floats, float),
    (st.text(), str),
    (decimals, Decimal),
    (st.uuids(), uuid.UUID),
    (aware_datetimes, dt.datetime),
    (st.datetimes(), dt.datetime),
    (st.dates(), dt.date),
    (st.times(), dt.time),
    (st.timedeltas(), dt.timedelta),
    (st.sampled_from(Size), Size),
    (st.sampled_from(Level), Level),
    (items, Item),
    (shipments, Shipment),
    (st.lists(items, max_size=3), list[Item]),
    (st.dictionaries(st.text(), shipments, max_size=2), dict[str, Shipment]),
    (st.tuples(int64s, st.text()), tuple[int, str]),
    (st.frozensets(int64s, max_size=4), frozenset[int]),
    (st.none() | items, Item | None),
]


@pytest.mark.parametrize(
    ("strategy", "declared"), TYPED, ids=[getattr(t, "__name__", str(t)) for _, t in TYPED]
)
def test_a_value_round_trips_through_its_declared_type(
    strategy: st.SearchStrategy[Any], declared: Any
) -> None:
    @given(strategy)
    def check(value: Any) -> None:
        data, tpath = encode_value(value, declared, "test value")
        assert tpath is None
        back = decode_value(loads(dumps(data)), declared, None, "test value")
        assert back == value
        assert type(back) is type(value)

    check()


UNANNOTATED: list[st.SearchStrategy[Any]] = [
    json_values,
    items,
    shipments,
    decimals,
    st.uuids(),
    aware_datetimes,
    st.dates(),
    st.timedeltas(),
    st.sampled_from(Size),
    st.tuples(int64s, st.text(), st.booleans()),
    st.sets(int64s, max_size=4),
]


@pytest.mark.parametrize("strategy", UNANNOTATED, ids=lambda s: repr(s)[:30])
def test_an_unannotated_value_round_trips_through_its_recorded_type(
    strategy: st.SearchStrategy[Any],
) -> None:
    @given(strategy)
    def check(value: Any) -> None:
        data, tpath = encode_value(value, None, "test value")
        back = decode_value(loads(dumps(data)), None, tpath, "test value")
        assert back == value
        assert type(back) is type(value)

    check()


@pytest.mark.parametrize(
    "value",
    [
        dt.timedelta.max,
        dt.timedelta.min,
        dt.timedelta(days=99421, microseconds=1),  # a float of seconds loses the microsecond
        dt.timedelta(seconds=1.5),
    ],
    ids=str,
)
def test_a_timedelta_round_trips_exactly(value: dt.timedelta) -> None:
    data, _ = encode_value(value, dt.timedelta, "test value")
    assert decode_value(loads(dumps(data)), dt.timedelta, None, "test value") == value


@pytest.mark.parametrize("declared", [dict[str, object], list[object], dict[str, list[object]]])
def test_object_inside_an_annotation_takes_any_json_value(declared: Any) -> None:
    @given(json_values)
    def check(value: Any) -> None:
        shaped = (
            {"v": value}
            if declared == dict[str, object]
            else [value]
            if declared == list[object]
            else {"v": [value]}
        )
        data, tpath = encode_value(shaped, declared, "test value")
        assert tpath is None
        assert decode_value(loads(dumps(data)), declared, None, "test value") == shaped

    check()


@pytest.mark.parametrize(
    ("value", "declared"),
    [
        ({"at": dt.datetime(2030, 1, 1, tzinfo=dt.UTC)}, dict[str, object]),
        ({"at": dt.datetime(2030, 1, 1, tzinfo=dt.UTC)}, dict[str, Any]),  # would be a str
        ([(1, 2)], list[Any]),  # the tuple would come back a list
        ((1, 2), list[int]),
    ],
    ids=["datetime-in-object", "datetime-in-any", "tuple-in-any", "tuple-as-list"],
)
def test_a_value_that_would_come_back_changed_is_refused(value: Any, declared: Any) -> None:
    with pytest.raises(SerializationError, match="summary#1"):
        encode_value(value, declared, "result of step 'summary#1'")


@step
async def loose_step() -> dict[str, object]:
    return {"a": 1, "b": [1, "two", None]}


@flow(name="tests.serde.loose")
async def loose_flow() -> dict[str, object]:
    return {"step": await loose_step(), "n": 3}


async def test_a_flow_and_step_annotated_with_object_inside_complete() -> None:
    async with FlowTestEnv() as env:
        handle = await env.start(loose_flow)
        await env.run_until_idle()
        assert await handle.result() == {"step": {"a": 1, "b": [1, "two", None]}, "n": 3}


def test_an_unstorable_value_names_what_was_being_stored() -> None:
    what = "result of step 'lookup#3'"
    for value in (object(), [1, object()], {"k": object()}):
        with pytest.raises(SerializationError, match="lookup#3"):
            encode_value(value, None, what)
    with pytest.raises(SerializationError, match="lookup#3"):
        encode_value(object(), Item, what)


def test_a_stored_value_that_does_not_fit_its_type_is_a_serialization_error() -> None:
    with pytest.raises(SerializationError, match="price") as info:
        decode_value({"sku": "x"}, Item, None, "result of step 'price#1'")
    # cattrs' detail is kept: which fields are at fault, and the cattrs error itself
    assert "required field missing @ $.price" in str(info.value)
    assert "required field missing @ $.size" in str(info.value)
    assert info.value.__cause__ is not None


# -- exceptions ------------------------------------------------------------------------


class NeedsTwo(Exception):
    def __init__(self, a: str, b: int) -> None:
        super().__init__(f"{a}/{b}")


@given(st.text())
def test_a_recorded_builtin_exception_rebuilds_with_type_and_message(message: str) -> None:
    for exc in (ValueError(message), KeyError(message), RuntimeError(message)):
        back = rebuild_exception(loads(dumps(encode_exception(exc))), "s#1")
        assert type(back) is type(exc)
        assert str(back) == str(exc)


@given(st.text(), st.integers())
def test_a_recorded_custom_exception_rebuilds_with_type_and_message(a: str, b: int) -> None:
    exc = NeedsTwo(a, b)
    back = rebuild_exception(loads(dumps(encode_exception(exc))), "s#1")
    assert type(back) is NeedsTwo
    assert str(back) == str(exc)


def test_an_exception_type_that_cannot_be_imported_becomes_step_error() -> None:
    data = {"type": "gone_module:Vanished", "message": "it was here"}
    back = rebuild_exception(data, "s#2")
    assert isinstance(back, StepError)
    assert (back.type_name, back.message, back.step_key) == (
        "gone_module:Vanished",
        "it was here",
        "s#2",
    )


@pytest.mark.parametrize("ensure_ascii", [False, True])
@pytest.mark.parametrize("sort_keys", [False, True])
def test_the_acyclic_encoder_writes_what_json_writes(sort_keys: bool, ensure_ascii: bool) -> None:
    reference = json.JSONEncoder(
        separators=(",", ":"), sort_keys=sort_keys, ensure_ascii=ensure_ascii, default=repr
    )
    encode = acyclic_encoder(sort_keys=sort_keys, ensure_ascii=ensure_ascii, default=repr)
    samples: list[Any] = [
        {"z": 1, "é": "ü\u2028", "n": None, "f": 1.5, "big": 10**30, "t": True, "o": object},
        ["x", {"b": [1, 2.0, -0.0, 1e16]}, float("nan"), float("inf")],
        "plain", 3, None, {},
    ]  # fmt: skip
    for value in samples:
        assert encode(value) == reference.encode(value)


def test_the_acyclic_encoder_still_refuses_a_cycle() -> None:
    looped: list[Any] = []
    looped.append(looped)
    with pytest.raises(ValueError, match="Circular reference"):
        acyclic_encoder()(looped)
