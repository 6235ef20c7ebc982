"""The flow `bench.api_load` starts (`steadyflow serve` imports this module)."""

from __future__ import annotations

from sdk import flow


@flow(name="bench.api.noop")
async def noop(n: int) -> int:
    return n
