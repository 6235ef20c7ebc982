"""The deployment's audit logs (`AuditStore`): what outlives a deleted run, what
schedule operations leave, and refusals kept apart from changes."""

from __future__ import annotations

import json

from sdk.store import AuditLog, EventType, NewSchedule, RunStatus, ScheduleOp, Store
from testing.conformance._support import NO_ARGS, T0, async_checks, start_and_claim

_SCHEDULE = NewSchedule(
    schedule_id="audited", flow="conformance.audited", queue="default", cron="0 * * * *",
    tz="UTC", args=NO_ARGS, overlap="skip", catchup=None, spec="spec-1", next_at=T0 + 3600,
)  # fmt: skip


async def _entries(store: Store, log: AuditLog = AuditLog.CHANGES) -> list[tuple[str, ...]]:
    """(type, run id, schedule id, data) of every entry of `log`, oldest first."""
    return [
        (e.type, e.run_id or "", e.schedule_id or "", e.data or "")
        for e in await store.audit_log(log, None, 1000)
    ]


@async_checks
class AuditChecks:
    """`append_audit`, `audit_log`, and the entries `delete`, `save_schedule` and
    `schedule_op` write."""

    async def test_a_deleted_run_leaves_its_deletion_in_the_audit_log(self, store: Store) -> None:
        claim = await start_and_claim(store, "r-audit")
        await store.finish("r-audit", claim.run.fence, RunStatus.COMPLETED, T0 + 1, result="1")

        said = json.dumps({"actor": "ada", "flow": "f"})
        assert await store.delete("r-audit", T0 + 2, event_data="{}", audit_data=said) is None

        assert await store.get_run("r-audit") is None
        [entry] = await store.audit_log(AuditLog.CHANGES, None, 10)
        assert (entry.type, entry.run_id, entry.at, entry.data) == (
            "run.deleted", "r-audit", T0 + 2, said,
        )  # fmt: skip
        assert entry.schedule_id is None
        assert await store.audit_log(AuditLog.REFUSALS, None, 10) == []

    async def test_a_deletion_without_audit_data_records_its_event_data(self, store: Store) -> None:
        claim = await start_and_claim(store, "r1")
        await store.finish("r1", claim.run.fence, RunStatus.COMPLETED, T0 + 1, result="1")
        await store.delete("r1", T0 + 2, event_data='{"actor":"ops"}')
        assert await _entries(store) == [("run.deleted", "r1", "", '{"actor":"ops"}')]

    async def test_a_refused_deletion_leaves_no_audit_entry(self, store: Store) -> None:
        await start_and_claim(store, "r1")
        assert await store.delete("r1", T0 + 2, audit_data='{"actor":"ops"}') is not None
        assert await store.delete("nope", T0 + 2, audit_data='{"actor":"ops"}') is not None
        assert await _entries(store) == []

    async def test_refusals_and_changes_are_kept_in_separate_logs(self, store: Store) -> None:
        await store.append_audit(
            AuditLog.REFUSALS, EventType.AUTH_DENIED, T0, '{"actor":"sam"}', run_id="r-new"
        )
        await store.append_audit(
            AuditLog.CHANGES, EventType.SCHEDULE_PAUSED, T0 + 1, '{"actor":"ada"}',
            schedule_id="s1",
        )  # fmt: skip
        assert await _entries(store, AuditLog.REFUSALS) == [
            ("auth.denied", "r-new", "", '{"actor":"sam"}')
        ]
        assert await _entries(store) == [("schedule.paused", "", "s1", '{"actor":"ada"}')]

    async def test_audit_entries_come_once_each_across_pages(self, store: Store) -> None:
        # run ids spread over the partitions of a store that has several
        for n in range(7):
            await store.append_audit(
                AuditLog.REFUSALS, EventType.AUTH_DENIED, T0 + n, f'{{"n":{n}}}', run_id=f"r{n}"
            )
        everything = await store.audit_log(AuditLog.REFUSALS, None, 100)
        assert sorted(e.run_id or "" for e in everything) == [f"r{n}" for n in range(7)]
        paged, cursor = [], None
        while page := await store.audit_log(AuditLog.REFUSALS, cursor, 3):
            assert len(page) <= 3
            paged += page
            cursor = page[-1].entry_id
        assert paged == everything
        assert await store.audit_log(AuditLog.REFUSALS, everything[-1].entry_id, 3) == []

    async def test_schedule_operations_with_audit_data_are_audit_entries(
        self, store: Store
    ) -> None:
        assert await store.save_schedule(_SCHEDULE, replace=False, now=T0, audit_data='{"a":1}')
        again = await store.save_schedule(_SCHEDULE, replace=False, now=T0, audit_data='{"a":2}')
        assert again == 0  # nothing written, nothing logged
        ops = (ScheduleOp.PAUSE, ScheduleOp.RESUME, ScheduleOp.TRIGGER, ScheduleOp.DELETE)
        for n, op in enumerate(ops):
            assert await store.schedule_op("audited", op, T0 + n, T0 + 7200, audit_data=f"[{n}]")
        assert not await store.schedule_op("audited", ScheduleOp.PAUSE, T0, audit_data="[9]")
        assert await _entries(store) == [
            ("schedule.created", "", "audited", '{"a":1}'),
            ("schedule.paused", "", "audited", "[0]"),
            ("schedule.resumed", "", "audited", "[1]"),
            ("schedule.triggered", "", "audited", "[2]"),
            ("schedule.deleted", "", "audited", "[3]"),
        ]

    async def test_schedule_operations_without_audit_data_leave_no_entry(
        self, store: Store
    ) -> None:
        await store.save_schedule(_SCHEDULE, replace=False, now=T0)
        await store.schedule_op("audited", ScheduleOp.TRIGGER, T0 + 1)
        await store.schedule_op("audited", ScheduleOp.DELETE, T0 + 2)
        assert await _entries(store) == []
