"""The console's sign-in sessions: opaque ids that expire, kept in the server's memory.

Signing in to the console (a bearer token typed into its form) opens a
session: a random id (`secrets.token_urlsafe`, 256 bits) that the browser
keeps in its cookie instead of the token. The id means nothing outside this
server process, and the table of sessions lives in its memory only:

- a session ends when it has not been used for `idle` seconds, `lifetime`
  seconds after it was opened whatever its use, when its owner signs out
  (`close`: the id is forgotten, so a replayed cookie is refused), and when
  the server stops (a restart, which is also when a changed tokens file is
  read, signs everyone out);
- the table keeps the token the session was opened with, and the console asks
  the app's authenticator again with it on every request, so a session grants
  exactly what its token grants now: an authenticator that stops knowing the
  token, or maps it to another actor, ends the session;
- the table is keyed by the SHA-256 of the id: a look-up's timing says nothing
  about the id, and the table holds no cookie anyone could replay.

Several ``steadyflow serve`` processes behind one load balancer each have
their own sessions (and CSRF key): route a browser to one of them (sticky
sessions). docs/security.md#console-sessions says why the store does not hold
them.
"""

from __future__ import annotations

import hashlib
import secrets

import attrs

from sdk._core._checks import check_seconds
from sdk._core._clock import Clock

__all__ = [
    "DEFAULT_SESSION_IDLE",
    "DEFAULT_SESSION_LIFETIME",
    "MAX_SESSIONS",
    "MAX_SESSIONS_PER_ACTOR",
    "Held",
    "Sessions",
]

#: Seconds a console session lasts without a request of its person (30 minutes).
DEFAULT_SESSION_IDLE = 1800.0
#: Seconds a console session lasts at most, however busy (12 hours).
DEFAULT_SESSION_LIFETIME = 43200.0
#: Sessions one server keeps at most: then signing in ends the oldest.
MAX_SESSIONS = 10_000
#: Sessions one actor keeps at most: then their next sign-in ends their oldest.
MAX_SESSIONS_PER_ACTOR = 100


def _key(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode("utf-8", "replace")).digest()


@attrs.define
class Held:
    """One open session: whose it is and when it was opened and last used.

    Attributes:
        actor: who signed in (what the token named then).
        token: the token signed in with, asked again on every request (server
            memory only, never in the cookie or a repr).
        opened: clock time of the sign-in.
        seen: clock time of the person's last request.
    """

    actor: str
    token: str = attrs.field(repr=False)
    opened: float
    seen: float


class Sessions:
    """The console's sessions of one app (`create_app` makes one).

    Args:
        idle: seconds a session lasts without use.
        lifetime: seconds a session lasts at most.
        clock: where time is read (the client's; tests pass a `FakeClock`).

    Example::

        sessions = Sessions(1800, 43200, SystemClock())
        sid = sessions.open("alice", token)
        assert sessions.get(sid).actor == "alice"
        sessions.close(sid)  # signed out: `get(sid)` is None from now on
    """

    def __init__(self, idle: float, lifetime: float, clock: Clock) -> None:
        self.idle = check_seconds(idle, "create_app(): session_idle", positive=True)
        self.lifetime = check_seconds(lifetime, "create_app(): session_lifetime", positive=True)
        self._clock = clock
        self._table: dict[bytes, Held] = {}  # oldest first (insertion order)

    def __repr__(self) -> str:  # never an id or a token
        return f"Sessions(open={len(self._table)}, idle={self.idle:g}, lifetime={self.lifetime:g})"

    def __len__(self) -> int:
        return len(self._table)

    def open(self, actor: str, token: str) -> str:
        """A new session of `actor`, signed in with `token`: its id (the cookie's value)."""
        now = self._clock.time()
        self._sweep(now)
        mine = [k for k, held in self._table.items() if held.actor == actor]
        if len(mine) >= MAX_SESSIONS_PER_ACTOR:  # one actor cannot crowd out the others
            del self._table[mine[0]]
        if len(self._table) >= MAX_SESSIONS:
            del self._table[next(iter(self._table))]
        session_id = secrets.token_urlsafe(32)
        self._table[_key(session_id)] = Held(actor, token, now, now)
        return session_id

    def get(self, session_id: str, *, touch: bool = True) -> Held | None:
        """The open session `session_id` names, or None (unknown, closed or expired:
        an expired one is forgotten). `touch` counts this as a use (the idle time
        starts again); a page's own refreshes do not."""
        key = _key(session_id)
        held = self._table.get(key)
        if held is None:
            return None
        now = self._clock.time()
        if self._expired(held, now):
            del self._table[key]
            return None
        if touch:
            held.seen = now
        return held

    def close(self, session_id: str) -> None:
        """End the session `session_id` names (sign-out); nothing if there is none."""
        self._table.pop(_key(session_id), None)

    def _expired(self, held: Held, now: float) -> bool:
        return now - held.seen >= self.idle or now - held.opened >= self.lifetime

    def _sweep(self, now: float) -> None:
        """Forget the expired sessions (at each sign-in: the table stays bounded)."""
        for key in [k for k, held in self._table.items() if self._expired(held, now)]:
            del self._table[key]
