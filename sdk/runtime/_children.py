"""Child flows, as flow code starts them: `start_child`, `run_child`.

``start_child`` is a journaled call (key ``~child:<flow>#n``) that the current
runtime makes (`Runtime.start_child`): a replay returns the same `ChildHandle`
and starts nothing. ``await handle.result()`` is a durable wait for the child's
end (`Runtime.child_result`). How the Steadyflow engine starts children and
delivers their ends is told in `sdk.engine._children` and `sdk.worker._family`.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import attrs

from sdk._core._checks import check_id, check_new_run_id, show
from sdk._core._types import RunOptions
from sdk.client._starting import new_run
from sdk.errors import InvalidArgument
from sdk.model._registry import flow_def_of
from sdk.runtime._runtime import ChildHandle, current_runtime

if TYPE_CHECKING:
    from sdk.model._flowdef import FlowDef

__all__ = ["run_child", "start_child"]

_PARENT_CLOSE = ("cancel", "abandon")


def start_child(
    flow: Callable[..., Any] | str,
    *args: Any,
    run_id: str | None = None,
    priority: int = 0,
    queue: str | None = None,
    tenant_id: str | None = None,
    options: RunOptions | None = None,
    parent_close: str = "cancel",
    concurrency_key: str | None = None,
    start_at: datetime | None = None,
    start_in: float | timedelta | None = None,
    **kwargs: Any,
) -> Coroutine[Any, Any, ChildHandle]:
    """Start `flow` as a child of the current run; return its `ChildHandle`.

    Journaled: a replay returns the same handle and starts nothing. The child
    is a run of its own (any worker serving its flow runs it, on any partition)
    whose record names its parent (`RunRecord.parent_run_id`). The options are
    `Client.start`'s (their names are reserved: not passed to the flow).

    Args:
        flow: a ``@flow`` function, or the name of a flow defined elsewhere.
        run_id: the child's id. Default: the parent's id and this call's key
            (``"<parent>~child:<flow>#<n>"``), so a crash between starting the
            child and journaling it cannot start two. An id of your own must be
            just as deterministic (never random).
        priority, queue: as for `Client.start` (default: the flow's queue).
        tenant_id: default: the parent's tenant.
        options: `RunOptions`; the trace id defaults to the parent's, so a tree
            of runs shares one trace.
        parent_close: ``"cancel"`` (default): canceling the parent cancels this
            child if it has not ended; ``"abandon"``: the child runs on.
        concurrency_key, start_at, start_in: as for `Client.start` (a child is
            never refused by its queue's ``max_pending``: it is part of work
            already admitted).

    Example::

        handle = await start_child(charge_card, order_id, amount)
        receipt = await handle.result()
    """
    rt = current_runtime("start_child()")
    if parent_close not in _PARENT_CLOSE:
        raise InvalidArgument(
            f"start_child(): parent_close must be 'cancel' or 'abandon', got {show(parent_close)}"
        )
    if run_id is not None:
        check_new_run_id(run_id, "start_child(): run_id")
    fd = (
        rt.registry.find_flow(check_id(flow, "start_child(): flow"))
        if isinstance(flow, str)
        else _flow_def(flow)
    )
    target: FlowDef | str = fd if fd is not None else str(flow)
    info = rt.info
    opts = options
    if opts is None or opts.trace_id is None:
        opts = attrs.evolve(opts or RunOptions(), trace_id=info.trace_id)
    new = new_run(
        target, args, kwargs, rt.serializer, run_id=run_id or "", priority=priority,
        queue=queue, tenant_id=tenant_id if tenant_id is not None else info.tenant_id,
        options=opts, now=0.0, parent_run_id=info.run_id,
        tree_root_run_id=info.tree_root_run_id, abandon=parent_close == "abandon",
        concurrency_key=concurrency_key, start_at=start_at, start_in=start_in,
        queues=rt.registry.queues(),
    )  # fmt: skip
    return rt.start_child(new, fd, run_id is not None)  # (the default id: from the key)


async def run_child(flow: Callable[..., Any] | str, *args: Any, **kwargs: Any) -> Any:
    """Start `flow` as a child and wait for its result: ``(await start_child(...)).result()``.

    Takes `start_child`'s options. Example::

        totals = await asyncio.gather(*(run_child(price, item) for item in cart))
    """
    handle = await start_child(flow, *args, **kwargs)
    return await handle.result()


def _flow_def(flow: Callable[..., Any]) -> FlowDef:
    fd = flow_def_of(flow)
    if fd is None:
        raise InvalidArgument(f"start_child(): {show(flow)} is not a @flow function or a flow name")
    return fd
