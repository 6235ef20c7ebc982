"""Who is calling: the `Authenticate` hook, and bearer tokens out of the box.

The HTTP layer authenticates (who is this?); the client's `Authorizer`
decides per action (may they?). An authenticator maps a request to an actor
name, or None: then the request is answered 401 and nothing else happens.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from starlette.requests import Request

from sdk._core._checks import check_id
from sdk.errors import InvalidArgument

__all__ = ["TOKENS_VARIABLE", "Authenticate", "BearerTokens", "is_loopback"]

#: The environment variable `BearerTokens.from_env` reads: ``"token=actor,token2=actor2"``.
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

    Args:
        tokens: token -> actor name (each token at least 16 characters).

    Example::

        app = create_app(client, authenticate=BearerTokens({"s3cret-token-for-ops": "ops"}))
    """

    def __init__(self, tokens: Mapping[str, str]) -> None:
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

    def __repr__(self) -> str:  # never the tokens
        return f"BearerTokens(actors={sorted({a for _, a in self._table})})"

    @classmethod
    def parse(cls, text: str, source: str) -> BearerTokens:
        """Tokens from ``"token=actor,token2=actor2"`` (commas or newlines between
        pairs; lines starting with ``#`` are comments). `source` names the text in errors."""
        pairs: dict[str, str] = {}
        items = [i.strip() for line in text.splitlines() for i in line.split(",")]
        for n, item in enumerate(i for i in items if i and not i.startswith("#")):
            token, sep, actor = item.partition("=")
            if not sep or not token.strip() or not actor.strip():
                raise InvalidArgument(
                    f"{source}: entry #{n + 1} is not 'token=actor' (the format is "
                    "'token=actor,token2=actor2')"
                )
            pairs[token.strip()] = actor.strip()
        return cls(pairs)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> BearerTokens | None:
        """Tokens from ``$STEADYFLOW_API_TOKENS``; None when it is not set."""
        text = (os.environ if environ is None else environ).get(TOKENS_VARIABLE, "")
        return cls.parse(text, f"${TOKENS_VARIABLE}") if text.strip() else None

    @classmethod
    def from_file(cls, path: str | Path) -> BearerTokens:
        """Tokens from a file: ``token=actor`` per line (or comma-separated)."""
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
