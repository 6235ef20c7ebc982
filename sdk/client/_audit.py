"""Reading the deployment's audit log: `AuditTrail`, the part of `Client` behind
`Client.audit_log`. What writes it: `Store.delete` (each deletion),
`sdk.client._schedclient` (schedule operations) and `ClientCore.authorize_new`
(refused starts and schedule operations)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sdk._core._checks import check_count, check_id, show
from sdk._core._serde import loads
from sdk._core._types import AuditEntry
from sdk.client._runs import utc
from sdk.errors import InvalidArgument
from sdk.store import AuditLog, StoredAuditEntry

if TYPE_CHECKING:
    from sdk.client._clientcore import ClientCore

__all__ = ["AuditTrail"]


class AuditTrail:
    """`Client.audit_log`."""

    __slots__ = ("_core",)

    def __init__(self, core: ClientCore) -> None:
        self._core = core

    async def audit_log(self, cursor: str | None, limit: int, refusals: bool) -> list[AuditEntry]:
        if cursor is not None:
            check_id(cursor, "audit_log(): cursor")
        check_count(limit, "audit_log(): limit")
        if not isinstance(refusals, bool):
            raise InvalidArgument(f"audit_log(): refusals must be a bool, got {show(refusals)}")
        log = AuditLog.REFUSALS if refusals else AuditLog.CHANGES
        try:
            found = await self._core.store.audit_log(log, cursor, limit)
        except ValueError as exc:  # the store's word for a cursor that is not one of its ids
            # (a damaged entry is CorruptData: a CorruptRecord, not a ValueError)
            raise InvalidArgument(f"audit_log(): cursor {show(cursor)} is not an entry id "
                                  f"({exc})") from None  # fmt: skip
        return [_entry(e) for e in found]


def _entry(stored: StoredAuditEntry) -> AuditEntry:
    data: Any = None
    if stored.data is not None:
        try:
            data = loads(stored.data)
        except ValueError:  # kept as it is: an audit entry is never hidden for its form
            data = stored.data
    actor = data.get("actor") if isinstance(data, dict) else None
    return AuditEntry(
        entry_id=stored.entry_id,
        type=stored.type,
        at=utc(stored.at),
        actor=actor if isinstance(actor, str) else None,
        run_id=stored.run_id,
        schedule_id=stored.schedule_id,
        data=data,
    )
