"""A scheduled campaign fans out to 1,000 recipients: a tick fired twice (two
workers at once, then a replay of the tick) still sends each recipient one message."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from sdk import Registry, Worker, current_run, flow, start_child, step
from sdk.store import ScheduleFire, TickKind
from sdk.worker._ticker import Ticker
from stores.redis import RedisStore
from testing import FakeClock, FlowTestEnv

# At scale (2,000 runs, seconds of a core per store): CI's (--all) alone.
pytestmark = pytest.mark.long

REG = Registry()
SENT: Counter[str] = Counter()
RECIPIENTS = [f"user-{i:04d}" for i in range(1000)]


@pytest.fixture(autouse=True, name="_reset")
def reset_fixture() -> None:
    SENT.clear()


@step(name="tests.schedules_fanout.deliver")
async def deliver(recipient: str, campaign: str) -> None:
    SENT[recipient] += 1


@flow(name="tests.schedules_fanout.send_one", registry=REG)
async def send_one(recipient: str, campaign: str) -> None:
    await deliver(recipient, campaign)


@flow(name="tests.schedules_fanout.campaign", registry=REG)
async def campaign(tick: datetime) -> int:
    name = f"newsletter-{tick.date().isoformat()}"
    # one child per recipient, its id derived from the campaign and the recipient:
    # however often this runs, a recipient's child is started once
    handles = await asyncio.gather(*(
        start_child(send_one, r, name, run_id=f"{name}:{r}") for r in RECIPIENTS
    ))  # fmt: skip
    assert current_run().run_id.startswith("campaign@")
    return len(handles)


async def test_a_tick_fired_twice_sends_each_recipient_one_message(store: RedisStore) -> None:
    start = datetime(2026, 2, 2, 8, 30, tzinfo=UTC)
    async with FlowTestEnv(FakeClock(start), store=store, registry=REG, concurrency=64) as env:
        await env.client.create_schedule("campaign", campaign, cron="0 9 * * *")
        other = Worker(store, registry=REG, clock=env.clock, concurrency=64, name="second")
        env.clock.advance(timedelta(hours=1))
        # two workers fire the same tick at once
        await asyncio.gather(env.worker.run_until_idle(), other.run_until_idle())
        (run,) = await env.client.list_runs(flow="tests.schedules_fanout.campaign")
        assert run.run_id == "campaign@2026-02-02T09:00:00+00:00"
        assert await env.client.handle(run.run_id).result() == 1000

        # a replay of the tick: fired again at the schedule's current version
        ticker = Ticker(store, env.clock, env.worker.engine.serializer, REG.find_flow)
        (sched,) = await store.schedules(["campaign"])
        fd = REG.find_flow("tests.schedules_fanout.campaign")
        assert fd is not None
        tick = datetime(2026, 2, 2, 9, tzinfo=UTC).timestamp()
        again = ticker._start(sched, fd, ticker._cron(sched.cron, sched.tz), TickKind.TICK,
                              tick, env.clock.time())  # fmt: skip
        fired = await store.fire_schedules(
            [ScheduleFire("campaign", sched.version, env.clock.time(), (again,))]
        )
        assert fired == [[run.run_id]]  # accepted, but the tick's run already exists
        await env.run_until_idle()

        assert len(SENT) == 1000
        assert set(SENT.values()) == {1}
        kids = await env.client.list_runs(parent_run_id=run.run_id, limit=2000)
        assert len(kids) == 1000
