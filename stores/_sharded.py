"""Sharded Pub/Sub on Redis Cluster over one connection per master node.

On a cluster the store's scripts ``SPUBLISH`` on sharded channels named like
the partition's keys (its hash tag): a wake-up token's doorbell, and the live
event feed. `ShardedSubscriber` ``SSUBSCRIBE``\\ s to any number of them over one
connection per master that owns one (not one per partition), so a worker's
wake-up waits hold about as many connections as the cluster has masters.

Why not redis-py's own: the oldest redis-py the project supports (5.3) has no
sharded Pub/Sub on its asyncio cluster client, and the newest has it with its
own reconnection rules. This module uses only what both have: the client's
slot map (``get_node_from_key``, and a fresh read of it:
`stores._redispy.reload_slot_map`), and connections of its own to a node, with
the node's connection class and settings (TLS, ACL user:
`stores._redispy.node_connection`), driven with ``send_command``/
``read_response``. What of them is redis-py's insides is in `stores._redispy`,
its one adapter (STYLE rule 15).

What happens when the cluster changes:
- a slot moves (resharding, failover): its node sends ``sunsubscribe`` for the
  slot's channels, or refuses ``SSUBSCRIBE`` with ``MOVED``; a node dies: its
  connection ends. The subscriber re-reads the slot map and subscribes those
  channels on the new owner, retrying (up to 1 s apart) until it can;
- messages published meanwhile were not received: once every channel is
  subscribed again, `on_gap` is called, so a waiter looks at what it waits
  for afresh instead of trusting the channel (see `stores._wakeups`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException, RedisError, ResponseError

from sdk._core._tasks import cancel_and_wait
from stores._redispy import node_connection, reload_slot_map

__all__ = ["ShardedSubscriber"]

log = logging.getLogger("steadyflow.store")

#: How long a subscription may take to be confirmed before it counts as an outage.
CONFIRM_TIMEOUT = 10.0


class _Link:
    """One connection to one node, subscribed to some channels."""

    def __init__(self, name: str, conn: Any) -> None:
        self.name = name
        self.conn = conn
        self.channels: set[str] = set()  # confirmed on this node
        # SSUBSCRIBE commands sent, oldest first: the channels still unconfirmed, and
        # who waits for them (replies come in order; an error reply is the oldest's)
        self.pending: deque[tuple[set[str], asyncio.Future[None]]] = deque()
        self.reader: asyncio.Task[None] | None = None


class ShardedSubscriber:
    """Sharded channels of one Redis Cluster, each on the master that owns its slot.

    Args:
        cluster: a redis-py asyncio cluster client (its slot map and node
            settings are used; its own connections are not).
        on_message: called with (channel, data) for every message, in order per node.
        on_gap: called once every channel is subscribed again after a node was
            lost or a slot moved (messages published in between were missed).
    """

    def __init__(
        self,
        cluster: RedisCluster,
        on_message: Callable[[str, str], Awaitable[None]],
        on_gap: Callable[[], None] | None = None,
    ) -> None:
        self._cluster = cluster
        self._on_message = on_message
        self._on_gap = on_gap
        self._wanted: set[str] = set()
        self._placed: dict[str, _Link] = {}
        self._links: dict[str, _Link] = {}
        self._lock = asyncio.Lock()
        self._repair: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()  # lost links being closed
        self._closed = False

    @property
    def connections(self) -> int:
        """How many node connections it holds."""
        return len(self._links)

    async def subscribe(self, channels: Iterable[str]) -> None:
        """Subscribe `channels` (those not yet subscribed); returns once every one
        is confirmed. Raises what the cluster answered if that fails three times
        (a node down and not yet replaced, say): an outage to its caller."""
        new = set(channels) - self._placed.keys()
        if not new:
            return
        self._wanted |= new
        last: BaseException | None = None
        for attempt in range(3):
            try:
                async with self._lock:
                    await self._settle()
                return
            except (RedisError, RedisClusterException, OSError, TimeoutError) as exc:
                last = exc
                await self._refresh()
                await asyncio.sleep(0.05 * 2**attempt)
        assert last is not None
        raise last

    async def close(self) -> None:
        """Close every connection; no callback runs after this returns."""
        self._closed = True
        if self._repair is not None:
            await cancel_and_wait(self._repair)
        links, self._links = list(self._links.values()), {}
        self._placed.clear()
        for link in links:
            await self._drop(link)
        await asyncio.gather(*self._closing, return_exceptions=True)

    # -- subscribing -----------------------------------------------------------

    async def _settle(self) -> None:
        """One pass: subscribe every wanted channel not subscribed, one ``SSUBSCRIBE``
        per slot (a command may not span slots), on the node the map names."""
        missing = sorted(self._wanted - self._placed.keys())
        if not missing or self._closed:
            return
        await self._cluster.initialize()  # the slot map (a no-op once known)
        by_slot: dict[tuple[str, int], list[str]] = {}
        nodes: dict[str, ClusterNode] = {}
        for channel in missing:
            node = self._cluster.get_node_from_key(channel)
            if node is None:
                raise RedisClusterException(f"no node serves the slot of {channel!r}")
            nodes[node.name] = node
            by_slot.setdefault((node.name, self._cluster.keyslot(channel)), []).append(channel)
        loop = asyncio.get_running_loop()
        waits: list[asyncio.Future[None]] = []
        for (name, _slot), group in by_slot.items():
            link = self._links.get(name) or await self._connect(nodes[name])
            confirmed: asyncio.Future[None] = loop.create_future()
            link.pending.append((set(group), confirmed))
            waits.append(confirmed)
            await link.conn.send_command("SSUBSCRIBE", *group)
        async with asyncio.timeout(CONFIRM_TIMEOUT):
            results = await asyncio.gather(*waits, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _connect(self, node: ClusterNode) -> _Link:
        # Its health check would PING and read the reply itself (the reader's);
        # a socket timeout would end a quiet subscription: neither here.
        conn = node_connection(node, health_check_interval=0, socket_timeout=None)
        await conn.connect()  # type: ignore[no-untyped-call]
        link = _Link(node.name, conn)
        self._links[node.name] = link
        link.reader = asyncio.create_task(self._read(link))
        return link

    async def _refresh(self) -> None:
        """Re-read the slot map (a node may be down: then it stays as it was)."""
        with contextlib.suppress(RedisError, RedisClusterException, OSError, TimeoutError):
            await reload_slot_map(self._cluster)

    # -- reading ---------------------------------------------------------------

    async def _read(self, link: _Link) -> None:
        try:
            while True:
                try:
                    # push_request: hiredis reports Pub/Sub replies as push
                    # notifications, which read_response otherwise skips
                    reply = await link.conn.read_response(push_request=True)
                except ResponseError as exc:  # an error reply, not a lost connection
                    if not link.pending:
                        raise
                    _, waiter = link.pending.popleft()  # MOVED: that slot is elsewhere now
                    if not waiter.done():
                        waiter.set_exception(exc)
                    continue
                if isinstance(reply, list) and len(reply) == 3:
                    await self._handle(link, _text(reply[0]), _text(reply[1]), reply[2])
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the connection is gone: its channels go elsewhere
            if not self._closed:
                log.warning("sharded subscription to %s lost (%r); re-subscribing", link.name, exc)
                self._lose(link, exc)

    async def _handle(self, link: _Link, kind: str, channel: str, data: Any) -> None:
        if kind == "smessage":
            await self._on_message(channel, _text(data))
        elif kind == "ssubscribe":
            link.channels.add(channel)
            self._placed[channel] = link
            if link.pending:
                group, waiter = link.pending[0]
                group.discard(channel)
                if not group:
                    link.pending.popleft()
                    if not waiter.done():
                        waiter.set_result(None)
        elif kind == "sunsubscribe":
            # The server dropped it: its slot moved to another node.
            link.channels.discard(channel)
            if self._placed.get(channel) is link:
                del self._placed[channel]
            self._kick()

    def _lose(self, link: _Link, error: BaseException) -> None:
        if self._links.get(link.name) is link:
            del self._links[link.name]
        for channel in link.channels:
            if self._placed.get(channel) is link:
                del self._placed[channel]
        for _, waiter in link.pending:
            if not waiter.done():
                waiter.set_exception(error)
        link.pending.clear()
        task = asyncio.get_running_loop().create_task(self._drop(link))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        self._kick()

    async def _drop(self, link: _Link) -> None:
        if link.reader is not None and link.reader is not asyncio.current_task():
            await cancel_and_wait(link.reader)  # a cancellation 3.11 loses ends it all the same
        with contextlib.suppress(Exception):
            await link.conn.disconnect()

    # -- repairing -------------------------------------------------------------

    def _kick(self) -> None:
        if not self._closed and (self._repair is None or self._repair.done()):
            self._repair = asyncio.get_running_loop().create_task(self._repairing())

    async def _repairing(self) -> None:
        """Subscribe what was lost on whichever node now owns it, until that works."""
        delay = 0.05
        while not self._closed:
            await self._refresh()
            try:
                async with self._lock:
                    await self._settle()
            except (RedisError, RedisClusterException, OSError, TimeoutError) as exc:
                log.debug("re-subscribing failed (%r); again in %.2fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            if self._wanted <= self._placed.keys():
                if self._on_gap is not None:
                    self._on_gap()
                return


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)
