"""Runs whose stored data cannot be read: a worker fails each alone.

Damage shows up in four places, and each ends the same way for that one run,
while the worker goes on with every other run of the batch:

- a claim or a tick reports it (`Claim.damage`, `TickResult.damaged`): the
  store could not read the run, or the scripts could not work with it;
- a claim the store read holds data the engine cannot decode (`decode`): a
  journal or lineage record, the arguments or the retry policy is not what
  the engine wrote;
- an activation's write finds the run's keys damaged (the store raises
  `CorruptData`; the activation stops).

`fail` then fails the run (`Store.quarantine`): status ``failed``, reason
``corrupt_record``, an error naming the key and what is wrong with it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sdk._core._journal import Journal, Record
from sdk._core._retry import RetryPolicy
from sdk._core._serde import converter, dumps, loads
from sdk.client._runs import corrupt_error
from sdk.store import Claim, Damaged

if TYPE_CHECKING:
    from sdk._core._clock import Clock
    from sdk.store import Store

__all__ = ["Undecodable", "decode", "fail", "unavailable"]

log = logging.getLogger("steadyflow.worker")


class Undecodable(Exception):
    """A claimed run holds data the engine cannot decode (`key`, `detail`)."""

    def __init__(self, key: str, detail: str) -> None:
        self.key = key
        self.detail = detail
        super().__init__(f"{key}: {detail}")


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]


def decode(claim: Claim, store: Store) -> Journal:
    """The claimed run's journal, once its journal, lineage, arguments and retry
    policy are known to decode; `Undecodable` naming the first that does not.

    Checked before the activation starts: a record that failed to decode in the
    middle of one would stop it, and the run would crash-loop until it ran out
    of recoveries, blaming its lease.
    """
    run = claim.run
    try:
        loads(run.args)
    except ValueError as exc:
        raise Undecodable(store.key_of(run.run_id, "run"), f"field 'args': {_why(exc)}") from exc
    if run.retry:
        try:
            RetryPolicy.from_json(run.retry)
        except Exception as exc:
            raise Undecodable(
                store.key_of(run.run_id, "run"), f"field 'retry': {_why(exc)}"
            ) from exc
    if claim.lineage:
        _records(claim.lineage, store, run.run_id, "lineage")
    return _records(claim.journal, store, run.run_id, "journal")


def _records(raw: dict[str, str], store: Store, run_id: str, part: str) -> Journal:
    try:
        return Journal.from_raw(raw)
    except Exception as exc:
        # one parse for all records failed: find the one to name (rare; any order)
        key = store.key_of(run_id, part)
        for step, text in raw.items():
            try:
                Record.from_json(text)
            except Exception as bad:
                raise Undecodable(key, f"entry {step!r:.80}: {_why(bad)}") from bad
        raise Undecodable(key, _why(exc)) from exc


async def fail(store: Store, clock: Clock, damaged: Damaged) -> None:
    """Fail a damaged run (reason ``corrupt_record``) and log it; a store error is
    logged too (the run is found again by a later claim, tick or repair pass)."""
    run_id, what = damaged.run_id, f"{damaged.key}: {damaged.detail}"
    error = dumps(converter.unstructure(corrupt_error(run_id, damaged.key, damaged.detail)))
    try:
        done = await store.quarantine(run_id, damaged.fence, clock.time(), error)
    except Exception:
        log.exception("run %s: damaged stored data (%s); failing it failed", run_id, what)
        return
    if done:
        log.error(
            "run %s: damaged stored data (%s); failed with reason corrupt_record", run_id, what
        )
    else:
        log.error(
            "run %s: damaged stored data (%s); not failed: it has ended, is gone or leased "
            "elsewhere, or its record is not a hash (then repair or delete it by hand: "
            "docs/operations.md#damaged-runs)", run_id, what,
        )  # fmt: skip


def unavailable(store: Store, error: BaseException) -> bool:
    """Whether `error` from a store call means the store is out of reach now (a
    store that cannot tell: every error counts as an outage, as before)."""
    check = getattr(store, "is_unavailable", None)
    return True if check is None else bool(check(error))
