"""Write ``tests/golden_exports/*.json``: exports of the examples' runs, parked and finished.

    python -m tests.make_golden_exports

Each file is `Client.export` of one run of an example flow (examples/hello.py,
checkout.py, orders.py), stopped at a point a deployment would meet it:
parked on a retry backoff, on a human review, on a durable sleep, on a payment
event, or finished. tests/test_export_replay.py replays every file with the
current code (`testing.replay`): an engine or example change that would strand
such a run fails the build. Regenerate the files only on purpose (a change
the runs in flight are known to survive, e.g. behind `patched()`), and commit
them with the change; the journals of a new format go next to the old ones.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from examples import checkout as checkout_example
from examples.checkout import Order, checkout, gateway
from examples.hello import hello
from examples.orders import Line, on_payment_webhook, order, warehouse
from testing import FakeClock, FlowTestEnv

FOLDER = Path(__file__).resolve().parent / "golden_exports"
START = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)


async def _save(env: FlowTestEnv, run_id: str, name: str) -> None:
    exported = await env.client.export(run_id)
    exported["exported_at"] = START.isoformat()  # stable files: only what the runs did changes
    text = json.dumps(exported, indent=1, ensure_ascii=False, sort_keys=False) + "\n"
    (FOLDER / f"{name}.json").write_text(text, encoding="utf-8")
    print("wrote", FOLDER / f"{name}.json")


async def make() -> None:
    FOLDER.mkdir(exist_ok=True)
    gateway.reset(fail_first=1)
    checkout_example.shipped.clear()
    warehouse.reset({"apple": 10, "pear": 5, "plum": 0})
    async with FlowTestEnv(clock=FakeClock(START)) as env:
        await env.start(hello, "Ada", run_id="hello-finished")
        await env.run_until_idle()
        await _save(env, "hello-finished", "hello-finished")

        ada = Order("A-1", 4200, "ada@example.com")
        await env.start(checkout, ada, run_id="checkout-retrying")
        await env.run_until_idle()  # the gateway's first call failed: a 2 s backoff
        await _save(env, "checkout-retrying", "checkout-parked-on-retry")
        gateway.fail_first = 0  # the gateway is back
        await env.advance(2)  # authorized: waits for the fraud review
        await _save(env, "checkout-retrying", "checkout-parked-on-review")
        await env.client.approve("checkout-retrying", "fraud-review", actor="alice")
        await env.run_until_idle()  # captured: sleeps out the batching window
        await _save(env, "checkout-retrying", "checkout-parked-on-sleep")
        await env.advance(3600)
        await _save(env, "checkout-retrying", "checkout-shipped")

        bob = Order("B-2", 990, "bob@example.com")
        await env.start(checkout, bob, run_id="checkout-denied")
        await env.run_until_idle()
        await env.advance(2)
        await env.client.deny("checkout-denied", "fraud-review", actor="carol", reason="stolen")
        await env.run_until_idle()
        await _save(env, "checkout-denied", "checkout-released")

        lines = [Line("apple", 2), Line("pear", 1)]
        await env.start(order, "O-7", lines, run_id="order-O-7")
        await env.run_until_idle()  # reserved in child flows: waits for the payment
        await _save(env, "order-O-7", "orders-parked-on-payment")
        await on_payment_webhook(env.client, {"order_id": "O-7", "cents": 4200}, "dlv-1")
        await env.run_until_idle()
        await _save(env, "order-O-7", "orders-shipped")


def main() -> Any:
    asyncio.run(make())


if __name__ == "__main__":
    main()
