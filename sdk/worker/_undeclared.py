"""A worker's word on queues nobody declared: a flow whose queue no `Queue` of the
registry declares runs there with no limits at all."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from sdk.model._flowdef import FlowDef
from sdk.model._queues import DEFAULT_QUEUE, Queue

__all__ = ["UndeclaredQueues"]

log = logging.getLogger("steadyflow.worker")


class UndeclaredQueues:
    """Tells, once per flow and queue, that a flow's queue is declared nowhere in the
    registry: its runs go there with no limits at all (a misspelt ``queue="emails"``
    next to ``Queue("email", ...)`` is silent otherwise). A worker checks the flows
    it serves at its first poll, and flows it serves later when it first sees them.
    The queue ``default`` needs no declaration."""

    def __init__(self) -> None:
        self._seen: set[tuple[str, str | None]] = set()  # (flow, version) checked
        self._told: set[tuple[str, str]] = set()  # (flow, queue) warned about

    def check(self, flows: Iterable[FlowDef], declared: Mapping[str, Queue]) -> None:
        """Log a WARNING (logger ``steadyflow.worker``) for each new flow whose queue
        `declared` does not hold."""
        for fd in flows:
            if (fd.name, fd.version) in self._seen:
                continue
            self._seen.add((fd.name, fd.version))
            told = (fd.name, fd.queue)
            if fd.queue == DEFAULT_QUEUE or fd.queue in declared or told in self._told:
                continue
            self._told.add(told)
            log.warning(
                "flow %s runs on queue %r, which no Queue(%r, ...) in the registry declares: "
                "its runs there have no concurrency or rate limits (declare the queue, or "
                "check its name)", fd.name, fd.queue, fd.queue,
                extra={"flow": fd.name, "queue": fd.queue},
            )  # fmt: skip
