"""A failure keeps its traceback: the step's frames in its journal record and in
the run's error, also when the failure is replayed from the journal."""

from __future__ import annotations

import logging

import pytest

from sdk import RetryPolicy, flow, sleep, step
from sdk._core._serde import MAX_TRACEBACK, encode_exception, rebuild_exception, traceback_text
from sdk.errors import RunFailed
from stores.redis import RedisStore
from testing import FlowTestEnv


def deep_inside(order: str) -> None:
    raise LookupError(f"no price for {order!r}")


@step(retry=RetryPolicy(max_attempts=1))
async def price(order: str) -> int:
    deep_inside(order)
    return 0


@flow(name="tests.tracebacks.quote")
async def quote(order: str) -> int:
    return await price(order)


async def test_a_failed_run_reports_the_steps_traceback(store: RedisStore) -> None:
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(quote, "A-1")
        await env.run_until_idle()
        with pytest.raises(RunFailed):
            await handle.result()
        error = (await env.client.get(handle.run_id)).error
        assert error is not None and error.step_key == "price#1"
        assert error.traceback is not None
        assert "in deep_inside" in error.traceback and "in price" in error.traceback
        assert error.traceback.rstrip().endswith("LookupError: no price for 'A-1'")
        recorded = (await env.client.export(handle.run_id))["journal"]
        assert "in deep_inside" in str(recorded)  # the step's record keeps it too


FLAKY_TRIES: list[int] = []


@step(retry=RetryPolicy(max_attempts=3, initial_interval=0.0))
async def always_down(order: str) -> int:
    FLAKY_TRIES.append(1)
    raise ConnectionError(f"gateway down for {order}\nsecond line of detail")


@flow(name="tests.tracebacks.charge")
async def charge(order: str) -> int:
    return await always_down(order)


async def test_a_failed_run_is_logged_once_at_warning_with_what_failed_and_where(
    store: RedisStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="steadyflow.worker")
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(charge, "C-3", run_id="charge-C-3")
        await env.run_until_idle()
        with pytest.raises(RunFailed):
            await handle.result()
        events = await env.client.events(handle.run_id)

    retries = [
        r for r in caplog.records if "charge-C-3" in r.getMessage() and "retrying" in r.getMessage()
    ]
    assert [r.levelno for r in retries] == [logging.INFO, logging.INFO]
    # (other test modules' flows may be warned about: their queues are undeclared)
    (failed,) = [r for r in caplog.records if "failed:" in r.getMessage()]
    assert failed.name == "steadyflow.worker"
    assert failed.levelno == logging.WARNING
    assert failed.getMessage() == (
        "run charge-C-3 of flow tests.tracebacks.charge failed: builtins:ConnectionError: "
        "gateway down for C-3 (step always_down#1, reason retries_exhausted)"
    )
    assert (failed.run_id, failed.step_key) == ("charge-C-3", "always_down#1")  # type: ignore[attr-defined]
    # what docs/operations.md says is recorded: the error with its traceback, in the
    # run's record and in its run.failed event
    (run_failed,) = [e for e in events if e.type == "run.failed"]
    assert "Traceback (most recent call last)" in run_failed.data["traceback"]
    assert run_failed.data["step_key"] == "always_down#1"


async def test_a_failure_replayed_from_the_journal_keeps_the_recorded_traceback() -> None:
    try:
        deep_inside("B-2")
    except LookupError as exc:
        data = encode_exception(exc)
    rebuilt = rebuild_exception(data, "price#1")
    assert type(rebuilt) is LookupError and rebuilt.__traceback__ is None
    assert traceback_text(rebuilt) == data["traceback"]
    assert "in deep_inside" in data["traceback"]


def test_a_long_traceback_keeps_its_end() -> None:
    try:
        raise ValueError("x" * 20_000)
    except ValueError as exc:
        text = traceback_text(exc)
    assert text is not None and len(text) <= MAX_TRACEBACK + 40
    assert text.startswith("... (") and text.endswith("x" * 100 + "\n")


def test_an_exception_never_raised_has_no_traceback() -> None:
    assert traceback_text(ValueError("x")) is None
    assert "traceback" not in encode_exception(ValueError("x"))


@flow(name="tests.tracebacks.slow_quote", timeout=60)
async def slow_quote(order: str) -> int:
    await sleep(3600)  # parked past its timeout: the store's pass fails it, no activation
    return 0


async def test_a_run_the_maintenance_pass_fails_is_logged_at_warning_too(
    store: RedisStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="steadyflow.worker")
    async with FlowTestEnv(store=store) as env:
        handle = await env.start(slow_quote, "Q-9", run_id="quote-Q-9")
        await env.run_until_idle()
        await env.advance(61)  # the run's deadline: failed with reason timed_out
        with pytest.raises(RunFailed, match="timeout"):
            await handle.result()
    (failed,) = [r for r in caplog.records if "quote-Q-9" in r.getMessage()]
    assert failed.levelno == logging.WARNING
    assert failed.getMessage() == (
        "run quote-Q-9 of flow tests.tracebacks.slow_quote failed: the run did not finish "
        "within its timeout (reason timed_out)"
    )
    assert (failed.run_id, failed.reason) == ("quote-Q-9", "timed_out")  # type: ignore[attr-defined]
