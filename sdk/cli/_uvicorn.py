"""uvicorn, the server of ``steadyflow serve``: the one module that reaches into it.

- `server` builds the server of an app: uvicorn's ``Config`` with the options
  ``serve`` takes (proxy headers, the addresses trusted to send them), its
  HTTP/1.1 protocol with deadlines, and `Server`'s signal handling.
- **Deadlines for slow clients.** uvicorn drops a connection that stays idle
  between requests (``timeout_keep_alive``), but nothing bounds a connection
  that opens and sends nothing, or sends a request's head (or body) a byte
  at a time: every byte resets its only timer, and no ASGI middleware sees a
  request before its head is complete. `guarded_h11` is uvicorn's h11
  protocol with two deadlines, counted from the connection's opening (its
  first request) or from the first byte of a later request: its head must be
  complete within ``header_timeout`` seconds, and the whole request (head and
  body) within ``read_timeout``; past either, the connection is closed. Once a
  request is received its answer takes as long as it takes (an event stream
  stays open). It uses of uvicorn's h11 protocol only the asyncio callbacks
  it overrides and its ``conn`` (the ``h11.Connection``, whose state is
  h11's public API), on every uvicorn release the ``http`` extra admits.
- `Server` stops on SIGTERM or SIGINT with exit status 0 (uvicorn's own
  handlers raise the signal again once it has shut down, so the process
  would end killed by it).

Imported when ``serve`` runs, never with `sdk.cli` (``import sdk.cli`` loads no
uvicorn).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Iterator
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["Server", "guarded_h11", "server"]

log = logging.getLogger("steadyflow.http")

#: Seconds a shutdown waits for open requests (event streams) before cutting them.
GRACEFUL_SHUTDOWN = 5


def server(
    app: Any,
    *,
    host: str,
    port: int,
    log_level: str,
    proxy_headers: bool,
    forwarded_allow_ips: str,
    header_timeout: float,
    read_timeout: float,
) -> Server:
    """The uvicorn server of `app` (serve it with ``await server(...).serve()``).

    Args:
        app: the ASGI app.
        host: address to listen on.
        port: port to listen on.
        log_level: uvicorn's log level name.
        proxy_headers: trust ``X-Forwarded-Proto`` and ``X-Forwarded-For`` from
            `forwarded_allow_ips` (the scheme and the client address of a request
            are then those the proxy saw).
        forwarded_allow_ips: comma-separated addresses (or ``*``) trusted to send them.
        header_timeout: seconds a client has to send a request's head.
        read_timeout: seconds a client has to send a whole request, head and body.
    """
    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, lifespan="off",
        http=guarded_h11(header_timeout, read_timeout),
        proxy_headers=proxy_headers, forwarded_allow_ips=forwarded_allow_ips,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN,
    )  # fmt: skip
    return Server(config)


def guarded_h11(header_timeout: float, read_timeout: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with deadlines for a request's head and for the whole
    request (the module says how they are counted)."""

    class GuardedH11(H11Protocol):
        _timer: asyncio.TimerHandle | None = None
        _started: float | None = None  # loop time the request in progress began
        _bound: float = 0.0  # the deadline armed: header_timeout or read_timeout

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._started = asyncio.get_running_loop().time()
            self._watch()

        def data_received(self, data: bytes) -> None:
            if self._started is None:  # the first byte of a request
                self._started = asyncio.get_running_loop().time()
            super().data_received(data)
            self._watch()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _watch(self) -> None:
            """Arm the deadline of the phase the request is in (none once it is received)."""
            state = self.conn.their_state
            if self._started is None or state not in (h11.IDLE, h11.SEND_BODY):
                self._started = None  # received (or closed): its answer is not bounded
                self._disarm()
                return
            bound = header_timeout if state is h11.IDLE else read_timeout
            if self._timer is None or bound != self._bound:
                self._disarm()
                self._bound = bound
                at = self._started + bound
                self._timer = asyncio.get_running_loop().call_at(at, self._expired)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _expired(self) -> None:
            self._timer = None
            if self.transport.is_closing():
                return
            what = "head" if self.conn.their_state is h11.IDLE else "body"
            peer = self.transport.get_extra_info("peername")
            log.info("closed the connection of %s: its request's %s did not arrive within %g s",
                     peer, what, self._bound)  # fmt: skip
            self.transport.close()

    return GuardedH11


class Server(uvicorn.Server):
    """uvicorn's server, stopped by SIGTERM or SIGINT with exit status 0 (as the
    worker is); a second SIGINT cuts open event streams at once."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop, sig)
        try:
            yield
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)

    def _stop(self, sig: signal.Signals) -> None:
        log.info("%s received: stopping", sig.name)
        if self.should_exit and sig is signal.SIGINT:
            self.force_exit = True  # a second Ctrl-C: do not wait for open streams
        self.should_exit = True
