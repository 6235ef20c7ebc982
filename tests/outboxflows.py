"""A flow and a channel handler served by real ``python -m sdk.worker tests.outboxflows``
processes, for the outbox crash test.

The handler appends a *delivery line* (idempotency key, pid, delivery number)
to the markers file named in the intent's payload, then stays in flight until
the payload's *release* file exists, so a test can kill its worker between the
commit of the intents and their "sent" mark. The test process does not import
this module (it starts the flow by name, and reads the lines itself): its
channel is registered only in the worker processes.
"""

from __future__ import annotations

import asyncio
import os

from sdk import Intent, RetryPolicy, channel, emit, flow, step

CHANNEL = "tests.outbox.crash-mail"


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:  # one short append per line
        f.write(line)


def _released(path: str) -> bool:
    return os.path.exists(path)


@channel(CHANNEL, retry=RetryPolicy(max_attempts=3, initial_interval=0.1))
async def deliver(intent: Intent) -> None:
    payload = intent.payload
    _append(payload["markers"], f"{intent.idempotency_key} {os.getpid()} {intent.attempt}\n")
    # Another process releases it, through a file: there is no event to await.
    while not _released(payload["release"]):  # noqa: ASYNC110
        await asyncio.sleep(0.01)


@step(name="tests.outbox.announce")
async def announce(markers: str, release: str, count: int) -> int:
    for n in range(count):
        emit(CHANNEL, {"markers": markers, "release": release, "n": n})
    return count


@flow(name="tests.outboxflows.notify")
async def notify(markers: str, release: str, count: int) -> int:
    return await announce(markers, release, count)
