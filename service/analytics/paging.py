"""Which slice of an aggregate answer to return, and the cap on rows of an unpaged answer.

Aggregate answers stay flat lists (BI tools read them so); a client pages by passing the
``cursor`` of the last row it got as ``after``. A cursor is opaque to the client and names:

* the root field and a digest of its arguments (``binding``): a cursor of another field, or of
  the same field asked with another window, grouping, filter, metric, policy…, is refused with
  INVALID_ARGUMENT instead of continuing some other answer;
* the row's **order key**: for an answer aggregated in SQL, its ORDER BY values (period key,
  grouped dimension values, extra keys such as currency), NULLs first. The next page keeps the
  rows whose key comes after it (a keyset predicate in the WHERE clause: see
  :func:`service.analytics.query.keyset_after`), so a page reads from where the last one stopped
  instead of recomputing and skipping every group before it (an OFFSET does: page k of n costs
  O(k + n) groups). For an answer computed in Python (cost under the SHARE policies or with
  currency conversion; reconciliation; data quality) the key is the row's position.

A cursor's values are checked against the kinds of the answer's keys (integer or text, NULL
allowed) before they reach SQL, so a forged cursor is an INVALID_ARGUMENT, never a database
error. It confers nothing: the access scope still restricts the rows it continues from.

Without ``first`` an answer is capped at ``max_rows``: above it the query is refused with
``RESULT_TOO_LARGE`` instead of building an unbounded list. SQL-aggregated answers detect it by
fetching ``max_rows + 1`` rows.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from sqlalchemy import Select

from service.analytics.errors import InvalidArgument, PageSizeTooLarge, QueryError

T = TypeVar("T")
#: One component of an order key (JSON-representable; bool is not one: it is no key kind).
KeyValue = int | str | None
Key = tuple[KeyValue, ...]

#: Longest cursor accepted (a key of every dimension with long values fits easily).
MAX_CURSOR_CHARS = 8192
#: Integer key components (period keys, positions, flags) stay within the INTEGER columns they are
#: compared with (PostgreSQL refuses a larger bound value: "integer out of range").
MAX_KEY_INT = 2**31 - 1
_QUOTE_CHARS = 200


class ResultTooLarge(QueryError):
    code = "RESULT_TOO_LARGE"


def binding_of(field: str, *arguments: object) -> str:
    """A short digest of a root field and the arguments that decide its answer (not ``first``).

    ``arguments`` must have a deterministic ``repr`` (dataclasses, enums, tuples, datetimes).
    """
    digest = hashlib.blake2b(repr((field, arguments)).encode(), digest_size=6).digest()
    return base64.urlsafe_b64encode(digest).decode()


def encode_cursor(field: str, key: Key, binding: str = "") -> str:
    """The cursor of the row whose order key is ``key`` in ``field``'s answer bound to ``binding``
    ("" = bound to the field alone)."""
    return base64.urlsafe_b64encode(orjson.dumps([binding or binding_of(field), *key])).decode()


def _refuse(field: str, cursor: str) -> InvalidArgument:
    quoted = repr(cursor)
    if len(cursor) > _QUOTE_CHARS:
        quoted = f"{cursor[:_QUOTE_CHARS]!r}… ({len(cursor)} characters)"
    return InvalidArgument(f"cursor {quoted} is not one {field} handed out")


def _key_value(value: Any) -> bool:
    if value is None or type(value) is str:
        return value is None or ("\x00" not in value and _utf8(value))
    return type(value) is int and -MAX_KEY_INT <= value <= MAX_KEY_INT


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:  # lone surrogates (JSON "\ud800") reach no database
        return False
    return True


def decode_cursor(field: str, cursor: str, binding: str = "") -> Key:
    """The order key ``cursor`` holds, or INVALID_ARGUMENT unless ``field`` handed it out for
    the arguments ``binding`` names."""
    try:
        if len(cursor) > MAX_CURSOR_CHARS:
            raise ValueError(cursor)
        raw = base64.b64decode(cursor.encode(), altchars=b"-_", validate=True).decode()
        value = json.loads(raw)
    except (binascii.Error, UnicodeError, ValueError, RecursionError):
        raise _refuse(field, cursor) from None
    if (
        not isinstance(value, list)
        or not value
        or value[0] != (binding or binding_of(field))
        or not all(_key_value(v) for v in value[1:])
    ):
        raise _refuse(field, cursor)
    return tuple(value[1:])


@dataclass(frozen=True)
class Page:
    """The rows after ``after`` (an order key; None = from the start), ``first`` of them (None = all
    rows, at most ``max_rows``).

    ``field`` names the root field (it appears in the RESULT_TOO_LARGE message and in cursors);
    ``binding`` the arguments cursors are bound to (see :func:`binding_of`); ``max_rows`` None = no
    cap (trusted callers: the CLI, the scheduler, tests); ``cursor`` the text ``after`` came from.
    """

    field: str = "answer"
    first: int | None = None
    after: Key | None = None
    max_rows: int | None = None
    binding: str = ""
    cursor: str = ""

    @classmethod
    def of(
        cls,
        field: str,
        first: int | None,
        after: str | None,
        *,
        page_size_max: int,
        max_rows: int,
        binding: str = "",
    ) -> Page:
        """A checked page: ``first`` within [0, page_size_max], ``after`` a cursor of ``field``
        bound to ``binding``."""
        if first is not None and first < 0:
            raise InvalidArgument(f"first must not be negative (got {first})")
        if first is not None and first > page_size_max:
            raise PageSizeTooLarge(f"first={first} is above the page size limit of {page_size_max}")
        key = None if after is None else decode_cursor(field, after, binding)
        return cls(field, first, key, max_rows, binding, after or "")

    def after_key(self, kinds: Sequence[type]) -> Key | None:
        """``after`` checked against the kinds of the answer's order key (``int`` or ``str``, each
        also NULL): INVALID_ARGUMENT for a key of another shape."""
        if self.after is None:
            return None
        ok = len(self.after) == len(kinds) and all(
            v is None or type(v) is kind for v, kind in zip(self.after, kinds, strict=False)
        )
        if not ok:
            raise _refuse(self.field, self.cursor)
        return self.after

    # --- keyset pages (answers aggregated in SQL) ------------------------------------------------

    @property
    def fetch(self) -> int | None:
        """Rows to fetch: the page, or one more than the cap (to see that it is exceeded)."""
        if self.first is not None:
            return self.first
        return None if self.max_rows is None else self.max_rows + 1

    def check(self, rows: Sequence[T]) -> Sequence[T]:
        """``rows`` fetched at most :attr:`fetch`; RESULT_TOO_LARGE when they exceed the cap."""
        if self.first is None:
            self.refuse_above(len(rows))
        return rows

    def key_cursors(self, keys: Iterable[Key]) -> list[str]:
        """Cursors of the rows whose order keys are ``keys``, in order."""
        # orjson: a page of 50,000 rows spends ~1.5 µs a cursor (stdlib json: ~9 µs).
        binding = self.binding or binding_of(self.field)
        dumps, b64 = orjson.dumps, base64.urlsafe_b64encode
        return [b64(dumps([binding, *key])).decode() for key in keys]

    # --- positional pages (answers computed whole in Python) -------------------------------------

    @property
    def offset(self) -> int:
        """Index of the first row of this page, for a positional cursor."""
        key = self.after_key((int,))
        if key is None:
            return 0
        (position,) = key
        if not isinstance(position, int) or position < 0:
            raise _refuse(self.field, self.cursor)
        return position + 1

    def apply(self, stmt: Select[Any]) -> Select[Any]:
        """``stmt`` (already ordered) limited to this page in SQL by position (OFFSET); keyset pages
        of ledger aggregates are cut by :func:`service.analytics.query.grouped_select` instead."""
        offset = self.offset
        if offset:
            stmt = stmt.offset(offset)
        return stmt if self.fetch is None else stmt.limit(self.fetch)

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
        offset = self.offset
        self.refuse_above(len(rows) - offset)
        end = None if self.first is None else offset + self.first
        return list(rows[offset:end])

    def cursors(self, count: int) -> list[str]:
        """Positional cursors of the ``count`` rows of a page cut by :meth:`slice`, in order."""
        offset = self.offset
        return self.key_cursors((offset + i,) for i in range(count))


WHOLE = Page()
"""Every row, no cap."""
