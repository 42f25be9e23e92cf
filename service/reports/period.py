"""A report's period: a calendar month (``2026-11``) or an ISO week (``2026-W47``), as a UTC window.

Months and ISO weeks are the periods FinOps teams close their books on; both are whole UTC days,
so a report's window is always aligned to the ledger's hours and its daily rollups.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Literal

from service.analytics.window import Window

PeriodKind = Literal["month", "week"]
_MONTH = re.compile(r"(?P<year>[0-9]{4})-(?P<month>[0-9]{2})")
_WEEK = re.compile(r"(?P<year>[0-9]{4})-W(?P<week>[0-9]{2})")
#: The ledger starts at the Unix epoch; a year past 9998 has no following period to end on.
FIRST_YEAR, LAST_YEAR = 1970, 9998


class PeriodError(ValueError):
    """A period that is not YYYY-MM or YYYY-Www, or names no such month or week."""


@dataclass(frozen=True)
class Period:
    """One month or ISO week: ``label`` as given (normalized), ``window`` its [start, end) in UTC."""

    kind: PeriodKind
    label: str
    window: Window

    @property
    def start(self) -> dt.datetime:
        return self.window.start

    @property
    def end(self) -> dt.datetime:
        return self.window.end

    @property
    def days(self) -> int:
        return (self.end - self.start).days

    def previous(self) -> Period:
        """The period just before: the previous month or ISO week."""
        before = self.start - dt.timedelta(days=1)
        return month_of(before) if self.kind == "month" else week_of(before)

    def next(self) -> Period:
        return month_of(self.end) if self.kind == "month" else week_of(self.end)


def month_of(day: dt.datetime | dt.date) -> Period:
    start = dt.datetime(day.year, day.month, 1, tzinfo=dt.UTC)
    end = dt.datetime(day.year + day.month // 12, day.month % 12 + 1, 1, tzinfo=dt.UTC)
    return Period("month", f"{day.year:04d}-{day.month:02d}", Window(start, end))


def week_of(day: dt.datetime | dt.date) -> Period:
    year, week, weekday = day.isocalendar()
    monday = dt.date(day.year, day.month, day.day) - dt.timedelta(days=weekday - 1)
    start = dt.datetime(monday.year, monday.month, monday.day, tzinfo=dt.UTC)
    return Period("week", f"{year:04d}-W{week:02d}", Window(start, start + dt.timedelta(days=7)))


def parse_period(text: str) -> Period:
    """``YYYY-MM`` (a calendar month) or ``YYYY-Www`` (an ISO 8601 week, Monday to Monday), UTC."""
    value = text.strip()
    if len(value) > 8:  # noqa: PLR2004  (neither form is longer: no 10 KB strings in messages)
        raise PeriodError(f"{value[:20]!r}…: expected YYYY-MM (a month) or YYYY-Www (an ISO week)")
    month, week = _MONTH.fullmatch(value), _WEEK.fullmatch(value.upper())
    if month is None and week is None:
        raise PeriodError(f"{value!r}: expected YYYY-MM (e.g. 2026-11) or YYYY-Www (e.g. 2026-W47)")
    year = int((month or week).group("year"))  # type: ignore[union-attr]
    if not FIRST_YEAR <= year <= LAST_YEAR:
        raise PeriodError(f"{value!r}: the year must be between {FIRST_YEAR} and {LAST_YEAR}")
    if month is not None:
        number = int(month.group("month"))
        if not 1 <= number <= 12:  # noqa: PLR2004
            raise PeriodError(f"{value!r}: there is no month {number:02d} (01 to 12)")
        return month_of(dt.date(year, number, 1))
    assert week is not None
    number = int(week.group("week"))
    weeks = dt.date(year, 12, 28).isocalendar()[1]  # 28 December is always in the year's last week
    if not 1 <= number <= weeks:
        raise PeriodError(f"{value!r}: ISO year {year} has weeks W01 to W{weeks:02d}")
    return week_of(dt.date.fromisocalendar(year, number, 1))
