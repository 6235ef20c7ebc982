"""A run's history, as a client reads it: events, checkpoints, approvers, outbox
intents, the live feed (`RunHistory`)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from sdk._core._checks import check_count, check_id, check_seconds, show
from sdk._core._serde import loads
from sdk._core._types import Checkpoint, Event, RunStatus
from sdk.client._runs import error_info, timestamp
from sdk.errors import CorruptRecord, InvalidArgument, RunNotFound
from sdk.model._channels import Intent, IntentStatus
from sdk.store import CorruptData, Store, StoredEvent, StoredIntent

if TYPE_CHECKING:
    from sdk.client._clientcore import ClientCore

__all__ = ["RunHistory"]

_EVENT_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")


class RunHistory:
    """`Client.events`, `checkpoints`, `approvers`, `intents` and `follow`."""

    __slots__ = ("_core",)

    def __init__(self, core: ClientCore) -> None:
        self._core = core

    async def events(self, run_id: str, cursor: str | None, limit: int) -> list[Event]:
        check_count(limit, "events(): limit")
        if cursor is not None and (not isinstance(cursor, str) or not _EVENT_ID.fullmatch(cursor)):
            raise InvalidArgument(
                f"events(): cursor must be an event_id from this log (like '1700000000000-0'), "
                f"got {show(cursor)}"
            )
        store = self._core.store
        stored = await self._core.stored(run_id)
        try:
            raw = await store.events(run_id, cursor, limit)
            trace = stored.trace_id or run_id
            return [_event(r, trace, stored.tenant_id, store, stored.schedule_id) for r in raw]
        except CorruptData as e:  # the next page starts after the entry it names
            raise CorruptRecord(e.run_id, e.key, e.detail) from None

    async def checkpoints(self, run_id: str) -> list[Checkpoint]:
        await self._core.stored(run_id)
        try:
            found = await self._core.store.checkpoints(run_id)
        except CorruptData as e:
            raise CorruptRecord(e.run_id, e.key, e.detail) from None
        return [
            Checkpoint(
                checkpoint_id=str(c.checkpoint_id),
                run_id=run_id,
                kind=c.kind,
                step_key=c.step_key,
                status=c.status,
                created_at=timestamp(c.at),  # type: ignore[arg-type]
            )
            for c in found
        ]

    async def approvers(self, run_id: str) -> dict[str, tuple[str, ...]]:
        stored = await self._core.stored(run_id)
        if stored.status is not RunStatus.WAITING_FOR_HUMAN:
            return {}  # what a past park named is kept until the next one
        try:
            found = await self._core.store.approvers(run_id)
        except CorruptData as e:
            raise CorruptRecord(e.run_id, e.key, e.detail) from None
        return {
            box.name: who
            for box, who in sorted(found.items(), key=lambda kv: kv[0].name)
            if box.human
        }

    async def intents(self, run_id: str) -> list[Intent]:
        check_id(run_id, "run_id")
        try:
            rows = await self._core.store.intents(run_id)
        except CorruptData as e:
            raise CorruptRecord(e.run_id, e.key, e.detail) from None
        if rows is None:
            raise RunNotFound(run_id)
        return [_intent(run_id, row) for row in rows]

    async def follow(self, poll_timeout: float) -> AsyncGenerator[Event, None]:
        check_seconds(poll_timeout, "follow(): poll_timeout", positive=True)
        store = self._core.store
        subscription: Any = None
        known: dict[str, tuple[str, str | None]] = {}  # run id -> (trace id, tenant id)
        try:
            while True:
                raw, subscription = await store.follow(subscription, poll_timeout, 100)
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # Python 3.11's asyncio.wait_for (inside redis-py) can swallow a
                    # cancel that lands as a read completes; honour it here, or a
                    # canceled follower would poll forever.
                    raise asyncio.CancelledError
                new = sorted({r.run_id for r in raw} - known.keys())
                if new:
                    known.update(await store.correlation(new))
                    if len(known) > 10_000:  # a bounded cache: forget the oldest half
                        for old in list(known)[:5_000]:
                            del known[old]
                for r in raw:
                    trace, tenant = known.get(r.run_id, (r.run_id, None))
                    yield _event(r, trace, tenant)
        finally:
            if subscription is not None:
                await store.unfollow(subscription)


def _intent(run_id: str, row: StoredIntent) -> Intent:
    body = loads(row.body)
    return Intent(
        intent_id=row.intent_id,
        run_id=run_id,
        channel=row.channel,
        payload=body["payload"],
        idempotency_key=body["idempotency_key"],
        attempt=row.deliveries,
        created_at=timestamp(float(body["created_at"])),  # type: ignore[arg-type]
        step_key=row.step_key,
        status=IntentStatus(row.status),
        failures=row.failures,
        last_error=error_info(row.error),
        updated_at=timestamp(row.updated_at),
        next_attempt_at=timestamp(row.due),
    )


def _event(
    raw: StoredEvent,
    trace_id: str | None,
    tenant_id: str | None,
    store: Store | None = None,
    schedule_id: str | None = None,
) -> Event:
    try:
        data = loads(raw.data) if raw.data else None
    except ValueError:
        if store is not None:
            key = store.key_of(raw.run_id, "events")
            raise CorruptData(raw.run_id, key, f"entry {raw.event_id}: data is not JSON") from None
        data = None  # the live feed (a projection): the run's log says what is wrong
    return Event(
        event_id=raw.event_id,
        run_id=raw.run_id,
        type=raw.type,
        at=timestamp(raw.at),  # type: ignore[arg-type]
        step_key=raw.step_key,
        data=data,
        correlation={
            "run_id": raw.run_id, "trace_id": trace_id, "tenant_id": tenant_id,
            "step_key": raw.step_key,
            # a schedule's tick run: its schedule (`RunRecord.schedule_id`)
            **({"schedule_id": schedule_id} if schedule_id is not None else {}),
        },
    )  # fmt: skip
