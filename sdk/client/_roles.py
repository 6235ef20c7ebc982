"""The built-in role model: `Role` and `RoleAuthorizer`, an `Authorizer` for the
common case (each actor holds some of four roles).

``steadyflow serve`` builds one from the roles of its tokens file
(`sdk.http.BearerTokens`); any `Client` can take one.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import ClassVar

from sdk._core._checks import check_id
from sdk._core._types import RunRecord
from sdk.errors import InvalidArgument

__all__ = ["Role", "RoleAuthorizer", "parse_role", "parse_roles"]


class Role(enum.StrEnum):
    """A role of the built-in role model (`RoleAuthorizer`); equal to its string value."""

    VIEWER = "viewer"
    """Reads only (every role reads: reads are not put to the authorizer)."""
    OPERATOR = "operator"
    """Starts and steers runs (no approvals, no deletion, no forced resume) and
    operates schedules."""
    APPROVER = "approver"
    """Decides human waits: approve and deny."""
    ADMIN = "admin"
    """Everything, also ``delete`` and ``force_resume`` (and actions added later)."""


def parse_role(value: str, what: str) -> Role:
    """`value` as a `Role`; `InvalidArgument` naming `what` and the roles otherwise."""
    try:
        return Role(value)
    except ValueError:
        known = ", ".join(r.value for r in Role)
        raise InvalidArgument(f"{what}: unknown role {value[:60]!r} (the roles: {known})") from None


def parse_roles(held: Iterable[Role | str], what: str, actor: str) -> frozenset[Role]:
    """The roles `actor` is given in `held` (names or `Role`s); `InvalidArgument`
    naming `what` and the actor for a string in place of a collection, or an
    unknown role."""
    if isinstance(held, str):
        raise InvalidArgument(
            f"{what}: the roles of {actor!r} must be a collection of roles, "
            f"not the string {held[:60]!r}"
        )
    return frozenset(parse_role(r, f"{what}: {actor!r}") for r in held)


_OPERATOR = frozenset(
    {"start", "signal", "send_event", "cancel", "resume", "replay", "fork", "create_schedule",
     "pause_schedule", "resume_schedule", "delete_schedule", "trigger_schedule"}
)  # fmt: skip


class RoleAuthorizer:
    """An `Authorizer` from roles: actor -> the roles it holds.

    What each role may do is `ACTIONS`; `Role.ADMIN` may do anything. An actor
    may hold several roles (an operator who also approves); an actor with no
    roles, or not in the table, may do nothing but read.

    Args:
        roles: actor name -> its roles (`Role` members or their values).

    Example::

        client = Client(store, RoleAuthorizer({"ada": ["admin"], "sam": ["operator", "approver"],
                                               "dashboards": ["viewer"]}))
    """

    #: The actions each role is granted (`Role.ADMIN`: all of them, and any other).
    ACTIONS: ClassVar[Mapping[Role, frozenset[str]]] = {
        Role.VIEWER: frozenset(),
        Role.OPERATOR: _OPERATOR,
        Role.APPROVER: frozenset({"approve", "deny"}),
        Role.ADMIN: frozenset(),  # everything: see `can`
    }

    def __init__(self, roles: Mapping[str, Iterable[Role | str]]) -> None:
        table: dict[str, frozenset[Role]] = {}
        for actor, held in roles.items():
            check_id(actor, "RoleAuthorizer: actor")
            table[actor] = parse_roles(held, "RoleAuthorizer", actor)
        self._roles = table

    def __repr__(self) -> str:
        shown = {a: sorted(r.value for r in held) for a, held in sorted(self._roles.items())}
        return f"RoleAuthorizer({shown})"

    def roles_of(self, actor: str) -> frozenset[Role]:
        """The roles `actor` holds (empty for an actor not in the table)."""
        return self._roles.get(actor, frozenset())

    def can(self, actor: str, action: str, run: RunRecord) -> bool:
        """Whether one of `actor`'s roles grants `action` (on any run)."""
        held = self.roles_of(actor)
        return Role.ADMIN in held or any(action in self.ACTIONS[r] for r in held)
