"""The outbox: intents a step emits are stored with its result and delivered at least once.

An intent exists exactly when the step that emitted it is recorded (a failed
or crashed attempt's intents are dropped, a replayed step emits nothing). A
worker delivers it to its channel's handler with a stable idempotency key,
retries failures with backoff on the injected clock, gives up (``dead``) after
the channel's ``max_attempts``, and never delivers the intents of a canceled run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from sdk import (
    Intent,
    IntentStatus,
    Registry,
    RetryPolicy,
    RunStatus,
    Worker,
    channel,
    emit,
    flow,
    sleep,
    step,
    wait_for,
)
from sdk.errors import NotInRunError, RunFailed, RunNotFound, SerializationError
from testing import FlowTestEnv

LEASE = 30.0


class Flaky(Exception):
    pass


class Permanent(Exception):
    pass


@pytest.fixture(autouse=True)
def own_channel_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Each test registers its own handlers (in a default registry of its own that
    # knows the process's flows); none leaks into other tests' workers.
    fresh = Registry()
    for fd in Registry.default().flows().values():
        fresh.add_flow(fd)
    monkeypatch.setattr(Registry, "_default", fresh)
    yield


class Inbox:
    """A channel handler that records deliveries, optionally failing the first ones."""

    def __init__(self, fail: list[Exception] | None = None) -> None:
        self.deliveries: list[Intent] = []
        self.fail = list(fail or [])

    async def __call__(self, intent: Intent) -> None:
        self.deliveries.append(intent)
        if self.fail:
            raise self.fail.pop(0)

    @property
    def keys(self) -> list[str]:
        return [i.idempotency_key for i in self.deliveries]


def handler_for(name: str, inbox: Inbox, retry: RetryPolicy | None = None) -> Any:
    async def handle(intent: Intent) -> None:
        await inbox(intent)

    return channel(name, retry=retry)(handle)


# -- flows ---------------------------------------------------------------------------------


@step(name="outbox.confirm")
async def confirm(order: str) -> str:
    emit("email", {"to": f"{order}@example.com", "template": "confirmed"})
    emit("sms", order, key=f"sms-{order}")
    return order


@flow(name="tests.outbox.checkout")
async def checkout(order: str) -> str:
    return await confirm(order)


@step(name="outbox.notify_then_fail", retry=RetryPolicy(max_attempts=2, initial_interval=5.0))
async def notify_then_fail(attempts: list[int]) -> str:
    emit("email", {"attempt": len(attempts) + 1})
    attempts.append(1)
    if len(attempts) == 1:
        raise Flaky("first attempt fails after emitting")
    return "second"


_ATTEMPTS: list[int] = []


@flow(name="tests.outbox.retried_step")
async def retried_step() -> str:
    return await notify_then_fail(_ATTEMPTS)


@step(name="outbox.emit_and_fail")
async def emit_and_fail() -> None:
    emit("email", "never")
    raise Permanent("no")


@flow(name="tests.outbox.failing_step")
async def failing_step() -> None:
    await emit_and_fail()


@flow(name="tests.outbox.then_wait")
async def then_wait(order: str) -> Any:
    await confirm(order)
    return await wait_for("go")


@flow(name="tests.outbox.two_at_once")
async def two_at_once() -> list[str]:
    return list(await asyncio.gather(confirm("a"), confirm("b")))


@flow(name="tests.outbox.ephemeral", delete_on_success=True)
async def ephemeral(order: str) -> str:
    return await confirm(order)


@flow(name="tests.outbox.emit_in_body")
async def emit_in_body() -> None:
    emit("email", "from the flow body")


@step(name="outbox.emit_twice_with_one_key")
async def emit_twice_with_one_key() -> None:
    emit("email", 1, key="same")
    emit("email", 2, key="same")


@flow(name="tests.outbox.duplicate_key")
async def duplicate_key() -> None:
    await emit_twice_with_one_key()


@step(name="outbox.emit_unserializable")
async def emit_unserializable() -> None:
    emit("email", object())


@flow(name="tests.outbox.unserializable")
async def unserializable() -> None:
    await emit_unserializable()


# -- recorded with the step, delivered with its key ----------------------------------------


async def test_an_intent_is_stored_with_its_step_and_delivered_with_its_key() -> None:
    email, sms = Inbox(), Inbox()
    handlers = [handler_for("email", email), handler_for("sms", sms)]
    async with FlowTestEnv(channels=handlers) as env:
        handle = await env.start(checkout, "o-1", run_id="run-1")
        await env.run_until_idle()

        assert await handle.result() == "o-1"
        (mail,) = email.deliveries
        assert mail.idempotency_key == "run-1:outbox.confirm#1:1"
        assert mail.payload == {"to": "o-1@example.com", "template": "confirmed"}
        assert (mail.run_id, mail.channel, mail.step_key, mail.attempt) == (
            "run-1", "email", "outbox.confirm#1", 1,
        )  # fmt: skip
        assert sms.keys == ["run-1:sms-o-1"]  # an explicit key: "{root run id}:{key}"
        assert sms.deliveries[0].payload == "o-1"

        stored = await env.client.intents("run-1")
        assert [(i.channel, i.status, i.attempt, i.failures) for i in stored] == [
            ("email", IntentStatus.SENT, 1, 0), ("sms", IntentStatus.SENT, 1, 0),
        ]  # fmt: skip
        assert [i.intent_id for i in stored] == [mail.intent_id, sms.deliveries[0].intent_id]
        types = [e.type for e in await env.client.events("run-1")]
        step_done = types.index("step.completed")
        assert types[step_done + 1 : step_done + 3] == ["side_effect.recorded"] * 2
        assert types.count("outbox.sent") == 2
        recorded = [e for e in await env.client.events("run-1") if e.type.startswith("side_")]
        assert recorded[0].step_key == "outbox.confirm#1"
        assert recorded[0].data == {
            "intent_id": mail.intent_id, "channel": "email",
            "idempotency_key": "run-1:outbox.confirm#1:1",
        }  # fmt: skip


async def test_concurrent_steps_each_record_their_own_intents() -> None:
    email, sms = Inbox(), Inbox()
    async with FlowTestEnv(channels=[handler_for("email", email), handler_for("sms", sms)]) as env:
        await env.start(two_at_once, run_id="g")
        await env.run_until_idle()

        assert sorted(email.keys) == ["g:outbox.confirm#1:1", "g:outbox.confirm#2:1"]
        assert sorted(i.payload["to"] for i in email.deliveries) == [
            "a@example.com", "b@example.com",
        ]  # fmt: skip
        assert sorted(sms.keys) == ["g:sms-a", "g:sms-b"]


async def test_a_failed_attempts_intents_are_dropped_and_the_recorded_attempts_kept() -> None:
    email = Inbox()
    _ATTEMPTS.clear()
    async with FlowTestEnv(channels=[handler_for("email", email)]) as env:
        handle = await env.start(retried_step, run_id="retried")
        await env.run_until_idle()
        assert email.deliveries == []  # the failed attempt's intent was never written
        await env.advance(5.0)

        assert await handle.result() == "second"
        assert [i.payload for i in email.deliveries] == [{"attempt": 2}]
        assert email.keys == ["retried:outbox.notify_then_fail#1:1"]
        assert len(await env.client.intents("retried")) == 1


async def test_a_step_that_fails_stores_no_intent() -> None:
    email = Inbox()
    async with FlowTestEnv(channels=[handler_for("email", email)]) as env:
        handle = await env.start(failing_step, run_id="failing")
        await env.run_until_idle()

        with pytest.raises(RunFailed):
            await handle.result()
        assert email.deliveries == []
        assert await env.client.intents("failing") == []
        assert "side_effect.recorded" not in [e.type for e in await env.client.events("failing")]


# -- retries, dead intents -----------------------------------------------------------------


async def test_a_failed_delivery_is_retried_with_backoff_on_the_injected_clock() -> None:
    email = Inbox(fail=[Flaky("smtp down"), Flaky("still down")])
    retry = RetryPolicy(max_attempts=5, initial_interval=10.0, backoff=2.0)
    async with FlowTestEnv(channels=[handler_for("email", email, retry), "sms"]) as env:
        await env.start(checkout, "o-2", run_id="flaky")
        t0 = env.clock.time()
        await env.run_until_idle()
        assert len(email.deliveries) == 1
        (pending,) = [i for i in await env.client.intents("flaky") if i.channel == "email"]
        assert (pending.status, pending.failures) == (IntentStatus.PENDING, 1)
        assert pending.last_error is not None
        assert (pending.last_error.type, pending.last_error.message) == (
            f"{__name__}:Flaky", "smtp down",
        )  # fmt: skip
        assert pending.next_attempt_at is not None
        assert pending.next_attempt_at.timestamp() == pytest.approx(t0 + 10.0)

        await env.advance(9.0)
        assert len(email.deliveries) == 1  # not due yet
        await env.advance(1.0)
        assert len(email.deliveries) == 2  # second failure: next in 20 s
        await env.advance(19.0)
        assert len(email.deliveries) == 2
        await env.advance(1.0)

        assert [i.attempt for i in email.deliveries] == [1, 2, 3]
        assert len(set(email.keys)) == 1  # the same idempotency key on every delivery
        (sent,) = [i for i in await env.client.intents("flaky") if i.channel == "email"]
        assert (sent.status, sent.failures, sent.attempt) == (IntentStatus.SENT, 2, 3)
        failed = [e for e in await env.client.events("flaky") if e.type == "outbox.failed"]
        assert [e.data["attempt"] for e in failed] == [1, 2]
        assert failed[0].data["error"] == {"type": f"{__name__}:Flaky", "message": "smtp down"}


async def test_an_intent_is_dead_after_the_channels_max_attempts() -> None:
    email = Inbox(fail=[Flaky("1"), Flaky("2"), Flaky("3")])
    retry = RetryPolicy(max_attempts=2, initial_interval=1.0)
    async with FlowTestEnv(channels=[handler_for("email", email, retry), "sms"]) as env:
        await env.start(checkout, "o-3", run_id="doomed")
        await env.run_until_idle()
        await env.advance(1.0)
        await env.advance(3600.0)

        assert len(email.deliveries) == 2
        (dead,) = [i for i in await env.client.intents("doomed") if i.channel == "email"]
        assert (dead.status, dead.failures, dead.next_attempt_at) == (IntentStatus.DEAD, 2, None)
        assert dead.last_error is not None
        assert (dead.last_error.message, dead.last_error.reason) == ("2", "retries_exhausted")
        (event,) = [e for e in await env.client.events("doomed") if e.type == "outbox.dead"]
        assert event.data["reason"] == "retries_exhausted"
        assert (await env.client.get("doomed")).status is RunStatus.COMPLETED  # the run is done


async def test_a_non_retryable_failure_kills_the_intent_at_once() -> None:
    email = Inbox(fail=[Permanent("address rejected")])
    retry = RetryPolicy(max_attempts=5, non_retryable=(Permanent,))
    async with FlowTestEnv(channels=[handler_for("email", email, retry), "sms"]) as env:
        await env.start(checkout, "o-4", run_id="rejected")
        await env.run_until_idle()
        await env.advance(3600.0)

        assert len(email.deliveries) == 1
        (dead,) = [i for i in await env.client.intents("rejected") if i.channel == "email"]
        assert dead.status is IntentStatus.DEAD
        assert dead.last_error is not None and dead.last_error.reason == "non_retryable"


# -- cancellation --------------------------------------------------------------------------


async def test_canceling_a_run_cancels_its_pending_intents_and_none_is_delivered() -> None:
    email, sms = Inbox(), Inbox()
    async with FlowTestEnv(channels=[]) as env:  # nothing delivers while the run waits
        await env.start(then_wait, "o-5", run_id="canceled")
        await env.run_until_idle()
        assert (await env.client.get("canceled")).status is RunStatus.WAITING_FOR_SIGNAL
        assert {i.status for i in await env.client.intents("canceled")} == {IntentStatus.PENDING}

        await env.client.cancel("canceled", reason="customer left", grace=0)
        worker = Worker(
            env.store, clock=env.clock, channels=[handler_for("email", email),
                                                  handler_for("sms", sms)],
        )  # fmt: skip
        await worker.run_until_idle()
        env.clock.advance(3600.0)
        await worker.run_until_idle()

        assert email.deliveries == sms.deliveries == []
        assert {i.status for i in await env.client.intents("canceled")} == {IntentStatus.CANCELED}
        types = [e.type for e in await env.client.events("canceled")]
        assert types.count("outbox.canceled") == 2
        assert types.index("run.canceled") < types.index("outbox.canceled")


async def test_resuming_a_canceled_run_delivers_its_canceled_intents() -> None:
    email = Inbox()
    async with FlowTestEnv(channels=[]) as env:
        await env.start(then_wait, "o-6", run_id="resumed")
        await env.run_until_idle()
        await env.client.cancel("resumed", reason="oops", grace=0)
        await env.client.resume("resumed")
        worker = Worker(env.store, clock=env.clock, channels=[handler_for("email", email), "sms"])
        await worker.run_until_idle()

        # the step is recorded and is not run again: its restored intent is sent
        assert email.keys == ["resumed:outbox.confirm#1:1"]
        (restored,) = [i for i in await env.client.intents("resumed") if i.channel == "email"]
        assert restored.status is IntentStatus.SENT
        assert "outbox.restored" in [e.type for e in await env.client.events("resumed")]


@step(name="outbox.apologize")
async def apologize(order: str) -> str:
    emit("email", {"to": f"{order}@example.com", "template": "sorry"})
    return order


@flow(name="tests.outbox.cleanup_emits")
async def cleanup_emits(order: str) -> Any:
    await confirm(order)
    try:
        return await wait_for("go")
    except asyncio.CancelledError:
        await apologize(order)  # the cleanup's step: its intent is the cleanup's
        await sleep(60)
        raise


async def test_resuming_a_canceled_run_drops_the_intents_of_its_discarded_cleanup() -> None:
    email = Inbox()
    async with FlowTestEnv(channels=[]) as env:  # nothing delivers before the resume
        await env.start(cleanup_emits, "o-7", run_id="cleaned")
        await env.run_until_idle()
        await env.client.cancel("cleaned", reason="customer left")
        await env.run_until_idle()  # the cleanup emits, then sleeps
        await env.client.cancel("cleaned", reason="now")  # forced: pending intents are canceled
        assert (await env.client.get("cleaned")).status is RunStatus.CANCELED
        statuses = {i.idempotency_key: i.status for i in await env.client.intents("cleaned")}
        assert set(statuses.values()) == {IntentStatus.CANCELED}
        assert "cleaned:outbox.apologize#1:1" in statuses

        await env.client.resume("cleaned")  # from before the cancel: the cleanup is discarded
        worker = Worker(env.store, clock=env.clock, channels=[handler_for("email", email), "sms"])
        await worker.run_until_idle()

        # the confirmation (recorded before the cancel) is sent; the apology is not
        assert email.keys == ["cleaned:outbox.confirm#1:1"]
        after = {i.idempotency_key: i.status for i in await env.client.intents("cleaned")}
        assert after["cleaned:outbox.apologize#1:1"] is IntentStatus.CANCELED
        assert (await env.client.get("cleaned")).status is RunStatus.WAITING_FOR_SIGNAL

        # canceled and resumed once more: the dropped intent stays canceled for good
        await env.client.cancel("cleaned", reason="again", grace=0)
        await env.client.resume("cleaned")
        await worker.run_until_idle()
        assert email.keys == ["cleaned:outbox.confirm#1:1"]


# -- replays and crashes -------------------------------------------------------------------


async def test_a_step_replayed_from_the_journal_does_not_emit_again() -> None:
    email, sms = Inbox(), Inbox()
    async with FlowTestEnv(channels=[handler_for("email", email), handler_for("sms", sms)]) as env:
        handle = await env.start(then_wait, "o-7", run_id="replayed")
        await env.run_until_idle()
        await env.client.signal("replayed", "go", "now")  # the next activation replays the step
        await env.run_until_idle()

        assert await handle.result() == "now"
        assert email.keys == ["replayed:outbox.confirm#1:1"]
        assert len(await env.client.intents("replayed")) == 2  # email + sms, once


async def test_a_replay_that_reuses_the_recorded_step_emits_nothing() -> None:
    email, sms = Inbox(), Inbox()
    async with FlowTestEnv(channels=[handler_for("email", email), handler_for("sms", sms)]) as env:
        await env.start(checkout, "o-8", run_id="source")
        await env.run_until_idle()
        copy = await env.client.replay("source", new_run_id="copy")
        await env.run_until_idle()

        assert await copy.result() == "o-8"
        assert await env.client.intents("copy") == []
        assert email.keys == ["source:outbox.confirm#1:1"]


async def test_a_step_re_executed_after_a_crash_records_its_intents_once() -> None:
    email, sms = Inbox(), Inbox()
    async with FlowTestEnv(
        lease_ttl=LEASE, channels=[handler_for("email", email), handler_for("sms", sms)]
    ) as env:
        env.crash_at("outbox.confirm#1", when="after")  # emitted, then died before recording
        handle = await env.start(checkout, "o-9", run_id="crashed")
        await env.run_until_idle()
        assert email.deliveries == [] and await env.client.intents("crashed") == []

        await env.advance(LEASE + 1)

        assert await handle.result() == "o-9"
        assert email.keys == ["crashed:outbox.confirm#1:1"]  # the same key the first try made
        assert len(await env.client.intents("crashed")) == 2


async def test_a_delivery_cut_off_before_it_settled_is_redelivered_after_its_lease() -> None:
    email = Inbox()
    async with FlowTestEnv(lease_ttl=LEASE, channels=[]) as env:
        await env.start(checkout, "o-10", run_id="unsettled")
        await env.run_until_idle()
        # A dispatcher claims the intent and dies before it settles it.
        claims, _ = await env.store.claim_intents(["email"], 10, env.clock.time(), LEASE)
        assert [c.delivery for c in claims] == [1]
        worker = Worker(
            env.store, clock=env.clock, lease_ttl=LEASE, channels=[handler_for("email", email)]
        )
        await worker.run_until_idle()
        assert email.deliveries == []  # still leased to the dead dispatcher

        env.clock.advance(LEASE)
        await worker.run_until_idle()

        (again,) = email.deliveries
        assert (again.attempt, again.idempotency_key) == (2, "unsettled:outbox.confirm#1:1")


async def test_an_intent_outlives_a_run_deleted_on_success_and_is_dropped_once_sent() -> None:
    email = Inbox()
    async with FlowTestEnv(channels=[]) as env:
        handle = await env.start(ephemeral, "o-11", run_id="ephemeral")
        await env.run_until_idle()
        assert await handle.result() == "o-11"
        with pytest.raises(RunNotFound):
            await env.client.intents("ephemeral")

        worker = Worker(env.store, clock=env.clock, channels=[handler_for("email", email), "sms"])
        await worker.run_until_idle()

        assert email.keys == ["ephemeral:outbox.confirm#1:1"]
        store: Any = env.store
        left = [k async for k in store.client.scan_iter(match=store.keys.pattern())]
        intent_keys = [k for k in left if ":ob:" in k]
        assert len(intent_keys) == 1  # the sms intent: no handler here, still pending


# -- misuse --------------------------------------------------------------------------------


async def test_emit_outside_a_step_raises_not_in_run() -> None:
    with pytest.raises(NotInRunError):
        emit("email", "hello")
    async with FlowTestEnv(channels=[]) as env:
        handle = await env.start(emit_in_body, run_id="body")
        await env.run_until_idle()
        with pytest.raises(RunFailed) as failed:
            await handle.result()
        assert failed.value.error.type == "sdk.errors:NotInRunError"


async def test_an_explicit_key_used_twice_in_one_step_fails_the_step() -> None:
    async with FlowTestEnv(channels=[]) as env:
        handle = await env.start(duplicate_key, run_id="dup")
        await env.run_until_idle()
        with pytest.raises(RunFailed) as failed:
            await handle.result()
        assert failed.value.error.type == "sdk.errors:InvalidArgument"
        assert await env.client.intents("dup") == []


async def test_an_unserializable_payload_fails_the_step_naming_the_intent() -> None:
    async with FlowTestEnv(channels=[]) as env:
        handle = await env.start(unserializable, run_id="bad")
        await env.run_until_idle()
        with pytest.raises(RunFailed) as failed:
            await handle.result()
        assert failed.value.error.type == f"{SerializationError.__module__}:SerializationError"
        assert "bad:outbox.emit_unserializable#1:1" in failed.value.error.message


def test_a_channel_handler_must_be_async() -> None:
    def sync_handler(intent: Intent) -> None: ...

    with pytest.raises(TypeError, match="async"):
        channel("email")(sync_handler)  # type: ignore[type-var]
