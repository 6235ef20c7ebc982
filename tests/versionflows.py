"""A flow for worker processes of a rolling deploy (tests/test_version_routing_processes.py).

The version it registers comes from ``STEADYFLOW_TEST_FLOW_VERSION``, so one
module plays the old and the new deployment. The flow reports which process
executed it, on which version; with ``STEADYFLOW_TEST_HOLD`` set, the step
holds its run executing (until its worker is killed).
"""

from __future__ import annotations

import asyncio
import os

from sdk import current_run, flow, step

NAME = "tests.versionflows.deployed"
VERSION = os.environ.get("STEADYFLOW_TEST_FLOW_VERSION") or None


@step
async def where() -> str:
    if os.environ.get("STEADYFLOW_TEST_HOLD"):
        await asyncio.sleep(60)  # a long step: its worker is killed inside it
    return f"{os.getpid()}"


async def deployed() -> str:
    pid = await where()
    return f"{current_run().flow_version}:{pid}:{os.getpid()}"


flow(name=NAME, version=VERSION)(deployed)
