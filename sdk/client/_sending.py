"""`Client.send_event` (`EventSender`): deliver an event to the runs waiting for
it, and start the ``@flow(on_event=...)`` flows it triggers (see `sdk.model._events`)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any

from sdk._core._checks import check_id, check_new_run_id, check_optional_id
from sdk._core._serde import dumps
from sdk.client._runs import refusal_error
from sdk.errors import Forbidden, RunNotFound, SteadyflowError
from sdk.model._events import check_event_data, event_mailbox, json_data, run_id_for, tokens_for
from sdk.store import EventDelivered, EventType, Refusal, Refused

if TYPE_CHECKING:
    from sdk.client._clientcore import ClientCore
    from sdk.client._starting import RunStarter

__all__ = ["EventSender"]

log = logging.getLogger("steadyflow.client")


class EventSender:
    """`Client.send_event`; the flows an event starts are started by `starter`."""

    __slots__ = ("_core", "_starter")

    def __init__(self, core: ClientCore, starter: RunStarter) -> None:
        self._core = core
        self._starter = starter

    async def send_event(
        self, name: str, data: Any, event_id: str | None, actor: str | None
    ) -> list[str]:
        check_id(name, "send_event(): name")
        eid = check_optional_id(event_id, "send_event(): event_id") or str(uuid.uuid4())
        check_optional_id(actor, "send_event(): actor")
        core = self._core
        if core.authorizer is not None and actor is None:
            raise Forbidden(f"send_event({name!r}) needs an actor (an authorizer is set)")
        value = json_data(data, core.serializer, f"data of event {name!r}")
        check_event_data(name, value)
        payload = dumps(value)
        core.serializer.check_size(payload, f"data of event {name!r}")
        # the flows it starts are checked (their run ids) before anything is written
        triggered = [
            (fd, check_new_run_id(run_id_for(fd.name, eid), f"run id for flow {fd.name!r}"))
            for fd in sorted(core.registry.flows().values(), key=lambda f: f.name)
            if fd.on_event == name
        ]
        event_data = dumps({"name": name, "event_id": eid, "actor": actor})
        tokens = tokens_for(name, value, await core.store.event_shapes(name))
        listeners = await core.store.event_listeners(tokens)
        now = core.clock.time()

        async def deliver(token: str, run_id: str) -> str | None:
            if not await self._may_send(actor, run_id):
                return None
            reply = await core.store.deliver_event(
                run_id, token, event_mailbox(token), payload, f"~event:{token}:{eid}",
                now=now, event_data=event_data,
            )  # fmt: skip
            if isinstance(reply, Refused):
                if reply.why is Refusal.TOO_LARGE:  # too large for every run
                    too_large.append(refusal_error(run_id, reply, what=name))
                    return None
                # a damaged run, or one that holds its bound of messages
                # (MailboxFull), does not stop the others
                log.warning("event %r not delivered to run %r: %s", name, run_id,
                            refusal_error(run_id, reply))  # fmt: skip
                return None
            return run_id if reply is EventDelivered.DELIVERED else None

        too_large: list[SteadyflowError] = []
        done = await asyncio.gather(*(deliver(t, r) for t, r in listeners))
        if too_large:
            raise too_large[0]
        delivered = sorted({r for r in done if r is not None})
        started = []
        for fd, run_id in triggered:
            cause = {"event": name, "event_id": eid, "actor": actor}
            try:
                _, created = await self._starter.start(
                    fd.name, (value,), {}, run_id=run_id, cause=cause, actor=actor
                )
            except Forbidden:  # the authorizer refused `start` (audited): the others go on
                log.warning("event %r did not start flow %r: %r may not start it", name,
                            fd.name, actor)  # fmt: skip
                continue
            if created:
                started.append(run_id)
        return delivered + started

    async def _may_send(self, actor: str | None, run_id: str) -> bool:
        """Whether the authorizer (if any) lets `actor` send events to the run."""
        core = self._core
        if core.authorizer is None or actor is None:
            return True
        try:
            stored = await core.stored(run_id)
        except RunNotFound:
            return False
        if core.authorizer.can(actor, "send_event", core.record(stored)):
            return True
        await core.store.audit(
            run_id, EventType.AUTH_DENIED, core.clock.time(),
            dumps({"actor": actor, "action": "send_event"}),
        )  # fmt: skip
        return False
