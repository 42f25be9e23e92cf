"""Who may read which ledger rows: the scope every analytic query is run under.

The analytics layer applies an :class:`Access` itself (not each resolver), so no root field,
export or future query can forget it. The domain knows nothing of tokens or HTTP:
``service.auth`` turns a caller's scopes into an ``Access``.

* ``everything``: every ledger row and the account-wide billing data (bills, rates,
  reconciliation, connectors).
* otherwise only rows whose ``project`` is in ``projects`` or whose ``team`` is in ``teams``;
  billing data is account-wide, so it is :class:`Forbidden`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from service.analytics.errors import QueryError


class Forbidden(QueryError):
    code = "FORBIDDEN"


@dataclass(frozen=True)
class Access:
    """The rows a caller may read (see the module docstring)."""

    everything: bool = False
    projects: frozenset[str] = field(default_factory=frozenset)
    teams: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def all(cls) -> Access:
        return cls(everything=True)

    @property
    def nothing(self) -> bool:
        return not (self.everything or self.projects or self.teams)

    def allows(self, project: str | None, team: str | None) -> bool:
        """May a row attributed to ``project`` and ``team`` be shown?"""
        return self.everything or project in self.projects or team in self.teams

    def require_everything(self, what: str) -> None:
        """Refuse account-wide data (``what`` names it) to a project- or team-scoped caller."""
        if not self.everything:
            raise Forbidden(f"{what} is account-wide data: it needs the `read` scope")


ALL = Access.all()
