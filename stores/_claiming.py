"""Claims and leases: `Store.claim` and `Store.poll`, on one partition or across
many; `renew`, `tick` and `quarantine`.

With one partition a claim is one script (``claim``; ``poll`` maintains the
partition first): it takes the ready runs in queue order, lowest priority
number first, FIFO within a priority.

With N > 1 partitions a claim costs two concurrent rounds, whatever N:

1. every partition is asked at once (on one node the lane sends the calls in
   one write; on a cluster one pipeline, each master its share, the masters
   at once) for up to `limit` of its best ready
   runs, without taking them (a *peek*: score, created_at, queue; ``poll``
   also maintains the partition in the same call);
2. the candidates are merged, best first: priority, then creation time, then
   the partitions in an order that rotates with every claim (fairness between
   equal candidates); the first `limit` decide how many runs each partition
   gives, and those partitions are claimed at once (a worker's own cap,
   ``worker_concurrency``, is split between them as planned).

A partition that gives fewer than planned (its first run was of another
flow, a limit held, another worker was faster) makes the claim ask the
partitions it left with candidates, one after another, for the rest. An idle
poll costs the first round only.

What holds with N > 1 (docs/operations.md#redis-cluster-and-partitions): one
claim takes the best runs it saw across partitions by priority, then creation
time; FIFO by enqueue order holds within a partition. Two runs in different
partitions with the same priority and creation time come in either order;
so may a run re-queued later (after a wait) and a newer run of another
partition (the older creation time wins).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import attrs

from sdk.store import Claim, FlowScope, Renewal, TickResult
from sdk.store._queues import QueueLimits
from stores import _codec, _decode
from stores._codec import num
from stores._keys import SUFFIX
from stores._queuestore import limits_args
from stores._storecore import StoreCore

__all__ = ["Claims"]

_PRIORITY = 1 << 40  # a queue score is priority * 2^40 + the partition's enqueue sequence


class Claims:
    """Takes runs and keeps their leases: `claim`, `poll`, `renew`, `tick`, `quarantine`."""

    def __init__(self, core: StoreCore) -> None:
        self._core = core
        self._keys = core.keys
        self._turn = 0  # where the next claim's rotation starts (per store)

    async def claim(
        self,
        owner: str,
        queues: Sequence[str] | None,
        limit: int,
        now: float,
        lease_ttl: float,
        *,
        flows: Sequence[FlowScope] | None = None,
        limits: Sequence[QueueLimits] = (),
    ) -> list[Claim]:
        scope = _codec.scope(flows, queues)
        if self._keys.partitions == 1:
            return await self._take(0, owner, now, lease_ttl, max(limit, 0), limits, scope)
        if limit <= 0:
            return []
        peeks = await self._core.each("claim", [
            ([self._core.anchor(p)], self._args(p, owner, now, lease_ttl, -limit, limits, scope))
            for p in self._core.partitions()
        ])  # fmt: skip
        claims, _ = await self._planned(
            [_decode.corrupt("", r) for r in peeks], owner, now, lease_ttl, limit, limits, scope
        )
        return claims

    async def poll(
        self,
        owner: str,
        queues: Sequence[str] | None,
        limit: int,
        now: float,
        lease_ttl: float,
        max_recoveries: int,
        recovery_error: str,
        *,
        flows: Sequence[FlowScope] | None = None,
        limits: Sequence[QueueLimits] = (),
    ) -> tuple[list[Claim], TickResult]:
        scope = _codec.scope(flows, queues)
        many = self._keys.partitions > 1
        ask = -limit if many else max(limit, 0)  # a negative limit: peek (see the module)
        replies = await self._core.each("poll", [
            ([self._core.anchor(p)], [
                self._keys.base(p), owner, num(now), num(now + lease_ttl), str(ask),
                str(max_recoveries), recovery_error, *limits_args(limits), *scope,
            ])
            for p in self._core.partitions()
        ])  # fmt: skip
        ticks, peeks, claims = [], [], []
        for reply in replies:
            ticked, taken, *best = _decode.corrupt("", reply)
            ticks.append(_decode.tick_result(ticked))
            claims += _decode.claims(taken, self._keys.run, self._core.key)
            peeks.append(best[0] if best else [])
        ticked = _decode.merged(ticks)
        if many and limit > 0:
            claims, capped = await self._planned(peeks, owner, now, lease_ttl, limit, limits, scope)
            if capped and not ticked.capped:
                ticked = attrs.evolve(ticked, capped=True)
        return claims, ticked

    async def renew(self, leases: Sequence[tuple[str, int]], expiry: float) -> Renewal:
        by_part: dict[int, list[str]] = {}
        for run_id, fence in leases:
            by_part.setdefault(self._keys.partition(run_id), []).extend((run_id, str(fence)))
        lost: list[str] = []
        asked: list[str] = []
        replies = await self._core.each("renew", [  # the partitions at once
            ([self._core.anchor(p)], [self._keys.base(p), num(expiry), *flat])
            for p, flat in by_part.items()
        ])  # fmt: skip
        for reply in replies:
            if reply and reply[0] == "err":
                _decode.corrupt("", reply)
            lost += reply[0]
            asked += reply[1]
        return Renewal(lost, dict(zip(asked[::2], asked[1::2], strict=True)))

    async def tick(
        self, now: float, max_recoveries: int, recovery_error: str, limit: int = 100
    ) -> TickResult:
        replies = await self._core.each("tick", [  # the partitions at once
            ([self._core.anchor(p)],
             [self._keys.base(p), num(now), str(limit), str(max_recoveries), recovery_error])
            for p in self._core.partitions()
        ])  # fmt: skip
        return _decode.merged(_decode.tick_result(_decode.corrupt("", r)) for r in replies)

    async def quarantine(self, run_id: str, fence: int | None, now: float, error: str) -> bool:
        k = self._keys
        # The id goes back as the bytes it was read as: a run id that is not UTF-8
        # (found in an index) is named by exactly those bytes.
        raw = run_id.encode("utf-8", "surrogateescape")
        base = k.base_of(run_id).encode()
        reply = await self._core.call(
            "quarantine",
            [base + SUFFIX["run"].encode() + raw],
            [base, raw, "" if fence is None else str(fence), num(now), error],
        )
        return bool(_decode.corrupt(run_id, reply) == 1)

    def _args(
        self, p: int, owner: str, now: float, lease_ttl: float, limit: int,
        limits: Sequence[QueueLimits], scope: Sequence[str],
    ) -> list[str]:  # fmt: skip
        return [self._keys.base(p), owner, num(now), num(now + lease_ttl), str(limit),
                *limits_args(limits), *scope]  # fmt: skip

    async def _take(
        self, p: int, owner: str, now: float, lease_ttl: float, limit: int,
        limits: Sequence[QueueLimits], scope: Sequence[str],
    ) -> list[Claim]:  # fmt: skip
        core = self._core
        reply = await core.call(
            "claim", [core.anchor(p)], self._args(p, owner, now, lease_ttl, limit, limits, scope)
        )
        return _decode.claims(_decode.corrupt("", reply), self._keys.run, self._core.key)

    async def _planned(
        self, peeks: list[list[Any]], owner: str, now: float, lease_ttl: float, limit: int,
        limits: Sequence[QueueLimits], scope: Sequence[str],
    ) -> tuple[list[Claim], bool]:  # fmt: skip
        """Round 2 (see the module): claim the best `limit` of the peeked candidates.
        Also whether a candidate was left for the caller's own cap (worker room)."""
        n = self._keys.partitions
        start, self._turn = self._turn, (self._turn + 1) % n
        order = sorted(
            (_rank(score, at, (p - start) % n), p, queue)
            for p, peek in enumerate(peeks) for score, at, queue in peek
        )  # fmt: skip
        room = {q.queue: q.worker_room for q in limits if q.worker_room is not None}
        plan: dict[int, Counter[str]] = {}
        planned, capped = 0, False
        for _, p, queue in order:
            if planned >= limit:
                break
            if room.get(queue, 1) <= 0:
                capped = True
                continue
            if queue in room:
                room[queue] -= 1
            plan.setdefault(p, Counter())[queue] += 1
            planned += 1
        if not plan:  # nothing ready (an idle poll ends here)
            return [], capped
        parts = sorted(plan, key=lambda p: (p - start) % n)
        replies = await self._core.each("claim", [
            ([self._core.anchor(p)],
             self._args(p, owner, now, lease_ttl, plan[p].total(), _share(limits, plan[p]), scope))
            for p in parts
        ])  # fmt: skip
        batches = [
            _decode.claims(_decode.corrupt("", r), self._keys.run, self._core.key) for r in replies
        ]
        claims = [c for batch in batches for c in batch]
        short = {p for p, batch in zip(parts, batches, strict=True) if len(batch) < plan[p].total()}
        if not short or len(claims) >= limit:
            return self._ordered(claims, start), capped
        # Some partition gave fewer than planned: the rest from those with candidates left.
        taken = Counter(c.run.queue for c in claims if c.damage is None)
        left = _left(limits, taken)
        asked = Counter({p: plan[p].total() for p in plan})
        for _, p, _queue in order:
            if len(claims) >= limit:
                break
            if p in short or asked[p] >= len(peeks[p]):
                continue
            more = await self._take(p, owner, now, lease_ttl, limit - len(claims), left, scope)
            claims += more
            asked[p] = len(peeks[p])  # asked for everything it showed
            taken.update(c.run.queue for c in more if c.damage is None)
            left = _left(limits, taken)
        return self._ordered(claims, start), capped

    def _ordered(self, claims: list[Claim], start: int) -> list[Claim]:
        """`claims` in the order the candidates were ranked (each partition's in its own)."""
        n = self._keys.partitions
        return [
            c for _, c in sorted(enumerate(claims), key=lambda ic: (
                ic[1].run.priority, ic[1].run.created_at,
                (self._keys.partition(ic[1].run.run_id) - start) % n, ic[0],
            ))
        ]  # fmt: skip


def _rank(score: str, created_at: str, turn: int) -> tuple[int, float, int, float]:
    """A candidate's place across partitions: priority, creation time, rotation, score.
    (A creation time that is no number, a damaged run's, ranks last: its claim reports it.)"""
    value = float(score)
    try:
        at = float(created_at)
    except ValueError:
        at = math.inf
    return (math.floor(value / _PRIORITY), at if at == at else math.inf, turn, value)


def _share(limits: Sequence[QueueLimits], planned: Counter[str]) -> list[QueueLimits]:
    """`limits` for one partition's claim: a worker's room in a queue is what was
    planned there (so concurrent claims cannot overrun it)."""
    return [
        q if q.worker_room is None else attrs.evolve(q, worker_room=planned[q.queue])
        for q in limits
    ]


def _left(limits: Sequence[QueueLimits], taken: Counter[str]) -> list[QueueLimits]:
    """`limits` less what this claim has taken of each queue's worker room."""
    return [
        q if q.worker_room is None
        else attrs.evolve(q, worker_room=max(q.worker_room - taken[q.queue], 0))
        for q in limits
    ]  # fmt: skip
