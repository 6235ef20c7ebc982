"""A flow for the schedule tests with real worker processes (tests/test_schedules_process.py).

Not decorated with ``@scheduled`` on purpose: the test process imports this
module too, and a decorated flow in the default registry would have every
`FlowTestEnv` of that process create its schedule.
"""

from __future__ import annotations

import os
from datetime import datetime

from sdk import flow, step


@step(name="tests.scheduleflows.mark")
async def mark(path: str, tick: str) -> None:
    # one line per execution, appended atomically (O_APPEND, one write)
    with open(path, "a", encoding="utf-8") as out:  # noqa: ASYNC230 (one small append)
        out.write(f"{os.getpid()} {tick}\n")


@flow(name="tests.scheduleflows.every_second")
async def every_second(tick: datetime, path: str) -> None:
    await mark(path, tick.isoformat())
