"""The outbox dispatcher a worker runs: delivers due intents to their channel handlers.

Delivery is at least once: an intent is leased (its index score moves to the
lease expiry) before its handler is called, and settled after. A worker that
dies in between leaves the lease to run out; the intent is then delivered
again, with the same idempotency key and the next delivery number. Leases are
renewed by the worker's heartbeat while a handler runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sdk._core._clock import Clock
from sdk._core._serde import converter, dumps, exception_message, loads, type_path
from sdk._core._types import ErrorInfo
from sdk.model._channels import ChannelDef, Intent
from sdk.model._intercept import Abandon, Interceptor
from sdk.store import Delivery
from sdk.worker._quarantine import unavailable

if TYPE_CHECKING:
    from sdk.store import IntentClaim, Store

__all__ = ["Dispatcher"]

log = logging.getLogger("steadyflow.outbox")

_MAX_IDLE = 5.0  # longest a dispatcher blocks without claiming


def intent_of(claim: IntentClaim) -> Intent:
    body = loads(claim.body)
    return Intent(
        intent_id=claim.intent_id,
        run_id=claim.run_id,
        channel=body["channel"],
        payload=body["payload"],
        idempotency_key=body["idempotency_key"],
        attempt=claim.delivery,
        created_at=datetime.fromtimestamp(float(body["created_at"]), UTC),
        step_key=body["step_key"],
        failures=claim.failures,
    )


class Dispatcher:
    """Claims due intents of the channels a worker serves and calls their handlers."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        channels: Callable[[], dict[str, ChannelDef]],
        *,
        concurrency: int,
        lease_ttl: float,
    ) -> None:
        self.store = store
        self.clock = clock
        self.channels = channels
        self.concurrency = concurrency
        self.lease_ttl = lease_ttl
        self._sending: dict[asyncio.Task[None], IntentClaim] = {}
        self._freed = asyncio.Event()
        #: the last `poll` claimed every due intent (it had slots left over)
        self.drained = False
        #: called around each delivery (kind ``"deliver"``); an `Abandon` they raise
        #: drops the delivery as a dead worker would: its lease is left to run out
        self.interceptors: list[Interceptor] = []

    def tasks(self) -> list[asyncio.Task[None]]:
        return list(self._sending)

    async def poll(self) -> tuple[int, float | None]:
        """Claim what fits and start delivering it: one round trip per partition.

        Returns how many intents were claimed and when the next one is due.
        """
        served = self.channels()
        free = self.concurrency - len(self._sending)
        if not served or free <= 0:
            self.drained = not served
            return 0, None
        claims, next_due = await self.store.claim_intents(
            sorted(served), free, self.clock.time(), self.lease_ttl
        )
        self.drained = len(claims) < free
        for claim in claims:
            task = asyncio.create_task(self._deliver(claim, served))
            self._sending[task] = claim
            task.add_done_callback(self._done)
        return len(claims), next_due

    def _done(self, task: asyncio.Task[None]) -> None:
        self._sending.pop(task, None)
        self._freed.set()

    async def _deliver(self, claim: IntentClaim, served: dict[str, ChannelDef]) -> None:
        try:
            intent = intent_of(claim)
            cdef = served[intent.channel]
        except Exception:
            log.exception("intent %s: unreadable or unserved; left for its lease", claim.intent_id)
            return
        data = {"intent_id": claim.intent_id, "channel": intent.channel,
                "idempotency_key": intent.idempotency_key, "attempt": claim.delivery}  # fmt: skip
        if self.interceptors and not self._hooks(intent, finished=False):
            return
        try:
            await cdef.handler(intent)
        except asyncio.CancelledError:
            # worker shutdown: hand the intent back at once instead of at lease end
            with contextlib.suppress(Exception):
                await asyncio.shield(
                    self.store.settle_intent(claim, Delivery.RELEASE, self.clock.time())
                )
            raise
        except Exception as exc:
            await self._failed(claim, intent, cdef, exc, data)
            return
        if self.interceptors and not self._hooks(intent, finished=True):
            return
        try:
            settled = await self.store.settle_intent(
                claim, Delivery.SENT, self.clock.time(), event_data=dumps(data)
            )
        except Exception:
            log.exception(
                "intent %s (%s): delivered, but marking it sent failed; it will be "
                "delivered again after its lease (same idempotency key)",
                claim.intent_id, intent.idempotency_key,
            )  # fmt: skip
            return
        if not settled:
            log.info("intent %s: delivered, but it was canceled or settled meanwhile",
                     claim.intent_id)  # fmt: skip

    def _hooks(self, intent: Intent, *, finished: bool) -> bool:
        """The interceptors around a delivery; False: one abandoned it."""
        run_id, point = intent.run_id, f"~deliver:{intent.idempotency_key}"
        try:
            for hook in self.interceptors:
                if finished:
                    hook.call_finished(run_id, point, "deliver")
                else:
                    hook.call_started(run_id, point, "deliver")
        except Abandon:
            return False
        return True

    async def _failed(
        self, claim: IntentClaim, intent: Intent, cdef: ChannelDef, exc: Exception,
        data: dict[str, object],
    ) -> None:  # fmt: skip
        failures = claim.failures + 1
        verdict = cdef.retry.verdict(exc, failures, failures)
        now = self.clock.time()
        error = ErrorInfo(type_path(type(exc)), exception_message(exc), intent.step_key or None,
                          verdict.value if verdict is not None else None)  # fmt: skip
        error_json = dumps(converter.unstructure(error))
        data = {**data, "error": {"type": error.type, "message": error.message}}
        try:
            if verdict is not None:
                data["reason"] = verdict.value
                await self.store.settle_intent(
                    claim, Delivery.DEAD, now, error=error_json, event_data=dumps(data)
                )
                log.error(
                    "intent %s (%s, run %s): delivery failed for good (%s): %s: %s",
                    claim.intent_id, intent.channel, intent.run_id, verdict.value,
                    type(exc).__name__, exc,
                )  # fmt: skip
                return
            due = now + cdef.retry.delay(failures)
            data["due"] = due
            await self.store.settle_intent(
                claim, Delivery.RETRY, now, due=due, error=error_json, event_data=dumps(data)
            )
        except Exception:
            log.exception("intent %s: recording a failed delivery failed; it will be "
                          "delivered again after its lease", claim.intent_id)  # fmt: skip
            return
        log.warning(
            "intent %s (%s, run %s): delivery %d failed (%s: %s); retrying in %.3fs",
            claim.intent_id, intent.channel, intent.run_id, claim.delivery,
            type(exc).__name__, exc, due - now,
        )  # fmt: skip

    async def renew(self, expiry: float) -> None:
        """Extend the leases of deliveries in progress (the worker's heartbeat)."""
        held = list(self._sending.values())
        if not held:
            return
        lost = await self.store.renew_intents(held, expiry)
        for iid in lost:  # its handler finishes; its outcome will be refused or ignored
            log.debug("intent %s: no longer held by this worker (settled or canceled)", iid)

    async def serve(self, stop: asyncio.Event) -> None:
        """Deliver until `stop` is set; blocks on the outbox wake-ups when idle."""
        backoff = 0.1
        while not stop.is_set():
            free = self.concurrency - len(self._sending)
            if free <= 0:
                self._freed.clear()
                await _first(stop, _MAX_IDLE, self._freed.wait())
                continue
            try:
                claimed, next_due = await self.poll()
                backoff = 0.1
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if unavailable(self.store, exc):
                    log.exception("outbox: store unavailable; retrying in %.1fs", backoff)
                else:  # not an outage: say what it is
                    log.exception(
                        "outbox pass failed (%s, not a store outage); retrying in %.1fs",
                        type(exc).__name__, backoff,
                    )  # fmt: skip
                await _first(stop, backoff)
                backoff = min(backoff * 2, _MAX_IDLE)
                continue
            if claimed >= free:
                continue  # every slot taken: more may be due
            # Nothing else is due now: block until an intent is recorded or
            # released (a wake-up token), the next one is due, or a lease ends.
            timeout = _MAX_IDLE
            if next_due is not None:
                timeout = min(max(next_due - self.clock.time(), 0.001), _MAX_IDLE)
            await _first(stop, timeout, self.store.wait_intents(sorted(self.channels()), timeout))

    async def drain(self, grace: float) -> None:
        """Let deliveries in progress finish within `grace`; the rest are handed back."""
        tasks = self.tasks()
        if not tasks:
            return
        _, late = await asyncio.wait(tasks, timeout=grace)
        for t in late:
            t.cancel()
        if late:
            await asyncio.wait(late)
            log.warning("handed %d unfinished delivery(ies) back to the outbox", len(late))


async def _first(stop: asyncio.Event, timeout: float, *aws: Coroutine[Any, Any, Any]) -> None:
    """Wait for `stop`, any of `aws`, or `timeout`, whichever comes first."""
    waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(stop.wait())]
    waits += [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in waits:
            if not t.done():
                t.cancel()
        for t in waits:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
