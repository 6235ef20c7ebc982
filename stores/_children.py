"""Child flows: starting many runs, and writing many journal records, in one round trip.

A flow that fans out (``asyncio.gather`` of 1,000 ``run_child`` calls) starts
its children in one batch and journals their handles in another: each is a
pipeline of the same scripts a single start (``start``) and a single record
(``record``) run, so each run's write stays one atomic script on its own
partition (a child may live on another partition, or another cluster node,
than its parent), and the batch costs one round trip per pipeline (on Redis
Cluster, one per node, concurrently) instead of one per child.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoScriptError, RedisError, TryAgainError

from sdk.store._records import NewRun, StartOutcome, StepEvent
from sdk.store._statuses import RunStatus
from stores import _codec, _decode, _migrating
from stores._base import RedisBase
from stores._codec import num
from stores._redispy import strict_args

__all__ = ["Children"]


class Children(RedisBase):
    """`Store.create_runs` and `Store.record_many` (see `sdk.store`)."""

    async def _pipelined(
        self, name: str, calls: Sequence[tuple[list[str], list[str]]]
    ) -> list[Any]:
        """One script per call, sent as one pipeline (one round trip): the replies in
        order. A server that lacks the script (flushed, restarted) ran none of them:
        it is loaded and those calls are sent again. On a cluster, a call answered
        with an error (its slot moving: ASK, TRYAGAIN) is sent again alone, the way
        every script call is retried (`stores._migrating`): it wrote nothing."""
        script = self._scripts[name]
        todo = list(range(len(calls)))
        replies: list[Any] = [None] * len(calls)
        alone: list[int] = []
        for _ in range(2):
            async with self.client.pipeline(transaction=False) as pipe:
                for i in todo:
                    # on a cluster, with the probe key: whole or not at all while its slot moves
                    keys, args = _migrating.declared(calls[i][0], self.cluster), calls[i][1]
                    # as a raw command: redis-py's cluster pipeline refuses its evalsha()
                    # method, but routes EVALSHA by its first key (one round trip per node)
                    pipe.execute_command(
                        "EVALSHA", script.sha, len(keys), *strict_args(keys), *strict_args(args)
                    )
                try:
                    got: list[Any] = await pipe.execute(raise_on_error=False)
                except Exception:
                    if not self.cluster:
                        raise
                    # an older redis-py's cluster pipeline raises on a moving
                    # slot (AskError, or an AttributeError in redis-py 5.3)
                    # instead of answering per call: each goes alone
                    # (a call that did run is run again: starts and records are
                    # idempotent by run id and step key)
                    got = [TryAgainError("pipeline refused")] * len(todo)
            missing = []
            for i, reply in zip(todo, got, strict=True):
                if isinstance(reply, NoScriptError):
                    missing.append(i)
                elif isinstance(reply, RedisError):  # a moving slot: ClusterError too
                    if not self.cluster:
                        raise reply
                    alone.append(i)
                replies[i] = reply
            if not missing:
                for i in alone:
                    replies[i] = await self._call(name, *calls[i])
                return replies
            await self.client.script_load(script.script)
            todo = missing
        raise NoScriptError(f"script {name!r} could not be loaded")

    async def create_runs(
        self, news: Sequence[NewRun], event_data: Sequence[str]
    ) -> list[StartOutcome]:
        k = self.keys
        calls = [
            ([k.run(n.run_id)],
             [k.base_of(n.run_id), n.run_id, n.args_hash, data, "", *_codec.run_fields(n)])
            for n, data in zip(news, event_data, strict=True)
        ]  # fmt: skip
        out = []
        for n, reply in zip(news, await self._pipelined("start", calls), strict=True):
            code, status = _decode.corrupt(n.run_id, reply)
            out.append(
                StartOutcome(created=code == 1, status=RunStatus(status), conflict=code == -1)
            )
        return out

    async def record_many(
        self,
        run_id: str,
        fence: int,
        records: Sequence[tuple[str, str]],
        *,
        now: float,
        events: Sequence[StepEvent | None],
    ) -> bool:
        k = self.keys
        keys = [k.run(run_id), k.journal(run_id)]
        base, fenced, at = k.base_of(run_id), str(fence), num(now)
        calls = []
        for (key, record), ev in zip(records, events, strict=True):
            etype, edata, ecp = ("", "", "") if ev is None else (
                ev.type.value, ev.data, ev.checkpoint.value if ev.checkpoint else ""
            )  # fmt: skip
            calls.append((keys, [base, run_id, fenced, key, record, at, etype, edata, ecp]))
        written = True
        for reply in await self._pipelined("record", calls):
            if reply.__class__ is list:  # an error reply: damaged data, or a bad argument
                _decode.corrupt(run_id, reply)
            written = written and reply == 1
        return written
