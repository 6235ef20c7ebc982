"""``memory://`` connections that hand a script call to the fake server as its fields.

A memory:// store's script calls reach its server as their fields: the lane
(`stores._redispy.Lane`) asks the connection class to `pack_fields` a
command, and `send_packed_command` hands them to the fake socket's command
processing (``_process_command``, what its RESP parser calls with the fields
it read), so neither side frames nor parses RESP. A command with an argument
of another type, a connection that is not connected or is due a health
check, or whose socket is paused, killed or cut off goes through RESP as
before (with its errors). Replies were never RESP: fakeredis queues them as
objects.

Part of the adapter to fakeredis's internals (`testing._fakelua`, whose
`memory_store` uses `MemoryConnection` when `DIRECT`).
"""

from __future__ import annotations

import inspect
from typing import Any

try:
    from fakeredis._clients._async import FakeAsyncRedisConnection
except ImportError:  # fakeredis before 2.40 (its commands then go as RESP: see `direct`)
    from fakeredis.aioredis import FakeAsyncRedisConnection

from stores._redispy import _packed, pack

__all__ = ["DIRECT", "Fields", "MemoryConnection"]


class Fields(list[bytes]):
    """One command's fields, for an in-process server's socket (no RESP)."""


class MemoryConnection(FakeAsyncRedisConnection):
    """A fakeredis connection that takes a command as its fields (see above)."""

    def pack_fields(self, args: tuple[Any, ...]) -> Any:
        fields = Fields()
        encoding = self.encoder.encoding
        for a in args:
            t = type(a)
            if t is bytes:
                fields.append(a)
            elif t is str:
                fields.append(a.encode(encoding, "strict"))  # as stores._redispy.pack
            elif t is int:
                fields.append(b"%d" % a)
            else:  # a float, a bool, another type: redis-py's packing (or error)
                return _packed(self, args)
        if b" " in fields[0]:  # "CONFIG GET": redis-py splits it
            return _packed(self, args)
        return fields

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        sock = self._sock if type(command) is Fields and self.is_connected else None
        if (
            sock is None
            or check_health
            or getattr(sock, "_paused", True)  # (True: a fakeredis without them)
            or getattr(sock, "_killed", True)
            or not sock._server.connected
        ):
            if type(command) is Fields:
                command = pack(tuple(command))
            await super().send_packed_command(command, check_health)
            return
        sock._process_command(command)


def direct() -> bool:
    """Whether this fakeredis's sockets process a command's fields as
    `MemoryConnection` expects (else memory:// speaks RESP to them)."""
    try:
        from fakeredis._socket import AsyncFakeSocket

        params = list(inspect.signature(AsyncFakeSocket._process_command).parameters)
        return params == ["self", "fields"]
    except Exception:
        return False


DIRECT = direct()
