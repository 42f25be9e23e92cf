"""Which slice of an aggregate answer to return, and the cap on rows of an unpaged answer.

Aggregate answers stay flat lists (BI tools read them so); a client pages by passing the
``cursor`` of the last row it got as ``after``. A cursor is the row's position in the answer's
stable order (the aggregation's ORDER BY keys), opaque to the client and bound to the root field
that handed it out. Positions, not keysets: the group keys mix NULLs, periods and text, and an
offset over a GROUP BY is one ``OFFSET`` in SQL. A page read while ingest adds groups may shift
by those groups, as any offset page does.

Without ``first`` an answer is capped at ``max_rows``: above it the query is refused with
``RESULT_TOO_LARGE`` instead of building an unbounded list. SQL-aggregated answers detect it by
fetching ``max_rows + 1`` rows.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Select

from service.analytics.errors import InvalidArgument, PageSizeTooLarge, QueryError

T = TypeVar("T")


class ResultTooLarge(QueryError):
    code = "RESULT_TOO_LARGE"


def encode_cursor(field: str, position: int) -> str:
    """The cursor of the row at ``position`` (0-based) of ``field``'s answer."""
    return base64.urlsafe_b64encode(f"{field}:{position}".encode()).decode()


def decode_cursor(field: str, cursor: str) -> int:
    """The position ``cursor`` names, or INVALID_ARGUMENT if ``field`` did not hand it out."""
    try:
        text = base64.b64decode(cursor.encode(), altchars=b"-_", validate=True).decode()
        name, _, number = text.partition(":")
        position = int(number) if name == field and number.isdigit() else -1
    except (binascii.Error, UnicodeError, ValueError):
        position = -1
    if position < 0 or encode_cursor(field, position) != cursor:
        raise InvalidArgument(f"cursor {cursor!r} is not one {field} handed out")
    return position


@dataclass(frozen=True)
class Page:
    """Rows ``[offset, offset + first)`` of an answer; ``first`` None = all rows, at most ``max_rows``.

    ``field`` names the root field (it appears in the RESULT_TOO_LARGE message and in cursors);
    ``max_rows`` None = no cap (trusted callers: the CLI, the scheduler, tests).
    """

    field: str = "answer"
    first: int | None = None
    offset: int = 0
    max_rows: int | None = None

    @classmethod
    def of(
        cls, field: str, first: int | None, after: str | None, *, page_size_max: int, max_rows: int
    ) -> Page:
        """A checked page: ``first`` within [0, page_size_max], ``after`` a cursor of ``field``."""
        if first is not None and first < 0:
            raise InvalidArgument(f"first must not be negative (got {first})")
        if first is not None and first > page_size_max:
            raise PageSizeTooLarge(f"first={first} is above the page size limit of {page_size_max}")
        offset = 0 if after is None else decode_cursor(field, after) + 1
        return cls(field, first, offset, max_rows)

    @property
    def fetch(self) -> int | None:
        """Rows to fetch: the page, or one more than the cap (to see that it is exceeded)."""
        if self.first is not None:
            return self.first
        return None if self.max_rows is None else self.max_rows + 1

    def apply(self, stmt: Select[Any]) -> Select[Any]:
        """``stmt`` (already ordered) limited to this page in SQL."""
        if self.offset:
            stmt = stmt.offset(self.offset)
        return stmt if self.fetch is None else stmt.limit(self.fetch)

    def check(self, rows: Sequence[T]) -> Sequence[T]:
        """``rows`` fetched through :meth:`apply`; RESULT_TOO_LARGE when they exceed the cap."""
        if self.first is None:
            self.refuse_above(len(rows))
        return rows

    def refuse_above(self, count: int) -> None:
        """RESULT_TOO_LARGE when an unpaged answer of ``count`` rows exceeds the cap."""
        if self.first is None and self.max_rows is not None and count > self.max_rows:
            raise ResultTooLarge(
                f"{self.field} would return more than {self.max_rows} rows (max_result_rows); "
                f"page through it with `first` (at most the page size limit) and `after` "
                f"(the `cursor` of the last row received), or narrow the window, groupBy or filter"
            )

    def slice(self, rows: Sequence[T]) -> list[T]:
        """This page of a whole answer computed in Python (see each caller for what that costs)."""
        self.refuse_above(len(rows) - self.offset)
        end = None if self.first is None else self.offset + self.first
        return list(rows[self.offset : end])

    def cursors(self, count: int) -> list[str]:
        """Cursors of the ``count`` rows of this page, in order."""
        return [encode_cursor(self.field, self.offset + i) for i in range(count)]


WHOLE = Page()
"""Every row, no cap."""
