"""Whose report: the whole account, one project or one team — and the error of a report asked wrongly.

Light on purpose (no analytics imported): the ``[[reports]]`` settings validate their scope with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.analytics.access import ALL, Access
from service.analytics.errors import QueryError

#: A project or team name longer than this is refused (the export endpoint's limit for a value).
MAX_NAME_CHARS = 1000


class ReportError(QueryError):
    """A report that cannot be made as asked; ``argument`` names the option to change."""

    code = "INVALID_ARGUMENT"

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(message)
        self.argument = argument


@dataclass(frozen=True)
class Scope:
    """Whose report: the account (both None), one project or one team."""

    project: str | None = None
    team: str | None = None

    def __post_init__(self) -> None:
        if self.project is not None and self.team is not None:
            raise ReportError("--project", "give --project or --team, not both")
        for option, value in (("--project", self.project), ("--team", self.team)):
            if value is None:
                continue
            if not value.strip():
                raise ReportError(option, "is empty")
            if len(value) > MAX_NAME_CHARS:
                raise ReportError(option, f"is {len(value):,} characters long; at most {MAX_NAME_CHARS}")
            if any(ord(c) < 32 or ord(c) == 127 for c in value):  # noqa: PLR2004
                raise ReportError(option, "contains control characters")

    @property
    def access(self) -> Access:
        if self.project is not None:
            return Access(projects=frozenset({self.project}))
        if self.team is not None:
            return Access(teams=frozenset({self.team}))
        return ALL

    @property
    def account_wide(self) -> bool:
        return self.project is None and self.team is None

    @property
    def label(self) -> str:
        if self.project is not None:
            return f"project {self.project}"
        if self.team is not None:
            return f"team {self.team}"
        return "whole account"

    @property
    def slug(self) -> str:
        """For file names: the kind of scope and nothing of its (user-given) name."""
        return "project" if self.project is not None else "team" if self.team is not None else "account"
