"""A worker killed between the commit of intents and their "sent" mark loses none.

A real ``python -m sdk.worker tests.outboxflows`` process delivers two intents
whose handler blocks; it is SIGKILLed while both are in flight (committed with
their step, not yet marked sent). A second worker delivers both again once the
leases end, with the same idempotency keys: at least once, never lost. A
graceful stop (SIGTERM) hands deliveries in flight back at once instead.
"""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import attrs
import pytest

from sdk import Client, IntentStatus, RunStatus
from tests.crashflows import Workers, until

pytestmark = [pytest.mark.redis, pytest.mark.slow]

STARTUP = 15.0  # a worker process imports, runs the flow and starts delivering within this
REDELIVER = 20.0  # lease expiry (1 s) + the next claim, with room for a loaded machine
MODULE = "tests.outboxflows"  # not imported here: its channel lives in the workers only
FLOW = "tests.outboxflows.notify"


@attrs.frozen
class Delivery:
    """One call of the handler, as its line in the markers file recorded it."""

    key: str
    pid: int
    attempt: int


def deliveries(markers: Path) -> list[Delivery]:
    if not markers.exists():
        return []
    out = []
    for line in markers.read_text(encoding="utf-8").splitlines():
        key, pid, attempt = line.split(" ")
        out.append(Delivery(key, int(pid), int(attempt)))
    return out


async def test_sigkill_between_commit_and_send_redelivers_every_intent_with_its_key(
    workers: Workers, client: Client, tmp_path: Path
) -> None:
    markers, release = tmp_path / "deliveries", tmp_path / "release"
    first = workers.spawn(module=MODULE)
    run_id = f"outbox-{uuid.uuid4().hex[:8]}"
    handle = await client.start(FLOW, str(markers), str(release), 2, run_id=run_id)

    assert await handle.result(timeout=STARTUP) == 2  # the step and its intents are committed
    await until(lambda: len(deliveries(markers)) == 2, STARTUP, "both deliveries", first)
    assert {i.status for i in await client.intents(run_id)} == {IntentStatus.PENDING}
    first.kill()  # both handlers are in flight: neither intent is marked sent
    release.touch()
    second = workers.spawn(module=MODULE)

    async def all_sent() -> bool:
        return {i.status for i in await client.intents(run_id)} == {IntentStatus.SENT}

    await until(all_sent, REDELIVER, "both intents to be sent again", second)
    expected = {f"{run_id}:tests.outbox.announce#1:1", f"{run_id}:tests.outbox.announce#1:2"}
    seen = deliveries(markers)
    assert len(seen) == 4
    for key in expected:
        mine = [d for d in seen if d.key == key]
        assert [(d.pid, d.attempt) for d in mine] == [(first.pid, 1), (second.pid, 2)]
    assert {d.key for d in seen} == expected
    intents = await client.intents(run_id)
    assert [(i.attempt, i.failures) for i in intents] == [(2, 0), (2, 0)]
    assert (await client.get(run_id)).status is RunStatus.COMPLETED


async def test_sigterm_hands_deliveries_in_flight_back_at_once(
    workers: Workers, client: Client, tmp_path: Path
) -> None:
    markers, release = tmp_path / "deliveries", tmp_path / "release"
    # A 30 s lease: only a hand-back (not a lease expiry) lets the next worker deliver in time.
    first = workers.spawn("--lease-ttl", "30", "--grace", "0.2", module=MODULE)
    run_id = f"outbox-{uuid.uuid4().hex[:8]}"
    await client.start(FLOW, str(markers), str(release), 2, run_id=run_id)
    await until(lambda: len(deliveries(markers)) == 2, STARTUP, "both deliveries", first)

    first.send(signal.SIGTERM)
    assert await first.exited(STARTUP) == 0
    assert "handed 2 unfinished delivery(ies) back to the outbox" in first.log()
    release.touch()
    second = workers.spawn("--lease-ttl", "30", module=MODULE)

    async def all_sent() -> bool:
        return {i.status for i in await client.intents(run_id)} == {IntentStatus.SENT}

    await until(all_sent, REDELIVER, "both intents to be sent by the next worker", second)
    assert sorted((d.pid, d.attempt) for d in deliveries(markers)) == [
        (first.pid, 1), (first.pid, 1), (second.pid, 2), (second.pid, 2),
    ]  # fmt: skip
