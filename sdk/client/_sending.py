"""`Client.send_event`: deliver an event to the runs waiting for it, and start
the ``@flow(on_event=...)`` flows it triggers (see `sdk.model._events`)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sdk._core._checks import check_id, check_optional_id
from sdk._core._serde import dumps
from sdk.client._clientbase import ClientBase, RunHandle
from sdk.errors import Forbidden, RunNotFound
from sdk.model._events import check_event_data, event_mailbox, json_data, run_id_for, tokens_for
from sdk.store import EventDelivered, EventType, Refused

if TYPE_CHECKING:
    from sdk._core._types import RunOptions

__all__ = ["EventSending"]

log = logging.getLogger("steadyflow.client")


class EventSending(ClientBase):
    """The part of `Client` that sends events."""

    if TYPE_CHECKING:

        async def _start(
            self, flow: Callable[..., Any] | str, args: tuple[Any, ...], kwargs: dict[str, Any],
            *, run_id: str | None, priority: int = 0, queue: str | None = None,
            tenant_id: str | None = None, options: RunOptions | None = None,
            cause: dict[str, Any] | None = None,
        ) -> tuple[RunHandle, bool]: ...  # fmt: skip

    async def send_event(
        self, name: str, data: Any = None, *, event_id: str | None = None,
        actor: str | None = None,
    ) -> list[str]:  # fmt: skip
        """Send the event `name`: deliver it to every run whose ``wait_for_event(name,
        match=...)`` is listening with a filter `data` satisfies, and start one run
        of each ``@flow(on_event=name)`` flow this client's registry knows.

        It reads the filters in use for `name` and the runs listening with the
        ones `data` satisfies (one round trip per partition each), then
        delivers to each of those runs in a call of its own (concurrently). A
        wait that began after the event was sent does not get it.

        Args:
            name: the event's name.
            data: its data: a JSON object (field -> value; ``wait_for_event``
                filters match its top-level fields) or None. Anything else (a
                string, a number, a list) no filter could match: `InvalidArgument`.
            event_id: de-duplicates: an event id reaches each listening wait at
                most once, and starts each ``on_event`` flow at most once (run id
                ``f"{flow name}:{event_id}"``), so sending it again (a retried
                webhook, or a send cut short by a crash) delivers only what the
                first send did not. Default: a new random id.
            actor: who sends; required with an authorizer, which is asked for
                ``send_event`` on each run the event would reach (a refused run
                does not get it and logs ``auth.denied``).

        Returns:
            The ids of the runs this call delivered the event to (sorted), then
            of the runs it started. A repeated event id returns only what is new.

        Example::

            await client.send_event("payment.succeeded", {"order_id": "o-42", "amount": 30},
                                    event_id=webhook_delivery_id)
        """
        check_id(name, "send_event(): name")
        eid = check_optional_id(event_id, "send_event(): event_id") or str(uuid.uuid4())
        check_optional_id(actor, "send_event(): actor")
        if self.authorizer is not None and actor is None:
            raise Forbidden(f"send_event({name!r}) needs an actor (an authorizer is set)")
        value = json_data(data, self.serializer, f"data of event {name!r}")
        check_event_data(name, value)
        payload = dumps(value)
        self.serializer.check_size(payload, f"data of event {name!r}")
        # the flows it starts are checked (their run ids) before anything is written
        triggered = [
            (fd, check_id(run_id_for(fd.name, eid), f"run id for flow {fd.name!r}"))
            for fd in sorted(self.registry.flows().values(), key=lambda f: f.name)
            if fd.on_event == name
        ]
        event_data = dumps({"name": name, "event_id": eid, "actor": actor})
        tokens = tokens_for(name, value, await self.store.event_shapes(name))
        listeners = await self.store.event_listeners(tokens)
        now = self.clock.time()

        async def deliver(token: str, run_id: str) -> str | None:
            if not await self._may_send(actor, run_id):
                return None
            reply = await self.store.deliver_event(
                run_id, token, event_mailbox(token), payload, f"~event:{token}:{eid}",
                now=now, event_data=event_data,
            )  # fmt: skip
            if isinstance(reply, Refused):  # a damaged run does not stop the others
                log.warning("event %r not delivered to run %r: %s", name, run_id, reply)
                return None
            return run_id if reply is EventDelivered.DELIVERED else None

        done = await asyncio.gather(*(deliver(t, r) for t, r in listeners))
        delivered = sorted({r for r in done if r is not None})
        started = []
        for fd, run_id in triggered:
            cause = {"event": name, "event_id": eid, "actor": actor}
            _, created = await self._start(fd.name, (value,), {}, run_id=run_id, cause=cause)
            if created:
                started.append(run_id)
        return delivered + started

    async def _may_send(self, actor: str | None, run_id: str) -> bool:
        """Whether the authorizer (if any) lets `actor` send events to the run."""
        if self.authorizer is None or actor is None:
            return True
        try:
            stored = await self._stored(run_id)
        except RunNotFound:
            return False
        if self.authorizer.can(actor, "send_event", self._record(stored)):
            return True
        await self.store.audit(
            run_id, EventType.AUTH_DENIED, self.clock.time(),
            dumps({"actor": actor, "action": "send_event"}),
        )  # fmt: skip
        return False
