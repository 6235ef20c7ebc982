"""Creating, reading and listing runs."""

from __future__ import annotations

import json

from sdk.store import RunStatus, StartOutcome, Store, StoredRun
from testing.conformance._support import (
    OK_BOX,
    OWNER,
    T0,
    TTL,
    async_checks,
    claim_ids,
    events_of,
    listed_under,
    new_run,
    seen,
    step_record,
    stored,
    tick,
)


@async_checks
class RunChecks:
    """`create_run`, `get_run`, `list_runs`, and what an unknown run id reads as."""

    async def test_create_run_creates_a_pending_run(self, store: Store) -> None:
        outcome = await store.create_run(new_run("r1", tenant_id="acme", priority=7, queue="mail"))

        assert outcome == StartOutcome(created=True, status=RunStatus.PENDING, conflict=False)
        run = await stored(store, "r1")
        assert (run.run_id, run.flow, run.status) == ("r1", "conformance.flow", RunStatus.PENDING)
        assert (run.queue, run.priority, run.tenant_id) == ("mail", 7, "acme")
        assert run.created_at == T0
        assert (run.started_at, run.finished_at, run.result, run.error) == (None,) * 4
        assert run.checkpoint_head == 0  # the first checkpoint is taken when it starts

    async def test_starting_a_run_id_again_with_the_same_arguments_reports_the_run(
        self, store: Store
    ) -> None:
        await store.create_run(new_run("r1"))
        await claim_ids(store)  # now running: the second start must report, not reset

        outcome = await store.create_run(new_run("r1", created_at=T0 + 5))

        assert outcome == StartOutcome(created=False, status=RunStatus.RUNNING, conflict=False)
        assert (await stored(store, "r1")).created_at == T0
        assert await claim_ids(store) == []  # not queued a second time

    async def test_starting_a_run_id_again_with_other_arguments_is_a_conflict(
        self, store: Store
    ) -> None:
        await store.create_run(new_run("r1", args='{"args":[1],"kwargs":{},"types":{}}'))
        before = await seen(store, "r1")

        outcome = await store.create_run(new_run("r1", args='{"args":[2],"kwargs":{},"types":{}}'))

        assert outcome == StartOutcome(created=False, status=RunStatus.PENDING, conflict=True)
        assert await seen(store, "r1") == before
        assert (await stored(store, "r1")).args == '{"args":[1],"kwargs":{},"types":{}}'

    async def test_starting_a_run_id_again_compares_the_argument_hash_not_the_text(
        self, store: Store
    ) -> None:
        # The engine hashes a call's identity: keyword order is not part of it.
        first = new_run("r1", args='{"args":[],"kwargs":{"a":1,"b":2},"types":{}}')
        await store.create_run(first)

        again = new_run(
            "r1", args='{"args":[],"kwargs":{"b":2,"a":1},"types":{}}', args_hash=first.args_hash
        )
        outcome = await store.create_run(again)

        assert outcome == StartOutcome(created=False, status=RunStatus.PENDING, conflict=False)
        assert (await stored(store, "r1")).args == first.args

    async def test_starting_a_run_id_again_with_another_flow_is_a_conflict(
        self, store: Store
    ) -> None:
        await store.create_run(new_run("r1", flow="a.flow"))

        outcome = await store.create_run(new_run("r1", flow="b.flow"))

        assert (outcome.created, outcome.conflict) == (False, True)
        assert (await stored(store, "r1")).flow == "a.flow"

    async def test_an_unknown_run_reads_as_absent_everywhere(self, store: Store) -> None:
        await store.create_run(new_run("known"))

        assert await store.get_run("nope") is None
        assert await store.get_tombstone("nope") is None
        assert await store.read_lineage("nope") is None
        assert await store.intents("nope") is None
        assert await store.events("nope", None, 10) == []
        assert await store.checkpoints("nope") == []
        assert await store.correlation(["nope"]) == {}

    async def test_arguments_come_back_verbatim(self, store: Store) -> None:
        args = (
            '{"args":[12345678901234567890,0.30000000000000004,[],{}],'
            '"kwargs":{"x":null,"é":"✓"},"types":{}}'
        )
        await store.create_run(new_run("r1", args=args))

        assert (await stored(store, "r1")).args == args
        (claim,) = await store.claim(OWNER, None, 1, T0, TTL)
        assert claim.run.args == args

    async def test_create_run_records_the_run_options(self, store: Store) -> None:
        versions = '{"capabilities":["pay"],"bindings":{"model":"v2"},"registry_ref":"d-3"}'
        retry = '{"max_attempts":4,"initial_interval":1.0}'
        await store.create_run(
            new_run(
                "r1", thread_id="case-7", trace_id="trace-1", environment="staging",
                versions=versions, policy_snapshot_id="pol-9", retry=retry,
                flow_version="2", tenant_id="acme",
            )
        )  # fmt: skip
        await store.create_run(new_run("r2"))

        run = await stored(store, "r1")
        assert (run.thread_id, run.trace_id, run.environment, run.policy_snapshot_id) == (
            "case-7", "trace-1", "staging", "pol-9",
        )  # fmt: skip
        assert (run.versions, run.retry, run.flow_version) == (versions, retry, "2")
        plain = await stored(store, "r2")
        assert plain.trace_id == "r2"  # no trace id given: its own run id
        assert (plain.thread_id, plain.versions, plain.retry, plain.flow_version) == (None,) * 4
        assert await store.correlation(["r1", "r2"]) == {
            "r1": ("trace-1", "acme"),
            "r2": ("r2", None),
        }

    async def test_list_runs_is_newest_first(self, store: Store) -> None:
        for i in range(5):
            await store.create_run(new_run(f"r{i}", created_at=T0 + i))

        listed = await store.list_runs(None, None, 100)

        assert [r.run_id for r in listed] == ["r4", "r3", "r2", "r1", "r0"]
        assert [r.run_id for r in await store.list_runs(None, None, 2)] == ["r4", "r3"]

    async def test_list_runs_filters_by_flow_and_status(self, store: Store) -> None:
        await store.create_run(new_run("a1", flow="flow.a", created_at=T0))
        await store.create_run(new_run("b1", flow="flow.b", created_at=T0 + 1))
        await store.create_run(new_run("a2", flow="flow.a", created_at=T0 + 2))
        assert await claim_ids(store, limit=1) == ["a1"]  # FIFO

        def ids(runs: list[StoredRun]) -> list[str]:
            return [r.run_id for r in runs]

        assert ids(await store.list_runs(None, "flow.a", 100)) == ["a2", "a1"]
        assert ids(await store.list_runs(RunStatus.PENDING, None, 100)) == ["a2", "b1"]
        assert ids(await store.list_runs(RunStatus.PENDING, "flow.a", 100)) == ["a2"]
        assert ids(await store.list_runs(RunStatus.RUNNING, None, 100)) == ["a1"]
        assert await store.list_runs(RunStatus.COMPLETED, None, 100) == []

    async def test_list_runs_pages_past_one_hundred(self, store: Store) -> None:
        for i in range(130):
            await store.create_run(new_run(f"r{i:03}", created_at=T0 + i))

        listed = await store.list_runs(None, None, 120)

        assert [r.run_id for r in listed] == [f"r{i:03}" for i in range(129, 9, -1)]

    async def test_list_runs_of_a_flow_finds_them_beyond_the_newest_hundred(
        self, store: Store
    ) -> None:
        await store.create_run(new_run("old-b", flow="flow.b", created_at=T0))
        for i in range(150):
            await store.create_run(new_run(f"a{i:03}", flow="flow.a", created_at=T0 + 1 + i))

        listed = await store.list_runs(None, "flow.b", 10)
        pending = await store.list_runs(RunStatus.PENDING, "flow.b", 10)

        assert [r.run_id for r in listed] == [r.run_id for r in pending] == ["old-b"]

    async def test_listing_by_status_follows_every_transition(self, store: Store) -> None:
        await store.create_run(new_run("r1"))
        assert await listed_under(store, "r1") == {RunStatus.PENDING}

        (claim,) = await store.claim(OWNER, None, 1, T0, TTL)
        assert await listed_under(store, "r1") == {RunStatus.RUNNING}

        await store.suspend(
            "r1", claim.run.fence, T0, None, RunStatus.WAITING_FOR_HUMAN, [], [OK_BOX]
        )
        assert await listed_under(store, "r1") == {RunStatus.WAITING_FOR_HUMAN}

        assert await store.signal("r1", OK_BOX, "true", None) is True
        assert await listed_under(store, "r1") == {RunStatus.RUNNING}

        await store.claim(OWNER, None, 1, T0 + 1, TTL)
        assert await tick(store, T0 + 1 + TTL) == (0, 1)  # the lease expired
        assert await listed_under(store, "r1") == {RunStatus.REPLAYING}

        (claim,) = await store.claim(OWNER, None, 1, T0 + 20, TTL)
        await store.record("r1", claim.run.fence, "a#1", step_record("a#1", 0, 1))
        await store.finish("r1", claim.run.fence, RunStatus.FAILED, T0 + 21, reason="x")
        assert await listed_under(store, "r1") == {RunStatus.FAILED}

        assert await store.resume("r1", "a#1") is None
        assert await listed_under(store, "r1") == {RunStatus.RUNNING}

        assert await store.cancel("r1", "enough", T0 + 30) is None
        assert await listed_under(store, "r1") == {RunStatus.CANCELED}

    async def test_listing_by_status_holds_every_run_once(self, store: Store) -> None:
        for i in range(6):
            await store.create_run(new_run(f"r{i}", created_at=T0 + i))
        claims = await store.claim(OWNER, None, 4, T0, TTL)  # r0..r3 running
        await store.finish("r0", claims[0].run.fence, RunStatus.COMPLETED, T0, result="1")
        await store.cancel("r4", "no", T0)

        by_status = {
            status: {r.run_id for r in await store.list_runs(status, None, 100)}
            for status in RunStatus
        }

        assert by_status[RunStatus.PENDING] == {"r5"}
        assert by_status[RunStatus.RUNNING] == {"r1", "r2", "r3"}
        assert by_status[RunStatus.COMPLETED] == {"r0"}
        assert by_status[RunStatus.CANCELED] == {"r4"}
        assert sum(len(ids) for ids in by_status.values()) == 6

    async def test_a_run_created_with_event_data_logs_run_created_with_it(
        self, store: Store
    ) -> None:
        data = '{"flow":"conformance.flow","queue":"billing","priority":-3}'

        await store.create_run(new_run("r1", queue="billing", created_at=T0 + 1), data)

        (event,) = await events_of(store, "r1")
        assert (event.run_id, event.type, event.at) == ("r1", "run.created", T0 + 1)
        assert (event.step_key, event.data) == (None, data)

    async def test_describe_says_what_the_store_is_in_json_for_logs(self, store: Store) -> None:
        described = store.describe()

        assert described and all(isinstance(key, str) for key in described)
        assert json.loads(json.dumps(described)) == described
