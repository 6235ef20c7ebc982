"""`emit`: an outbound intent of the current step, written with its result.

A step calls `emit(channel, payload)`; the intent is kept with the attempt and
written by the same write as the step's result, so it exists exactly when
the step is recorded (a failed or crashed attempt's intents are dropped; a
replayed step does not emit again). A worker's dispatcher then delivers it to
the handler registered with `sdk.channel`, at least once, always with the
same idempotency key.
"""

from __future__ import annotations

from typing import Any

from sdk._core._serde import dumps
from sdk.errors import InvalidArgument, NotInRunError
from sdk.model._channels import check_name
from sdk.runtime._runtime import OUTSIDE, run_var, step_var
from sdk.store import NewIntent

__all__ = ["emit"]


def emit(channel: str, payload: Any = None, *, key: str | None = None) -> str:
    """Record an outbound intent (an email to send, a webhook to call) in the current step.

    The intent is stored atomically with the step's result: if the step
    attempt fails or its worker dies before recording, the intent is dropped
    with it (the re-executed step emits again); a step replayed from the
    journal does not emit at all. A worker with a handler for `channel` (see
    `channel`) then delivers it at least once, with the same idempotency key
    on every delivery.

    Args:
        channel: the handler's channel name.
        payload: any JSON-able value (the handler gets its JSON form).
        key: a name for the intent's idempotency key,
            ``f"{root run id}:{key}"``; default ``f"{step idempotency key}:{n}"``
            (n counts this step's emits from 1).

    Returns:
        The intent's idempotency key.

    Raises:
        NotInRunError: outside a step of a run.
        SerializationError: the payload is not JSON-able.

    Example::

        @step
        async def confirm(order_id: str, email: str) -> None:
            emit("email", {"to": email, "template": "confirmed", "order": order_id})
    """
    ctx = step_var.get()
    rt = run_var.get()
    if ctx is None or rt is None:
        raise NotInRunError(OUTSIDE.format(what="emit() (inside a @step)"))
    check_name(channel, "emit: channel")
    buffer = ctx._intents
    if key is None:
        idem = f"{ctx.idempotency_key}:{len(buffer) + 1}"
    else:
        check_name(key, "emit: key")
        root = ctx.idempotency_key.removesuffix(f":{ctx.key}")
        idem = f"{root}:{key}"
        if any(i.idempotency_key == idem for i in buffer):
            raise InvalidArgument(f"emit: key {key!r} was already used in step {ctx.key!r}")
    data, _ = rt.serializer.encode(payload, None, f"payload of intent {idem!r}")
    body = dumps(
        {
            "run_id": ctx.run_id, "step_key": ctx.key, "channel": channel, "payload": data,
            "idempotency_key": idem, "created_at": rt.time(),
        }
    )  # fmt: skip
    rt.emitting(f"~emit:{idem}", finished=False)  # a test kit may crash here: dropped
    buffer.append(NewIntent(channel, idem, body))
    rt.emitting(f"~emit:{idem}", finished=True)
    return idem
