"""The engine-internal outbox channels every worker serves: a child's end, a parent's cancel.

Every script that ends a run (finish, cancel, a run timeout, too many
recoveries, quarantine) queues an outbox intent on the ``~child`` channel when
the run has a parent, in the same atomic write (the intent lives in the
child's partition: no cross-partition write). Every worker's dispatcher serves
that channel (`internal_channels`): it reads the child's outcome and signals
the parent's mailbox with the dedup id ``~child:<child id>``, so a delivery
repeated after a crash adds nothing. A canceled run's ``~cascade`` intent
cancels its unfinished children (those not started with
``parent_close="abandon"``), and theirs cancel theirs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sdk._core._keys import CASCADE_CHANNEL, CHILD_CHANNEL
from sdk._core._retry import RetryPolicy
from sdk._core._serde import dumps
from sdk.client._runs import DEFAULT_CANCEL_GRACE, cancel_run
from sdk.client._treecopy import outcome_payload
from sdk.model._channels import ChannelDef, Intent
from sdk.store import EventType, Mailbox

if TYPE_CHECKING:
    from sdk._core._clock import Clock
    from sdk.store import Store

__all__ = ["cancel_children", "internal_channels", "tell_parent"]

_LISTED = 100_000  # the most children a cascade cancels (per canceled run)


def internal_channels(store: Store, clock: Clock) -> dict[str, ChannelDef]:
    """The channels every worker's dispatcher serves, whatever it is configured with."""

    async def child_ended(intent: Intent) -> None:
        await tell_parent(store, clock, intent.payload)

    async def parent_canceled(intent: Intent) -> None:
        await cancel_children(store, clock, intent.payload["run_id"])

    retry = RetryPolicy(max_attempts=1_000_000, initial_interval=0.5, max_interval=60.0)
    return {
        CHILD_CHANNEL: ChannelDef(CHILD_CHANNEL, child_ended, retry),
        CASCADE_CHANNEL: ChannelDef(CASCADE_CHANNEL, parent_canceled, retry),
    }


async def tell_parent(store: Store, clock: Clock, payload: dict[str, Any]) -> None:
    """Deliver a child's end to its parent's mailbox (once: a dedup id)."""
    parent, child = payload["parent"], payload["child"]
    stored = await store.get_run(child) or await store.get_tombstone(child)
    if stored is not None and not stored.status.is_terminal:
        return  # resumed meanwhile: it tells its parent again when it ends
    body = outcome_payload(stored, child)
    await store.signal(
        parent, Mailbox(payload["mailbox"], False), dumps(body), f"{CHILD_CHANNEL}:{child}",
        now=clock.time(), event_data=dumps({"child_run_id": child, "status": body["status"]}),
    )  # fmt: skip
    # refused (the parent ended, or is gone): nobody waits for the child any more


async def cancel_children(
    store: Store, clock: Clock, run_id: str, grace: float = DEFAULT_CANCEL_GRACE
) -> None:
    """Cancel the unfinished children of the canceled run `run_id` (not the abandoned):
    each gets a cancel request with `grace` seconds to clean up, as from `Client.cancel`."""
    parent = await store.get_run(run_id)
    why = f"parent run {run_id!r} was canceled"
    if parent is not None and parent.reason:
        why += f": {parent.reason}"
    for child in await store.list_runs(None, None, _LISTED, parent_run_id=run_id):
        if child.status.is_terminal or child.abandon:
            continue
        # a request, as Client.cancel makes: the child may clean up too
        said = {"reason": why, "actor": None, "parent_run_id": run_id}
        refused = await cancel_run(store, child.run_id, why, clock.time(), grace, said)
        if refused is None:
            await store.audit(
                run_id, EventType.CHILD_CANCELED, clock.time(),
                dumps({"child_run_id": child.run_id, "reason": why}),
            )  # fmt: skip
