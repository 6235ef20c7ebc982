"""Checkout: retries, a human approval with a timeout, a durable sleep, a cancel path.

The flow authorizes the payment through a flaky gateway (retried with backoff;
the gateway dedupes by `current_step().idempotency_key`, so a retry or a
re-execution after a crash never charges twice), then waits for a fraud
reviewer. Approved: capture, wait out the warehouse's batching window
(a durable sleep: the run holds no worker), ship. Denied or no answer before
the deadline: release the authorization.

`Client.cancel` gives the flow `asyncio.CancelledError` where it waits, with
a grace period to clean up in (see docs/composition.md, "Cancellation"); this
flow does no cleanup of its own there: its release step is on the deny path.

Serve it and start an order (approve or deny it on the command line)::

    steadyflow worker examples.checkout
    python -m examples.checkout --order A-1 --approve
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from datetime import timedelta

import attrs

from sdk import (
    Client,
    RetryPolicy,
    RunStatus,
    current_run,
    current_step,
    flow,
    sleep,
    step,
    wait_for,
)
from sdk.errors import WaitTimeout
from stores import open_store


@attrs.frozen
class Order:
    order_id: str
    cents: int
    email: str


@attrs.frozen
class Receipt:
    """What the flow returns; rebuilt as a `Receipt` by `RunHandle.result()`."""

    order_id: str
    status: str  # "shipped" | "released"
    authorization: str
    tracking: str | None = None
    note: str | None = None


class GatewayUnavailable(Exception):
    """A transient gateway failure: worth retrying."""


class CardDeclined(Exception):
    """A final answer: retrying cannot help."""


class FakeGateway:
    """A payment gateway that fails the first `fail_first` calls of each request.

    Requests are identified by the caller's idempotency key: a repeated key
    returns the first answer and has no second effect, which is what makes a
    step that re-runs (a retry, or a re-execution after a crash) safe.
    """

    def __init__(self, fail_first: int = 0) -> None:
        self.reset(fail_first)

    def reset(self, fail_first: int = 0) -> None:
        self.fail_first = fail_first
        self.calls: dict[str, int] = {}  # idempotency key -> calls seen
        self.authorizations: dict[str, str] = {}  # idempotency key -> authorization id
        self.captured: list[str] = []
        self.released: list[str] = []

    def _attempt(self, key: str) -> None:
        self.calls[key] = self.calls.get(key, 0) + 1
        if self.calls[key] <= self.fail_first:
            raise GatewayUnavailable(f"gateway busy (call {self.calls[key]} for {key})")

    async def authorize(self, key: str, cents: int) -> str:
        self._attempt(key)
        if cents <= 0:
            raise CardDeclined(f"invalid amount {cents}")
        if key not in self.authorizations:
            self.authorizations[key] = f"auth-{len(self.authorizations) + 1}"
        return self.authorizations[key]

    async def capture(self, key: str, authorization: str) -> None:
        self._attempt(key)
        if authorization not in self.captured:
            self.captured.append(authorization)

    async def release(self, key: str, authorization: str) -> None:
        self._attempt(key)
        if authorization not in self.released:
            self.released.append(authorization)


#: The gateway this process talks to. A transient failure of the first call of
#: each request shows the retries in `python -m examples.checkout`
#: (set CHECKOUT_GATEWAY_FAILURES for the worker to change it).
gateway = FakeGateway(fail_first=int(os.environ.get("CHECKOUT_GATEWAY_FAILURES", "1")))

#: Gateway calls: 5 attempts, 2s, 4s, 8s, 16s apart; a decline is final.
PAYMENTS = RetryPolicy(
    max_attempts=5, initial_interval=2.0, backoff=2.0, max_interval=30.0,
    non_retryable=(CardDeclined,),
)  # fmt: skip

shipped: list[str] = []  # order ids, in shipping order (what the warehouse saw)


@step(retry=PAYMENTS)
async def authorize_payment(order: Order) -> str:
    return await gateway.authorize(current_step().idempotency_key, order.cents)


@step(retry=PAYMENTS)
async def capture_payment(authorization: str) -> None:
    await gateway.capture(current_step().idempotency_key, authorization)


@step(retry=PAYMENTS)
async def release_payment(authorization: str) -> None:
    await gateway.release(current_step().idempotency_key, authorization)


@step
async def ship(order: Order) -> str:
    shipped.append(order.order_id)
    return f"TRACK-{order.order_id}"


@flow(name="examples.checkout")
async def checkout(
    order: Order, review_timeout: float = 2 * 86400, batch_window: float = 3600
) -> Receipt:
    """Authorize, get a fraud review, then capture and ship, or release.

    Args:
        order: what is bought.
        review_timeout: seconds the reviewer has before the order is released.
        batch_window: seconds between capture and shipping (the warehouse batches).
    """
    log = current_run().logger
    authorization = await authorize_payment(order)
    log.info("order %s authorized (%s); waiting for review", order.order_id, authorization)
    try:
        decision = await wait_for("fraud-review", human=True, timeout=review_timeout)
    except WaitTimeout:
        note = f"no review within {timedelta(seconds=review_timeout)}"
    else:
        if decision.approved:
            await capture_payment(authorization)
            await sleep(batch_window)  # durable: survives restarts, holds no worker
            tracking = await ship(order)
            return Receipt(order.order_id, "shipped", authorization, tracking=tracking)
        note = f"denied by {decision.actor}: {decision.reason}"
    await release_payment(authorization)
    log.info("order %s released: %s", order.order_id, note)
    return Receipt(order.order_id, "released", authorization, note=note)


async def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m examples.checkout",
        description="Start a checkout, review it from the command line, print the receipt.",
    )
    # Default None: open_store() reads $STEADYFLOW_STORE / $STEADYFLOW_PREFIX, as the worker does.
    p.add_argument("--store", default=None, help="store URL ($STEADYFLOW_STORE or local Redis)")
    p.add_argument("--prefix", default=None, help="key prefix ($STEADYFLOW_PREFIX or sf)")
    p.add_argument("--order", default="A-1")
    p.add_argument("--cents", type=int, default=4200)
    p.add_argument("--batch-window", type=float, default=2.0, help="seconds before shipping")
    verdict = p.add_mutually_exclusive_group()
    verdict.add_argument("--approve", action="store_true", help="approve the review (default)")
    verdict.add_argument("--deny", action="store_true", help="deny the review")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for each stage")
    args = p.parse_args(argv)

    store = open_store(args.store, prefix=args.prefix)
    try:
        client = Client(store)
        order = Order(args.order, args.cents, "buyer@example.com")
        handle = await client.start(
            checkout, order, batch_window=args.batch_window, run_id=f"checkout-{args.order}"
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + args.timeout
        while (status := await handle.status()) is not RunStatus.WAITING_FOR_HUMAN:
            if status.is_terminal or loop.time() > deadline:
                break
            await asyncio.sleep(0.1)  # a CLI polling for a human's moment; flows never poll
        if status is RunStatus.WAITING_FOR_HUMAN:
            decide = client.deny if args.deny else client.approve
            await decide(handle.run_id, "fraud-review", actor="cli", reason="from the command line")
        print(await handle.result(timeout=args.timeout))
        return 0
    except TimeoutError as exc:
        hint = "is a worker running? steadyflow worker examples.checkout"
        print(f"{exc}: {hint}", file=sys.stderr)
        return 1
    finally:
        await store.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
