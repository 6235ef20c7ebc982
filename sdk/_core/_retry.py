"""Retry policies: bounded exponential backoff with attempt and failure budgets."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from sdk._core._clock import MAX_SECONDS
from sdk._core._limits import short
from sdk._core._types import Reason
from sdk.errors import InvalidArgument

__all__ = ["RetryPolicy"]


def _types(value: Sequence[type[BaseException]]) -> tuple[type[BaseException], ...]:
    return tuple(value)


def _count(policy: object, field: attrs.Attribute[Any], value: Any) -> None:
    """An attempt or failure count: an int, at least 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgument(f"RetryPolicy: {field.name} must be an int >= 1, got {short(value)}")


def _number(low: float, high: float) -> Callable[[object, attrs.Attribute[Any], Any], None]:
    """A number of seconds (or a factor, a fraction): finite, from `low` to `high`."""

    def check(policy: object, field: attrs.Attribute[Any], value: Any) -> None:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or not low <= value <= high:
            raise InvalidArgument(
                f"RetryPolicy: {field.name} must be a finite number from {low:g} to {high:g}, "
                f"got {short(value)}"
            )

    return check


@attrs.frozen
class RetryPolicy:
    """How a failing step is retried. Retrying is opt-in.

    Attributes:
        max_attempts: attempts per step call, the first included (1 = no retry).
        initial_interval: seconds before the second attempt.
        backoff: factor applied to the interval after each failure.
        max_interval: cap on the interval.
        max_failures: failure budget of the run: once this many failed attempts
            are recorded across all of the run's steps, the next failure is final
            (reason ``failure_budget_exhausted``). None: no budget.
        non_retryable: exception types that fail the step at once.
        jitter: fraction (0..1) of random spread added to each interval.

    Attempt counts live in the journal, so a crash does not reset a budget; an
    attempt cut off by a crash is not counted (only recorded failures are).

    Example::

        @step(retry=RetryPolicy(max_attempts=5, initial_interval=0.5))
        async def charge(order_id: str) -> str: ...
    """

    max_attempts: int = attrs.field(default=3, validator=_count)
    initial_interval: float = attrs.field(default=1.0, validator=_number(0.0, MAX_SECONDS))
    backoff: float = attrs.field(default=2.0, validator=_number(1.0, MAX_SECONDS))
    max_interval: float = attrs.field(default=60.0, validator=_number(0.0, MAX_SECONDS))
    max_failures: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(_count)
    )
    non_retryable: tuple[type[BaseException], ...] = attrs.field(default=(), converter=_types)
    jitter: float = attrs.field(default=0.0, validator=_number(0.0, 1.0))

    def to_json(self) -> str:
        """JSON of the policy (exception types as ``module:qualname``)."""
        from sdk._core._serde import dumps, type_path

        data = attrs.asdict(self)
        data["non_retryable"] = [type_path(t) for t in self.non_retryable]
        return dumps(data)

    @classmethod
    def from_json(cls, text: str) -> RetryPolicy:
        from sdk._core._serde import exception_type, loads

        data = loads(text)
        data["non_retryable"] = tuple(exception_type(p) for p in data.get("non_retryable", ()))
        return cls(**data)

    def delay(self, failures: int) -> float:
        """Seconds to wait after the `failures`-th failed attempt (never past
        `max_interval`, however many failures: the growth cannot overflow)."""
        if self.initial_interval == 0:
            grown = 0.0
        else:
            try:
                grown = self.initial_interval * self.backoff ** (failures - 1)
            except OverflowError:  # (2.0 ** 1024: long past any cap)
                grown = math.inf
        base = min(grown, self.max_interval)
        if self.jitter:
            base += base * self.jitter * random.random()
        return base

    def verdict(self, exc: BaseException, attempts: int, run_failures: int) -> Reason | None:
        """None to retry, else the reason the failure is final.

        Args:
            exc: what the attempt raised.
            attempts: failed attempts of this step call, this one included.
            run_failures: failed attempts recorded in the whole run, this one included.
        """
        if isinstance(exc, self.non_retryable):
            return Reason.NON_RETRYABLE
        if attempts >= self.max_attempts:
            return Reason.RETRIES_EXHAUSTED
        if self.max_failures is not None and run_failures >= self.max_failures:
            return Reason.FAILURE_BUDGET_EXHAUSTED
        return None
