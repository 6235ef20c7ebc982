"""The Redis store's outbox: intents leased to dispatchers, delivered at least once."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TypeVar

from redis.exceptions import ResponseError

from sdk.store import CorruptData, Delivery, IntentClaim, StoredIntent
from stores import _codec
from stores._storecore import StoreCore

__all__ = ["Outbox"]

T = TypeVar("T")


def _turned(items: list[T], turn: int) -> list[T]:
    """`items` rotated to start at ``turn % len(items)``."""
    k = turn % len(items)
    return items[k:] + items[:k]


class Outbox:
    """Claim, settle and renew intent deliveries; read a run's intents."""

    def __init__(self, core: StoreCore) -> None:
        self._core = core
        self._keys = core.keys
        #: Calls of `claim_intents` so far (where the next one starts).
        self._turn = 0

    async def claim_intents(
        self, channels: Sequence[str], limit: int, now: float, lease_ttl: float
    ) -> tuple[list[IntentClaim], float | None]:
        claims: list[IntentClaim] = []
        due: list[float] = []
        if not channels:
            return claims, None
        # Fair under a backlog: a call takes what is due partition after partition,
        # channel after channel, up to `limit`; each call starts one partition and
        # one channel further on, so one with more due intents than a call takes
        # does not keep the others waiting for as long as it stays backlogged.
        turn = self._turn
        self._turn = turn + 1
        parts = _turned(list(self._core.partitions()), turn)
        chans = _turned(list(channels), turn)
        for p in parts:
            taken, soonest = await self._core.call(
                "claim_intents",
                [self._core.anchor(p)],
                [self._keys.base(p), _codec.num(now), _codec.num(now + lease_ttl),
                 str(max(limit - len(claims), 0)), *chans],
            )  # fmt: skip
            claims += [
                IntentClaim(str(iid), run_id, body, int(n), int(f))
                for iid, run_id, body, n, f in taken
            ]
            if soonest != "":
                due.append(float(soonest))
        return claims, min(due) if due else None

    async def settle_intent(
        self,
        claim: IntentClaim,
        outcome: Delivery,
        now: float,
        *,
        due: float | None = None,
        error: str = "",
        event_data: str = "",
    ) -> bool:
        outcome = Delivery(outcome)
        p = self._keys.partition(claim.run_id)
        reply = await self._core.call(
            "settle_intent",
            [self._keys.intent(p, claim.intent_id)],
            [self._keys.base(p), claim.intent_id, str(claim.delivery), _codec.num(now),
             outcome.value, "" if due is None else _codec.num(due), error, event_data],
        )  # fmt: skip
        return bool(reply == 1)

    async def renew_intents(self, claims: Sequence[IntentClaim], expiry: float) -> list[str]:
        by_part: dict[int, list[str]] = {}
        for c in claims:
            by_part.setdefault(self._keys.partition(c.run_id), []).extend(
                (c.intent_id, str(c.delivery))
            )
        lost: list[str] = []
        for p, flat in by_part.items():
            lost += await self._core.call(
                "renew_intents",
                [self._core.anchor(p)],
                [self._keys.base(p), _codec.num(expiry), *flat],
            )
        return lost

    async def intents(self, run_id: str) -> list[StoredIntent] | None:
        if not self._core.layout_ok:
            await self._core.read_layout()
        k = self._keys
        async with self._core.client.pipeline(transaction=False) as pipe:
            pipe.exists(k.run(run_id))
            pipe.smembers(k.intents(run_id))
            exists, ids = await pipe.execute(raise_on_error=False)
        if not exists:
            return None
        # Damaged data (a key of another type, a field missing or not a number)
        # is this run's alone: CorruptData naming the key, never a raw error.
        if isinstance(ids, ResponseError):
            raise await self._core.unreadable(run_id, k.intents(run_id), ids, "set")
        bad = next((i for i in ids if not i.isdigit()), None)
        if bad is not None:
            raise CorruptData(run_id, k.intents(run_id), f"holds {bad[:40]!r}, not an intent id")
        p = k.partition(run_id)
        ordered = sorted(ids, key=int)
        async with self._core.client.pipeline(transaction=False) as pipe:
            for iid in ordered:
                pipe.hgetall(k.intent(p, iid))
            rows = await pipe.execute(raise_on_error=False)
        out = []
        for iid, h in zip(ordered, rows, strict=True):
            if isinstance(h, ResponseError):
                raise await self._core.unreadable(run_id, k.intent(p, iid), h, "hash")
            if h:
                try:
                    out.append(_codec.intent(iid, h))
                except (KeyError, ValueError) as exc:
                    detail = f"cannot be read ({type(exc).__name__}: {exc})"[:200]
                    raise CorruptData(run_id, k.intent(p, iid), detail) from None
        return out

    async def wait_intents(self, channels: Sequence[str], timeout: float) -> bool:
        if not channels:
            await asyncio.sleep(max(timeout, 0.001))
            return False
        return await self._core.blpop_any(
            [[self._keys.outbox_wake(p, c) for c in channels] for p in self._core.partitions()],
            timeout,
        )
