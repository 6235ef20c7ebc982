"""Steering runs: signals, human decisions, cancel, resume, delete (`RunSteering`).

Each is checked, authorized (`ClientCore.authorize`, audited when refused) and
written with one store call; `Client` documents them.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from sdk._core._checks import check_id, check_name, check_optional_id, check_text, show
from sdk._core._clock import seconds
from sdk._core._serde import converter, dumps
from sdk._core._types import Decision, Reason, RunStatus
from sdk.client._handle import RunHandle
from sdk.client._rewind import read_rewind
from sdk.client._runs import cancel_run, raise_refused, refusal_error, utc
from sdk.errors import InvalidArgument, SerializationError
from sdk.store import Mailbox, Refusal, Refused

if TYPE_CHECKING:
    from datetime import timedelta

    from sdk.client._clientcore import ClientCore

__all__ = ["RunSteering"]

#: How often `resume` reads a canceled run again when it changed meanwhile (it was
#: resumed and canceled again between the read and the write).
_REREADS = 5


class RunSteering:
    """`Client.signal`, `approve`, `deny`, `cancel`, `resume` and `delete`."""

    __slots__ = ("_core",)

    def __init__(self, core: ClientCore) -> None:
        self._core = core

    async def signal(
        self, run_id: str, name: str, payload: Any, dedup_id: str | None, actor: str | None
    ) -> bool:
        core = self._core
        check_id(run_id, "run_id")
        check_name(name, "signal name")
        check_optional_id(dedup_id, "dedup_id")
        check_optional_id(actor, "actor")
        await core.authorize(actor, "signal", run_id)
        data = self._payload(payload, f"payload of signal {name!r}")
        event = {"name": name, "dedup_id": dedup_id, "actor": actor}
        # A connection retry can run the signal script twice; an id of our own
        # makes the second run a no-op. "Already seen" then means delivered.
        reply = await core.store.signal(
            run_id, Mailbox(name), dumps(data), dedup_id or f"~{uuid.uuid4().hex}",
            now=core.clock.time(), event_data=dumps(event),
        )  # fmt: skip
        if isinstance(reply, Refused):
            raise refusal_error(run_id, reply, what=name)
        return reply or dedup_id is None

    async def decide(
        self, run_id: str, name: str, approved: bool, actor: str, reason: str | None,
        payload: Any, action: str,
    ) -> bool:  # fmt: skip
        """Approve or deny (`action`) the human wait `name`."""
        core = self._core
        check_id(run_id, "run_id")
        check_id(name, "wait name")
        check_id(actor, f"{action}(): actor")
        check_text(reason, f"{action}(): reason", optional=True)
        await core.authorize(actor, action, run_id)
        data = self._payload(payload, f"payload of {action} {name!r}")
        decision = converter.unstructure(Decision(approved, actor, reason, data))
        event = {"name": name, "decision": action, "actor": actor, "reason": reason}
        # A fresh dedup id: a retried script run is a no-op, not a second decision.
        reply = await core.store.signal(
            run_id, Mailbox(name, human=True), dumps(decision), f"~{uuid.uuid4().hex}",
            now=core.clock.time(), event_data=dumps(event), decision_by=actor,
        )  # fmt: skip
        if isinstance(reply, Refused):
            raise refusal_error(run_id, reply, what=name)
        return True

    def _payload(self, payload: Any, what: str) -> Any:
        """A signal's or decision's payload as JSON data. `wait_for` returns it as
        JSON gives it back, so a value that JSON would change is refused."""
        data, tpath = self._core.serializer.encode(payload, None, what)
        if tpath is not None:
            raise SerializationError(
                f"{what}: a {tpath.replace('builtins:', '')} would reach wait_for() as "
                f"{type(data).__name__} {show(data, 60)}; send plain JSON data (dict, list, "
                "str, int, float, bool, None) and rebuild your type in the flow"
            )
        return data

    async def cancel(
        self, run_id: str, reason: str, actor: str | None, grace: float | timedelta
    ) -> None:
        core = self._core
        check_id(run_id, "run_id")
        check_text(reason, "cancel(): reason")
        check_optional_id(actor, "actor")
        secs = seconds(grace, "cancel(): grace")
        if secs < 0:
            raise InvalidArgument(f"cancel(): grace must not be negative, got {show(grace)}")
        await core.authorize(actor, "cancel", run_id)
        said = {"reason": reason, "actor": actor}
        refused = await cancel_run(core.store, run_id, reason, core.clock.time(), secs, said)
        raise_refused(run_id, refused)

    async def resume(
        self, run_id: str, force: bool, actor: str | None, version: str | None
    ) -> RunHandle:
        core = self._core
        check_id(run_id, "run_id")
        if not isinstance(force, bool):
            raise InvalidArgument(f"resume(): force must be a bool, got {show(force)}")
        check_optional_id(actor, "actor")
        check_optional_id(version, "resume(): version")
        authorized = await core.authorize(actor, "force_resume" if force else "resume", run_id)
        stored = authorized or await core.stored(run_id)
        discard = None
        err = core.record(stored).error
        if (
            stored.status is RunStatus.FAILED
            and err is not None
            and err.reason != Reason.NON_DETERMINISM
        ):
            discard = err.step_key
        said: dict[str, Any] = {"actor": actor, "from": stored.status.value, "force": force}
        if version is not None:
            said.update(version=version, from_version=stored.flow_version)
        for _ in range(_REREADS):
            rewind = None
            if stored.status is RunStatus.CANCELED:
                rewind = await read_rewind(core.store, run_id)
            refused = await core.store.resume(
                run_id, discard, now=core.clock.time(), event_data=dumps(said),
                version=version, rewind=rewind,
            )  # fmt: skip
            if refused is None or refused.why is not Refusal.CHANGED:
                break  # (changed: resumed and canceled again since it was read)
        raise_refused(run_id, refused)
        return RunHandle(core, run_id)

    async def delete(self, run_id: str, actor: str | None) -> None:
        core = self._core
        check_id(run_id, "run_id")
        check_optional_id(actor, "actor")
        stored = await core.authorize(actor, "delete", run_id) or await core.stored(run_id)
        said = {"reason": "deleted", "actor": actor}
        # the audit log's entry outlives the run: say what was deleted
        created = utc(stored.created_at).isoformat()
        kept = {**said, "flow": stored.flow, "status": stored.status.value,
                "tenant_id": stored.tenant_id, "created_at": created}  # fmt: skip
        refused = await core.store.delete(
            run_id, core.clock.time(), event_data=dumps(said), audit_data=dumps(kept)
        )
        raise_refused(run_id, refused)
