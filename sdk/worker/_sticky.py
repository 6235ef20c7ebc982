"""Sticky activations: a worker keeps the runs it parked in memory, and continues one
where it stopped when it claims it again.

An activation that parks (`sdk.engine._ending.park`) with the cache on is not unwound:
its flow's tasks stay blocked where they are, on their `sdk.engine._aio.FlowLoop`,
and the worker keeps it here (an LRU of `size` runs). The park tells the store
(`Store.suspend(sticky=delay)`), which then routes the run's wake-up to this
worker first (`Store.wait_ready(owner=...)`; other workers pass it over for
`delay` seconds) and, when this worker claims it while no write happened to
it since, leaves its journal out of the claim (`Claim.cached`). The activation
then continues from its live frontier (`Activation.proceed`): no replay.

Anything else falls back to replay, which gives the flow the same values in
the same rounds (tests/test_sticky.py compares journals and events of both):
a claim without `Claim.cached` (the journal changed: another worker ran it,
a lease was lost, a resume, a version move), a run no longer in the cache
(evicted, or dropped with the whole cache when the worker stops or simulates
a crash), a flow definition that is not the one the activation ran (code
reloaded). Such a claim of a run this worker holds drops the held activation.

Dropping an activation (`discard`) unwinds its flow the way every ended
activation is unwound (`sdk.engine._machine._Evicted`): ``finally`` blocks run, but any
step, wait or timer they call raises at once, so nothing is executed or recorded.
"""

from __future__ import annotations

import collections
import logging
from typing import TYPE_CHECKING

import attrs

from sdk._core._checks import check_int, check_seconds
from sdk.engine._engine import Keeping

if TYPE_CHECKING:
    from sdk.engine._activation import Activation
    from sdk.model._flowdef import FlowDef
    from sdk.store import Claim, Store

__all__ = ["StickyCache", "reload"]

log = logging.getLogger("steadyflow.worker")


class StickyCache:
    """The parked activations one worker keeps, least recently parked evicted first.

    Args:
        size: how many runs to keep (0: none; the worker then parks as before).
        delay: seconds a ready run waits for this worker before any worker may
            take it (see `Store.suspend`).
    """

    def __init__(self, size: int, delay: float) -> None:
        check_int(size, "Worker: sticky_cache", range(0, 10_000_001))
        check_seconds(delay, "Worker: sticky_delay")
        self.size = size
        # what the engine's park asks of the store for a kept run (`Engine.keeping`)
        self.keeping = Keeping(float(delay))
        self._runs: collections.OrderedDict[str, Activation] = collections.OrderedDict()
        self.hits = 0  # claims that continued a kept activation
        self.misses = 0  # claims of a kept run that replayed instead

    def __len__(self) -> int:
        return len(self._runs)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._runs

    def keep(self, act: Activation) -> None:
        """Keep a parked activation (replacing one of the same run); evict beyond `size`."""
        old = self._runs.pop(act.run_id, None)
        if old is not None and old is not act:
            old.discard()
        self._runs[act.run_id] = act
        while len(self._runs) > self.size:
            _, evicted = self._runs.popitem(last=False)
            evicted.discard()

    def claimed(self, claim: Claim, flow: FlowDef) -> Activation | None:
        """The kept activation that may continue `claim`'s run, or None (replay).

        A claimed run is no longer parked: its kept activation, if any, leaves the
        cache either way (dropped when it cannot continue).
        """
        act = self._runs.pop(claim.run.run_id, None)
        if act is None:
            return None
        # The park bumped the fence once and this claim once more: nothing else did.
        if claim.cached and act.flow is flow and claim.run.fence == act.fence + 2:
            self.hits += 1
            return act
        self.misses += 1
        act.discard()
        return None

    def clear(self) -> None:
        """Drop every kept activation (the worker stops, or simulates its death)."""
        while self._runs:
            _, act = self._runs.popitem(last=False)
            act.discard()


async def reload(store: Store, claim: Claim) -> Claim | None:
    """`claim` with its journal and lineage, read now: a cached claim (`Claim.cached`)
    of a run whose activation this worker no longer holds. One more round trip; the
    lease is held, so nothing can write to the journal meanwhile. None: the run was
    deleted meanwhile (nothing to execute)."""
    lineage = await store.read_lineage(claim.run.run_id)
    if lineage is None:
        return None
    return attrs.evolve(claim, journal=lineage.journal, lineage=lineage.lineage, cached=False)
