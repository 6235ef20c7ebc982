"""Queues with limits: `Queue`, `RateLimit`, and what `Client.queues` reports.

A `Queue` is declared like a flow, in a `Registry` (``@flow(queue=Queue(...))``,
or ``Registry.add(Queue(...))`` with ``@flow(queue="name")``). Its limits are
checked by the store, atomically, at claim time: a worker passes the limits
of its registry's queues with every claim (`sdk.store.QueueLimits`), and
the store counts executing runs per queue and per concurrency key, and keeps
the rate limit's state, in the queue's partition. Nothing about a queue's
limits is stored, so a change takes effect with the workers that declare it;
while two processes declare different limits for one queue (a rolling
deploy), each claims under its own. `Client.start` checks `max_pending` with
its own registry's declaration.

Example::

    emails = Queue("emails", concurrency=10, rate_limit=RateLimit(100, 60))

    @flow(queue=emails)
    async def send_newsletter(user_id: str) -> None: ...
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta

import attrs

from sdk._core._checks import check_id, check_int, check_timeout, show
from sdk.errors import InvalidArgument
from sdk.store import QueueLimits

__all__ = ["DEFAULT_QUEUE", "Queue", "QueueInfo", "RateLimit", "claim_limits"]

#: The queue a flow runs on unless it names another; it needs no declaration.
DEFAULT_QUEUE = "default"


_COUNT = range(1, 1_000_001)


def _period(value: float | timedelta) -> float:
    return check_timeout(value, "RateLimit: period")


@attrs.frozen
class RateLimit:
    """At most `limit` run starts (first activations) per `period` (seconds or a
    `timedelta`), spread evenly: one start every ``period / limit`` seconds
    (GCRA without a burst), never `limit` at once at a window's edge.

    Raises:
        InvalidArgument: `limit` not in 1..1,000,000, or `period` not a number
            of seconds (or `timedelta`) above 0.
    """

    limit: int = attrs.field(validator=lambda _, __, v: check_int(v, "RateLimit: limit", _COUNT))
    period: float = attrs.field(converter=_period)

    @property
    def interval(self) -> float:
        """Seconds between two starts."""
        return self.period / self.limit


def _count(queue: str, what: str, value: object) -> int | None:
    if value is None:
        return None
    return check_int(value, f"Queue {queue!r}: {what}", _COUNT)


@attrs.frozen(init=False)
class Queue:
    """A queue of runs and its limits (all enforced across every worker).

    Args:
        name: the queue's name (what `@flow(queue=...)` and `Client.start(queue=...)`
            name).
        concurrency: at most this many runs of the queue execute at once, over
            all workers. A run counts from its claim until it parks (a wait, a
            sleep, a retry timer), ends, is handed back, or its lease expires (a
            killed worker's slots come back then). Parked runs do not count.
        worker_concurrency: at most this many per worker process.
        rate_limit: at most `RateLimit.limit` run starts per period, evenly spaced.
            Only first activations count (a run resumed after a wait does not).
        key_concurrency: at most this many executing runs per concurrency key
            (``Client.start(..., concurrency_key=...)``); runs of a full key are
            passed over for runs of other keys.
        max_pending: `Client.start` raises `QueueFull` while the queue holds this
            many ready runs (an idempotent repeat of an existing run id still
            returns it). Child flows are not refused: they are part of work already
            admitted.
        priority: False for a FIFO queue: a start with a priority other than 0
            is refused.

    Raises:
        InvalidArgument: an argument that is not what it must be (the message
            names the queue and the argument).
    """

    name: str
    concurrency: int | None
    worker_concurrency: int | None
    rate_limit: RateLimit | None
    key_concurrency: int | None
    max_pending: int | None
    priority: bool

    def __init__(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        worker_concurrency: int | None = None,
        rate_limit: RateLimit | None = None,
        key_concurrency: int | None = None,
        max_pending: int | None = None,
        priority: bool = True,
    ) -> None:
        check_id(name, "Queue: name")
        if rate_limit is not None and not isinstance(rate_limit, RateLimit):
            raise InvalidArgument(
                f"Queue {name!r}: rate_limit must be a RateLimit(limit, period), "
                f"got {show(rate_limit)}"
            )
        if not isinstance(priority, bool):
            raise InvalidArgument(f"Queue {name!r}: priority must be True or False, "
                                  f"got {show(priority)}")  # fmt: skip
        self.__attrs_init__(
            name,
            _count(name, "concurrency", concurrency),
            _count(name, "worker_concurrency", worker_concurrency),
            rate_limit,
            _count(name, "key_concurrency", key_concurrency),
            _count(name, "max_pending", max_pending),
            priority,
        )

    @property
    def limited(self) -> bool:
        """Whether a claim has anything to check for it."""
        return any(
            x is not None
            for x in (self.concurrency, self.worker_concurrency, self.rate_limit,
                      self.key_concurrency)
        )  # fmt: skip


@attrs.frozen
class QueueInfo:
    """One queue as `Client.queues` reports it.

    Attributes:
        name: the queue.
        pending: runs ready to execute (a delayed start counts once it is due).
        executing: runs executing now (claimed, not parked or ended).
        queue: its declaration in the client's registry (its limits), or None.
        limited_by: ``"concurrency"``, ``"key"`` or ``"rate"``: the limit holding
            its ready runs back now; None when none does.
        oldest_pending_age: seconds since the oldest ready run was created (or
            its delayed start came), None with none.
    """

    name: str
    pending: int
    executing: int
    queue: Queue | None = None
    limited_by: str | None = None
    oldest_pending_age: float | None = None


def claim_limits(queues: Iterable[Queue], executing: Mapping[str, int]) -> list[QueueLimits]:
    """The limits a worker claims under: its registry's limited queues, each with
    the room left of its worker cap (`executing`: what the worker executes, per queue)."""
    return [
        QueueLimits(
            q.name,
            q.concurrency,
            None
            if q.worker_concurrency is None
            else max(q.worker_concurrency - executing.get(q.name, 0), 0),
            q.key_concurrency,
            None if q.rate_limit is None else q.rate_limit.interval,
        )
        for q in queues
        if q.limited
    ]
