"""Orders: a fan-out to child flows, and a payment webhook routed by order id.

An order reserves each of its lines in a child flow of its own (they run side
by side, on any worker), then waits for the payment provider's webhook for
this order: ``wait_for_event("payment.succeeded", match={"order_id": ...})``.
The webhook handler does not know which run handles the order:
`Client.send_event` routes the event by the order id in its data, and the
provider's delivery id (the ``event_id``) makes a retried webhook count once.
Paid: ship. A line out of stock, no payment before the deadline, or the order
canceled while it waits: every reservation made is released (compensation
steps, journaled like any step), and the order says why.

Serve it and place an order (``--pay`` sends the webhook)::

    steadyflow worker examples.orders
    python -m examples.orders --order A-7 --items apple:2,pear:1 --pay
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

import attrs

from sdk import Client, RetryPolicy, RunStatus, current_step, flow, run_child, step, wait_for_event
from sdk.errors import ChildFailed, WaitTimeout
from stores import open_store


@attrs.frozen
class Line:
    sku: str
    qty: int


@attrs.frozen
class Reservation:
    sku: str
    qty: int
    hold_id: str


@attrs.frozen
class OrderOutcome:
    """What the order flow returns; rebuilt as an `OrderOutcome` by `RunHandle.result()`."""

    order_id: str
    status: str  # "shipped" | "rejected" | "payment_timed_out" | "canceled"
    reserved: list[str]  # the hold ids taken (released unless shipped)
    tracking: str | None = None
    note: str | None = None


class OutOfStock(Exception):
    """Final: retrying cannot make stock appear."""


class Warehouse:
    """An inventory that dedupes by the caller's idempotency key, as a real one
    would: a step re-run after a crash does not hold or release twice."""

    def __init__(self, stock: dict[str, int]) -> None:
        self.reset(stock)

    def reset(self, stock: dict[str, int]) -> None:
        self.stock = dict(stock)
        self.holds: dict[str, Reservation] = {}  # idempotency key -> the hold it made
        self.released: list[str] = []
        self.shipped: list[str] = []

    def reserve(self, key: str, line: Line) -> Reservation:
        if key in self.holds:
            return self.holds[key]
        if self.stock.get(line.sku, 0) < line.qty:
            raise OutOfStock(f"{line.sku}: {self.stock.get(line.sku, 0)} left, {line.qty} asked")
        self.stock[line.sku] -= line.qty
        hold = self.holds[key] = Reservation(line.sku, line.qty, f"hold-{len(self.holds) + 1}")
        return hold

    def release(self, hold: Reservation) -> None:
        if hold.hold_id not in self.released:
            self.released.append(hold.hold_id)
            self.stock[hold.sku] += hold.qty

    def ship(self, order_id: str) -> str:
        if order_id not in self.shipped:
            self.shipped.append(order_id)
        return f"TRACK-{order_id}"


#: The warehouse this worker process talks to.
warehouse = Warehouse({"apple": 10, "pear": 5, "plum": 0})


@step(retry=RetryPolicy(max_attempts=3, initial_interval=1.0, non_retryable=(OutOfStock,)))
async def reserve(line: Line) -> Reservation:
    return warehouse.reserve(current_step().idempotency_key, line)


@flow(name="examples.orders.reserve_line")
async def reserve_line(line: Line) -> Reservation:
    """One line's reservation: a child flow of the order (its own run, any worker)."""
    return await reserve(line)


@step
async def release(hold: Reservation) -> None:
    warehouse.release(hold)


@step
async def ship(order_id: str) -> str:
    return warehouse.ship(order_id)


async def release_all(holds: list[Reservation]) -> None:
    await asyncio.gather(*(release(h) for h in holds))


@flow(name="examples.orders.order")
async def order(order_id: str, lines: list[Line], payment_timeout: float = 3600.0) -> OrderOutcome:
    """Reserve every line (child flows, side by side), wait for the payment, ship.

    Args:
        order_id: the order; the payment webhook names it.
        lines: what is bought.
        payment_timeout: seconds the payment has before the order is released.
    """
    results = await asyncio.gather(
        *(run_child(reserve_line, line) for line in lines), return_exceptions=True
    )
    holds = [r for r in results if isinstance(r, Reservation)]
    taken = [h.hold_id for h in holds]
    for r in results:
        if isinstance(r, BaseException) and not isinstance(r, ChildFailed):
            raise r
    failed = [r for r in results if isinstance(r, ChildFailed)]
    if failed:
        await release_all(holds)
        return OrderOutcome(order_id, "rejected", taken, note=failed[0].error.message)
    try:
        paid = await wait_for_event(
            "payment.succeeded", match={"order_id": order_id}, timeout=payment_timeout
        )
    except WaitTimeout:
        await release_all(holds)
        return OrderOutcome(order_id, "payment_timed_out", taken, note="no payment in time")
    except asyncio.CancelledError:  # Client.cancel while waiting: give the stock back
        await release_all(holds)
        raise
    tracking = await ship(order_id)
    return OrderOutcome(order_id, "shipped", taken, tracking=tracking, note=f"paid {paid['cents']}")


async def on_payment_webhook(client: Client, body: dict[str, Any], delivery_id: str) -> list[str]:
    """The web handler's whole job: route the provider's event to the order waiting for it."""
    return await client.send_event("payment.succeeded", body, event_id=delivery_id)


def _lines(text: str) -> list[Line]:
    out = []
    for part in text.split(","):
        sku, _, qty = part.partition(":")
        out.append(Line(sku.strip(), int(qty or 1)))
    return out


async def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m examples.orders",
        description="Place an order, optionally pay it by webhook, print the outcome.",
    )
    p.add_argument("--store", default=None, help="store URL ($STEADYFLOW_STORE or local Redis)")
    p.add_argument("--prefix", default=None, help="key prefix ($STEADYFLOW_PREFIX or sf)")
    p.add_argument("--order", default="A-1")
    p.add_argument("--items", default="apple:2,pear:1", help="sku:qty,sku:qty")
    p.add_argument("--pay", action="store_true", help="send the payment webhook")
    p.add_argument("--payment-timeout", type=float, default=3600.0)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for each stage")
    args = p.parse_args(argv)

    store = open_store(args.store, prefix=args.prefix)
    try:
        client = Client(store)
        handle = await client.start(
            order, args.order, _lines(args.items), payment_timeout=args.payment_timeout,
            run_id=f"order-{args.order}",
        )  # fmt: skip
        loop = asyncio.get_running_loop()
        deadline = loop.time() + args.timeout
        while (status := await handle.status()) is not RunStatus.WAITING_FOR_SIGNAL:
            if status.is_terminal or loop.time() > deadline:
                break
            await asyncio.sleep(0.1)  # a CLI waiting for its moment; flows never poll
        if args.pay and status is RunStatus.WAITING_FOR_SIGNAL:
            body = {"order_id": args.order, "cents": 4200}
            while not await on_payment_webhook(client, body, f"pay-{args.order}"):
                if loop.time() > deadline:  # parked on its children, not the payment yet
                    break
                await asyncio.sleep(0.1)
        print(await handle.result(timeout=args.timeout))
        return 0
    except TimeoutError as exc:
        print(f"{exc}: is a worker running? steadyflow worker examples.orders", file=sys.stderr)
        return 1
    finally:
        await store.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
