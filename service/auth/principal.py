"""The authenticated caller and its scopes.

Scopes (the strings a token or a JWT's mapped claim carries):

* ``admin``: everything, including managing tokens.
* ``read``: every analytic answer and the account-wide billing data.
* ``read:project:NAME`` / ``read:team:NAME``: ledger rows of one project or team (repeatable).
* ``metrics``: the service's own ``/metrics``.
* ``push:CONNECTOR``: node agents pushing batches to the ``agent`` connector named CONNECTOR.

The auth middleware puts the caller at ``scope[PRINCIPAL_KEY]`` of every ASGI request it lets
through; :func:`principal_of` reads it back (anonymous when absent).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from service.analytics.access import Access

PRINCIPAL_KEY = "gpu_ledger.principal"

ADMIN, READ, METRICS = "admin", "read", "metrics"
READ_PROJECT, READ_TEAM, PUSH = "read:project:", "read:team:", "push:"

Kind = Literal["token", "jwt", "anonymous"]


class ScopeError(ValueError):
    """A scope string that is not one of the forms above."""


def check_scope(scope: str) -> str:
    """``scope`` if it is well formed, else :class:`ScopeError` saying what is allowed."""
    if scope in (ADMIN, READ, METRICS):
        return scope
    for prefix in (READ_PROJECT, READ_TEAM, PUSH):
        if scope.startswith(prefix) and scope[len(prefix) :].strip() == scope[len(prefix) :] != "":
            return scope
    raise ScopeError(
        f"unknown scope {scope!r}: use admin, read, metrics, read:project:NAME, read:team:NAME "
        "or push:CONNECTOR"
    )


@dataclass(frozen=True)
class Principal:
    """Who is calling (``name``: token name, JWT subject, or ``anonymous``) and what it may do."""

    name: str
    kind: Kind
    scopes: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def of(cls, name: str, kind: Kind, scopes: Iterable[str]) -> Principal:
        return cls(name, kind, frozenset(scopes))

    @property
    def is_admin(self) -> bool:
        return ADMIN in self.scopes

    @property
    def access(self) -> Access:
        """The ledger rows this caller may read."""
        if self.is_admin or READ in self.scopes:
            return Access.all()
        return Access(
            projects=frozenset(s[len(READ_PROJECT) :] for s in self.scopes if s.startswith(READ_PROJECT)),
            teams=frozenset(s[len(READ_TEAM) :] for s in self.scopes if s.startswith(READ_TEAM)),
        )

    @property
    def can_read(self) -> bool:
        return not self.access.nothing

    @property
    def can_scrape_metrics(self) -> bool:
        return self.is_admin or METRICS in self.scopes

    def can_push(self, connector: str) -> bool:
        return self.is_admin or f"{PUSH}{connector}" in self.scopes


ANONYMOUS = Principal("anonymous", "anonymous")


def principal_of(scope: Mapping[str, Any]) -> Principal:
    """The caller the auth middleware let through on this ASGI ``scope`` (anonymous if none)."""
    found = scope.get(PRINCIPAL_KEY)
    return found if isinstance(found, Principal) else ANONYMOUS
