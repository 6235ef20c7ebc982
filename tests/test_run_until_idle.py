"""`run_until_idle` returns only when nothing is ready, also with an outbox channel."""

from __future__ import annotations

from sdk import Intent, channel, flow
from testing import FlowTestEnv

ORDER: list[str] = []


@channel("tests.idle.mail")
async def deliver(intent: Intent) -> None:
    pass


@flow(name="tests.idle.ordered")
async def ordered(label: str) -> None:
    ORDER.append(label)


async def test_every_ready_run_runs_with_one_slot_while_a_channel_is_served() -> None:
    # The dispatcher's poll awaits Redis between the run claim and the idle
    # check: the one in-flight run used to finish in between, and
    # run_until_idle returned with runs still queued (its claim had no slot).
    ORDER.clear()
    async with FlowTestEnv(concurrency=1) as env:
        for label in "abcdefg":
            await env.start(ordered, label)
        await env.run_until_idle()
    assert ORDER == ["a", "b", "c", "d", "e", "f", "g"]
