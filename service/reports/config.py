"""``[[reports]]``: a report e-mailed once per closed period (sent by service/reports/schedule.py).

[[reports]]
name = "research-monthly"      # unique; names the schedule in the delivery table and the logs
period = "monthly"             # or "weekly" (ISO weeks, Monday to Monday, UTC)
team = "research"              # or project = "…"; neither: the whole account
to = ["finops@example.com"]
formats = ["html", "csv"]      # html: the e-mail's body; csv: attached
currency = "EUR"               # optional: convert every amount
day = 1                        # monthly: day of the month (1-28); weekly: ISO weekday (1 = Monday)
hour = 6                       # UTC hour of that day from which it is sent

"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from service.reports.scope import MAX_NAME_CHARS, ReportError, Scope

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
_CURRENCY = re.compile(r"[A-Za-z]{3}")
MAX_RECIPIENTS = 100
Format = Literal["html", "csv"]
FORMATS: tuple[Format, ...] = ("html", "csv")


class ReportSchedule(BaseModel):
    """One ``[[reports]]`` table (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="unique name: letters, digits, _ . - (at most 100)")
    period: Literal["weekly", "monthly"]
    project: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    team: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    to: list[str] = Field(min_length=1, max_length=MAX_RECIPIENTS)
    formats: list[Format] = Field(default_factory=lambda: list(FORMATS), min_length=1)
    currency: str | None = None
    day: int = Field(default=1, ge=1, le=28)
    hour: int = Field(default=6, ge=0, le=23)
    enabled: bool = True

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError(
                "use letters, digits, '_', '.' and '-' (at most 100, starting with a letter or digit)"
            )
        return value

    @field_validator("to")
    @classmethod
    def _to(cls, value: list[str]) -> list[str]:
        for address in value:
            if any(c in address for c in "\r\n,; <>") or address.count("@") != 1 or len(address) > 320:  # noqa: PLR2004
                raise ValueError(f"not a single e-mail address: {address[:80]!r}")
        return value

    @field_validator("currency")
    @classmethod
    def _currency(cls, value: str | None) -> str | None:
        if value is not None and not _CURRENCY.fullmatch(value):
            raise ValueError("an ISO 4217 code: three letters, e.g. EUR")
        return None if value is None else value.upper()

    @model_validator(mode="after")
    def _check(self) -> ReportSchedule:
        if self.period == "weekly" and self.day > 7:  # noqa: PLR2004
            raise ValueError("a weekly report's day is an ISO weekday, 1 (Monday) to 7 (Sunday)")
        if len(set(self.formats)) != len(self.formats):
            raise ValueError("formats: each of html, csv at most once")
        self.scope  # noqa: B018  (project and team: one at most, no control characters)
        return self

    @property
    def scope(self) -> Scope:
        try:
            return Scope(project=self.project, team=self.team)
        except ReportError as exc:
            raise ValueError(f"{exc.argument.lstrip('-')}: {exc.message}") from None
