"""An activation's writes: each carries the run's fencing token, and a worker
whose lease was lost (expired and taken over, the run canceled) writes nothing.

`record` is the one write of a completed step (a step's cost: keep it lean);
`record_many` journals a batch (the handles of a fan-out's children) in one
round trip, a pipeline of the same ``record`` script, one per record.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from sdk.store import (
    Consumed,
    CorruptData,
    EventWatch,
    Mailbox,
    NewIntent,
    Parked,
    Refusal,
    Refused,
    RunStatus,
    StepEvent,
)
from stores import _codec, _decode
from stores._codec import num
from stores._storecore import StoreCore

__all__ = ["FencedWrites"]


class FencedWrites:
    """`record`, `record_many`, `mark`, `consume`, `suspend`, `finish`,
    `continue_as_new`, `release`."""

    def __init__(self, core: StoreCore) -> None:
        self._core = core
        self._keys = core.keys
        # `record`'s key names per run (base, (run, journal)): built once, not per step
        self._record_keys: dict[str, tuple[str, tuple[str, str]]] = {}

    async def record(
        self,
        run_id: str,
        fence: int,
        key: str,
        record: str,
        *,
        now: float = 0.0,
        event: StepEvent | None = None,
        intents: Sequence[NewIntent] = (),
    ) -> bool:
        names = self._record_keys.get(run_id)
        if names is None:
            if len(self._record_keys) >= 4096:
                self._record_keys.clear()
            k = self._keys
            names = self._record_keys[run_id] = (
                k.base_of(run_id),
                (k.run(run_id), k.journal(run_id)),
            )
        etype, edata, ecp = ("", "", "") if event is None else (
            event.type._value_, event.data, event.checkpoint._value_ if event.checkpoint else ""
        )  # fmt: skip
        args = [names[0], run_id, str(fence), key, record, num(now), etype, edata, ecp]
        if not intents:
            # the runner directly (what `StoreCore.call` does): one coroutine less per step
            core = self._core
            reply = await core.runner.run(core.scripts["record"], names[1], args)
            if reply.__class__ is list:  # an error reply: damaged data, or a bad argument
                _decode.corrupt(run_id, reply)
            return bool(reply == 1)
        for intent in intents:
            # the end of the intent's event data; the script puts its id first
            tail = json.dumps(
                {"channel": intent.channel, "idempotency_key": intent.idempotency_key},
                separators=(",", ":"), ensure_ascii=False,
            )  # fmt: skip
            args += [intent.channel, intent.body, tail[1:]]
        args.append(str(len(intents)))  # `record`'s arguments, then the intents and their count
        reply = await self._core.call("record_out", names[1], args)
        return bool(_decode.corrupt(run_id, reply) == 1)

    async def record_many(
        self,
        run_id: str,
        fence: int,
        records: Sequence[tuple[str, str]],
        *,
        now: float,
        events: Sequence[StepEvent | None],
    ) -> bool:
        k = self._keys
        keys = [k.run(run_id), k.journal(run_id)]
        base, fenced, at = k.base_of(run_id), str(fence), num(now)
        calls = []
        for (key, record), ev in zip(records, events, strict=True):
            etype, edata, ecp = ("", "", "") if ev is None else (
                ev.type.value, ev.data, ev.checkpoint.value if ev.checkpoint else ""
            )  # fmt: skip
            calls.append((keys, [base, run_id, fenced, key, record, at, etype, edata, ecp]))
        written = True
        for reply in await self._core.pipelined("record", calls):
            if reply.__class__ is list:  # an error reply: damaged data, or a bad argument
                _decode.corrupt(run_id, reply)
            written = written and reply == 1
        return written

    async def mark(self, run_id: str, fence: int, key: str, now: float) -> bool:
        k = self._keys
        ok = await self._core.call(
            "mark", [k.run(run_id)], [k.base_of(run_id), run_id, str(fence), key, num(now)]
        )
        return bool(_decode.corrupt(run_id, ok) == 1)

    async def consume(
        self,
        run_id: str,
        fence: int,
        key: str,
        mailbox: Mailbox,
        now: float,
        deadline: float | None,
        record: str,
        timeout_record: str,
        *,
        watch: EventWatch | None = None,
    ) -> tuple[Consumed, str | None]:
        k = self._keys
        args = [
            k.base_of(run_id), run_id, str(fence), key, _codec.mailbox_name(mailbox),
            num(now), "" if deadline is None else num(deadline),
            _codec.splice_prefix(record), timeout_record,
        ]  # fmt: skip
        if watch is not None:
            args += [watch.token, watch.event, watch.shape]
        reply = await self._core.call("consume", [k.run(run_id), k.journal(run_id)], args)
        code = int(_decode.corrupt(run_id, reply)[0])
        if code == -1:
            return Consumed.FENCED, None
        if code == 1:
            if _decode.unreadable(reply[1]):
                raise CorruptData(
                    run_id, self._core.key("mailbox", run_id) + ":" + _codec.mailbox_name(mailbox),
                    f"a signal's payload holds bytes that are not UTF-8: {_decode.show(reply[1])}",
                )  # fmt: skip
            return Consumed.SIGNAL, reply[1]
        return (Consumed.TIMEOUT if code == 2 else Consumed.EMPTY), None

    async def suspend(
        self,
        run_id: str,
        fence: int,
        now: float,
        deadline: float | None,
        status: RunStatus,
        records: Sequence[tuple[str, str]],
        mailboxes: Sequence[Mailbox],
        *,
        approvers: Mapping[Mailbox, Sequence[str]] | None = None,
        sticky: float | None = None,
        waiting_on: str | None = None,
    ) -> Parked:
        k = self._keys
        flat = [x for pair in records for x in pair]
        boxes = [_codec.mailbox_name(box) for box in mailboxes]
        allowed = [
            x for box, who in (approvers or {}).items()
            for x in (_codec.mailbox_name(box), "\n".join(who))
        ]  # fmt: skip
        reply = await self._core.call(
            "suspend",
            [k.run(run_id), k.journal(run_id)],
            [
                k.base_of(run_id), run_id, str(fence), num(now),
                "" if deadline is None else num(deadline), status.value,
                str(len(records)), *flat, str(len(boxes)), *boxes,
                "" if sticky is None else num(sticky), waiting_on or "", *allowed,
            ],
        )  # fmt: skip
        _decode.corrupt(run_id, reply)
        if reply == -1:
            return Parked.FENCED
        return Parked.PARKED if reply == 1 else Parked.READY

    async def finish(
        self,
        run_id: str,
        fence: int,
        status: RunStatus,
        now: float,
        *,
        result: str | None = None,
        result_type: str | None = None,
        error: str | None = None,
        reason: str | None = None,
        retention: float | None = None,
        delete_until: float | None = None,
    ) -> Refused | None:
        k = self._keys
        given = {"result": result, "result_type": result_type, "error": error, "reason": reason}
        flat = [x for name, value in given.items() if value is not None for x in (name, value)]
        reply = await self._core.call(
            "finish",
            [k.run(run_id)],
            [
                k.base_of(run_id), run_id, str(fence), status.value, num(now), error or "",
                "" if delete_until is None else num(delete_until),
                "" if retention is None else num(retention), *flat,
            ],
        )  # fmt: skip
        if reply == -1:
            return Refused(Refusal.FENCED)
        if isinstance(reply, list) and reply[1] == "corrupt":
            _decode.corrupt(run_id, reply)  # an activation's write: raised, not refused
        return _codec.refused(reply)

    async def continue_as_new(
        self, run_id: str, fence: int, now: float, args: str, event_data: str, archive_data: str
    ) -> Refused | None:
        k = self._keys
        reply = await self._core.call(
            "continue",
            [k.run(run_id), k.journal(run_id)],
            [k.base_of(run_id), run_id, str(fence), num(now), args, event_data, archive_data],
        )
        if reply == -1:
            return Refused(Refusal.FENCED)
        if isinstance(reply, list) and reply[1] == "corrupt":
            _decode.corrupt(run_id, reply)  # an activation's write: raised, not refused
        return _codec.refused(reply)

    async def release(self, run_id: str, fence: int) -> None:
        k = self._keys
        reply = await self._core.call(
            "release", [k.run(run_id)], [k.base_of(run_id), run_id, str(fence)]
        )
        _decode.corrupt(run_id, reply)
