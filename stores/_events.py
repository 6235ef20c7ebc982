"""The Redis store's part for events matched by key: the filter indexes a
``send_event`` reads (per partition) and the per-run delivery script."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from sdk.store import EventDelivered, Mailbox, Refused
from stores._codec import mailbox_name, num, refused
from stores._storecore import StoreCore

__all__ = ["EventDelivery"]

_DELIVERED = {1: EventDelivered.DELIVERED, 0: EventDelivered.DUPLICATE}


class EventDelivery:
    """Events matched by key: `event_shapes`, `event_listeners`, `deliver_event`."""

    def __init__(self, core: StoreCore) -> None:
        self._core = core
        self._keys = core.keys

    async def event_shapes(self, event: str) -> set[str]:
        if not self._core.layout_ok:
            await self._core.read_layout()
        k = self._keys
        # One read per partition, concurrently: a cluster serves each on its own node.
        found = await asyncio.gather(
            *(self._core.client.smembers(k.event_shapes(p, event)) for p in self._core.partitions())
        )
        return {str(shape) for shapes in found for shape in shapes}

    async def event_listeners(self, tokens: Sequence[str]) -> list[tuple[str, str]]:
        if not self._core.layout_ok:
            await self._core.read_layout()
        if not tokens:
            return []
        k = self._keys

        async def read(p: int) -> list[tuple[str, str]]:
            # one pipeline per partition: its keys share the partition's hash tag
            pipe = self._core.client.pipeline(transaction=False)
            for t in tokens:
                pipe.smembers(k.event_index(p, t))
            found = await pipe.execute()
            return [
                (t, str(run_id)) for t, ids in zip(tokens, found, strict=True) for run_id in ids
            ]

        parts = await asyncio.gather(*(read(p) for p in self._core.partitions()))
        return sorted({pair for part in parts for pair in part})

    async def deliver_event(
        self,
        run_id: str,
        token: str,
        mailbox: Mailbox,
        payload: str,
        dedup_id: str,
        *,
        now: float,
        event_data: str,
    ) -> EventDelivered | Refused:
        k = self._keys
        reply = await self._core.call(
            "deliver",
            [k.run(run_id)],
            [k.base_of(run_id), run_id, token, mailbox_name(mailbox), payload, dedup_id,
             num(now), event_data],
        )  # fmt: skip
        no = refused(reply)
        if no is not None:
            return no
        return _DELIVERED.get(int(reply[0]), EventDelivered.NOT_LISTENING)
