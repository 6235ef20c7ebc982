"""Who is calling: the `Authenticate` hook, and bearer tokens out of the box.

The HTTP layer authenticates (who is this?); the client's `Authorizer`
decides per action (may they?): with bearer tokens that carry roles, the
built-in role model (`BearerTokens.authorizer`). An authenticator maps a request to an actor
name, or None: then the request is answered 401 and nothing else happens.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path

from starlette.requests import Request

from sdk._core._checks import check_id
from sdk.client._roles import Role, RoleAuthorizer, parse_roles
from sdk.errors import InvalidArgument

__all__ = ["TOKENS_VARIABLE", "Authenticate", "BearerTokens", "is_loopback"]

#: The environment variable `BearerTokens.from_env` reads: ``"token=actor,token2=actor2"``
#: (``token=actor:role,role`` with roles).
TOKENS_VARIABLE = "STEADYFLOW_API_TOKENS"

#: ``authenticate(request) -> actor | None``, plain or async.
Authenticate = Callable[[Request], "str | Awaitable[str | None] | None"]

#: Shortest token accepted: a guessable token is no authentication.
MIN_TOKEN_LENGTH = 16


def _digest(token: str) -> bytes:
    # Comparing fixed-length digests keeps the comparison's time independent
    # of the token's length and of how much of it matches.
    return hashlib.sha256(token.encode()).digest()


class BearerTokens:
    """Authenticates ``Authorization: Bearer TOKEN`` against a table of tokens.

    Every request's token is compared with every known token in constant time
    (`hmac.compare_digest` of SHA-256 digests, with no early exit), so the
    answer's timing does not tell how close a guess was.

    Tokens may carry the roles of the built-in role model (`sdk.Role`:
    ``viewer``, ``operator``, ``approver``, ``admin``); `authorizer` makes the
    `sdk.RoleAuthorizer` that grants them, which ``steadyflow serve`` uses.

    Args:
        tokens: token -> actor name (each token at least 16 characters).
        roles: actor name -> its roles, for the actors that have some; an actor
            not named here holds none (`authorizer` lets it read, nothing more).

    Example::

        tokens = BearerTokens({"s3cret-token-for-ops": "ops"}, roles={"ops": ["operator"]})
        app = create_app(Client(store, tokens.authorizer()), authenticate=tokens)
    """

    def __init__(
        self, tokens: Mapping[str, str], *, roles: Mapping[str, Iterable[Role | str]] | None = None
    ) -> None:
        if not tokens:
            raise InvalidArgument("BearerTokens: no tokens given")
        table = []
        for token, actor in tokens.items():
            if not isinstance(token, str) or len(token) < MIN_TOKEN_LENGTH:
                raise InvalidArgument(
                    f"BearerTokens: the token of actor {actor!r} is shorter than "
                    f"{MIN_TOKEN_LENGTH} characters; use a long random one "
                    "(python -c 'import secrets; print(secrets.token_urlsafe(32))')"
                )
            table.append((_digest(token), check_id(actor, "BearerTokens: actor")))
        self._table = tuple(table)
        actors = {a for _, a in table}
        held: dict[str, frozenset[Role]] = {}
        for actor, given in (roles or {}).items():
            if actor not in actors:
                raise InvalidArgument(f"BearerTokens: roles given for {actor!r}, who has no token")
            held[actor] = parse_roles(given, "BearerTokens", actor)
        self._roles = held

    def __repr__(self) -> str:  # never the tokens
        return f"BearerTokens(actors={sorted({a for _, a in self._table})})"

    @property
    def actors(self) -> frozenset[str]:
        """Every actor a token belongs to."""
        return frozenset(a for _, a in self._table)

    @property
    def roles(self) -> dict[str, frozenset[Role]]:
        """actor -> its roles, for the actors whose tokens carry roles."""
        return dict(self._roles)

    def authorizer(self) -> RoleAuthorizer:
        """The `sdk.RoleAuthorizer` of these tokens' roles: an actor whose tokens
        carry none may read, nothing more (`Role.VIEWER`)."""
        return RoleAuthorizer({a: self._roles.get(a, frozenset()) for a in self.actors})

    @classmethod
    def parse(cls, text: str, source: str) -> BearerTokens:
        """Tokens from ``"token=actor,token2=actor2"`` (commas or newlines between
        entries; lines starting with ``#`` are comments). `source` names the text
        in errors.

        An entry may give the actor's roles after a colon, ``token=actor:role``,
        more of them after commas: ``token=actor:operator,approver`` (an item
        without ``=`` after such an entry is one more of its roles). The roles
        are what follows the *last* colon, so an actor name that holds a colon
        ends with its roles, or with a colon alone for none: ``token=urn:ada:``.
        Every token of one actor must carry the same roles.
        """
        entries: list[tuple[str, str, list[str] | None]] = []  # token, actor, roles
        items = [i.strip() for line in text.splitlines() for i in line.split(",")]
        for n, item in enumerate(i for i in items if i and not i.startswith("#")):
            token, sep, rest = item.partition("=")
            if not sep and entries and entries[-1][2]:
                entries[-1][2].append(item)  # one more role of the entry before
                continue
            if not sep or not token.strip() or not rest.strip():
                raise InvalidArgument(
                    f"{source}: entry #{n + 1} is not 'token=actor' (the format is "
                    "'token=actor,token2=actor2', or 'token=actor:role,role' with roles)"
                )
            actor, colon, role = rest.rpartition(":") if ":" in rest else (rest, "", "")
            if colon and not actor.strip():
                raise InvalidArgument(f"{source}: entry #{n + 1} has roles but no actor")
            named = None if not colon else ([role.strip()] if role.strip() else [])
            entries.append((token.strip(), actor.strip(), named))
        tokens: dict[str, str] = {}
        roles: dict[str, frozenset[Role]] = {}
        roleless: set[str] = set()
        for token, actor, named in entries:
            tokens[token] = actor
            if named is None:
                roleless.add(actor)
                continue
            got = frozenset(_role(r, source, actor) for r in named)
            if roles.setdefault(actor, got) != got:
                raise InvalidArgument(f"{source}: the tokens of {actor!r} carry different roles")
        if roleless & roles.keys():
            mixed = sorted(roleless & roles.keys())[0]
            raise InvalidArgument(
                f"{source}: the tokens of {mixed!r} carry different roles (one has none)"
            )
        return cls(tokens, roles=roles)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> BearerTokens | None:
        """Tokens from ``$STEADYFLOW_API_TOKENS``; None when it is not set."""
        text = (os.environ if environ is None else environ).get(TOKENS_VARIABLE, "")
        return cls.parse(text, f"${TOKENS_VARIABLE}") if text.strip() else None

    @classmethod
    def from_file(cls, path: str | Path) -> BearerTokens:
        """Tokens from a file: ``token=actor`` or ``token=actor:role,role`` per line."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidArgument(f"tokens file {str(path)!r}: {exc.strerror or exc}") from None
        return cls.parse(text, f"tokens file {str(path)!r}")

    def actor_of(self, token: str) -> str | None:
        """The actor `token` belongs to, or None."""
        given = _digest(token)
        found = None
        for digest, actor in self._table:  # no early exit: every token is compared
            if hmac.compare_digest(given, digest):
                found = actor
        return found

    def __call__(self, request: Request) -> str | None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return self.actor_of(token.strip())


def _role(value: str, source: str, actor: str) -> Role:
    """A role of a tokens text; the error never shows what could be a token."""
    shown = repr(value) if len(value) < MIN_TOKEN_LENGTH else f"a value of {len(value)} characters"
    try:
        return Role(value)
    except ValueError:
        known = ", ".join(r.value for r in Role)
        raise InvalidArgument(
            f"{source}: the roles of {actor!r}: {shown} is not a role (the roles: {known}; an "
            "actor name that holds ':' must end with its roles, or with ':' for none)"
        ) from None


def is_loopback(host: str | None) -> bool:
    """Whether `host` (an address or ``localhost``) is a loopback address."""
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
