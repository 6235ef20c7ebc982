"""Child flows: starting many runs, and writing many journal records, in one round trip.

A flow that fans out (``asyncio.gather`` of 1,000 ``run_child`` calls) starts
its children in one batch and journals their handles in another: each is a
pipeline of the same scripts a single start (``start``) and a single record
(``record``) run, so each run's write stays one atomic script on its own
partition (a child may live on another partition, or another cluster node,
than its parent), and the batch costs one round trip per pipeline instead of
one per child.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoScriptError, ResponseError

from stores import _codec, _decode
from stores._base import RedisBase
from stores._codec import num
from stores._lifecycle import RunStatus
from stores._records import NewRun, StartOutcome, StepEvent
from stores._redispy import strict_args

__all__ = ["Children"]


class Children(RedisBase):
    """`Store.create_runs` and `Store.record_many` (see `stores.protocol`)."""

    async def _pipelined(
        self, name: str, calls: Sequence[tuple[list[str], list[str]]]
    ) -> list[Any]:
        """One script per call, sent as one pipeline (one round trip): the replies in
        order. A server that lacks the script (flushed, restarted) ran none of them:
        it is loaded and those calls are sent again."""
        script = self._scripts[name]
        todo = list(range(len(calls)))
        replies: list[Any] = [None] * len(calls)
        for _ in range(2):
            async with self.client.pipeline(transaction=False) as pipe:
                for i in todo:
                    keys, args = calls[i]
                    pipe.evalsha(script.sha, len(keys), *strict_args(keys), *strict_args(args))
                got: list[Any] = await pipe.execute(raise_on_error=False)
            missing = []
            for i, reply in zip(todo, got, strict=True):
                if isinstance(reply, NoScriptError):
                    missing.append(i)
                elif isinstance(reply, ResponseError):
                    raise reply
                replies[i] = reply
            if not missing:
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
