"""The Redis store's calls that steer a run from outside: signal, audit,
cancel, resume, delete (each one script on the run's partition; a deletion
also writes its entry of the partition's audit log, `stores._audit`)."""

from __future__ import annotations

from sdk.store import EventType, Mailbox, Refused, Rewind
from stores._codec import mailbox_name, num, refused
from stores._storecore import StoreCore

__all__ = ["RunControl"]


class RunControl:
    """`signal`, `audit`, `cancel`, `resume`, `delete`."""

    def __init__(self, core: StoreCore) -> None:
        self._core = core
        self._keys = core.keys

    async def signal(
        self,
        run_id: str,
        mailbox: Mailbox,
        payload: str,
        dedup_id: str | None,
        *,
        now: float = 0.0,
        event_data: str = "",
        decision_by: str | None = None,
    ) -> bool | Refused:
        k = self._keys
        reply = await self._core.call(
            "signal",
            [k.run(run_id)],
            [k.base_of(run_id), run_id, mailbox_name(mailbox), payload, dedup_id or "",
             num(now), event_data, "1" if decision_by is not None else "", decision_by or ""],
        )  # fmt: skip
        no = refused(reply)
        return no if no is not None else bool(reply[0] == 1)

    async def audit(
        self, run_id: str, event_type: EventType, now: float, event_data: str
    ) -> Refused | None:
        k = self._keys
        reply = await self._core.call(
            "audit",
            [k.run(run_id)],
            [k.base_of(run_id), run_id, str(event_type), num(now), event_data],
        )
        return refused(reply)

    async def cancel(
        self,
        run_id: str,
        reason: str,
        now: float,
        *,
        event_data: str = "",
        grace_until: float | None = None,
        request_data: str = "",
        forced_data: str = "",
        forcing_data: str = "",
    ) -> Refused | None:
        k = self._keys
        args = [k.base_of(run_id), run_id, reason, num(now), event_data]
        if grace_until is not None:
            args += [num(grace_until), request_data, forced_data, forcing_data]
        reply = await self._core.call("cancel", [k.run(run_id)], args)
        return refused(reply)

    async def resume(
        self,
        run_id: str,
        discard_key: str | None,
        *,
        now: float = 0.0,
        event_data: str = "",
        version: str | None = None,
        rewind: Rewind | None = None,
    ) -> Refused | None:
        k = self._keys
        args = [k.base_of(run_id), run_id, discard_key or "", num(now), event_data, version or ""]
        if rewind is not None:
            args += [str(rewind.fence), str(rewind.checkpoint_id or ""), *rewind.keys]
        reply = await self._core.call("resume", [k.run(run_id), k.journal(run_id)], args)
        return refused(reply)

    async def delete(
        self, run_id: str, now: float, *, event_data: str = "", audit_data: str = ""
    ) -> Refused | None:
        k = self._keys
        reply = await self._core.call(
            "delete",
            [k.run(run_id)],
            [k.base_of(run_id), run_id, num(now), event_data, audit_data],
        )
        return refused(reply)
