"""Read queries over the account's billing data: billing lines (keyset pages) and GPU rates.

Both are account-wide (a bill names every project's instances): ``access`` must be everything,
else ``FORBIDDEN``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, func, or_, select

from service.analytics.access import Access
from service.analytics.errors import InvalidArgument, PageSizeTooLarge
from service.analytics.window import Window
from service.dbtypes import table_of
from service.models import BillingLine, GpuRate

#: Filter keys of billing_lines_page → billing_line columns.
LINE_FILTER_COLUMNS = {
    "provider": "provider",
    "account": "account",
    "resource": "resource_id",
    "charge_category": "charge_category",
}
#: Filter keys of rates_in (same names as the gpu_rate columns).
RATE_FILTER_COLUMNS = ("source_kind", "environment", "instance_id", "instance_type", "gpu_model")


def encode_line_cursor(line_id: int) -> str:
    return base64.urlsafe_b64encode(f"billing_line:{line_id}".encode()).decode()


def decode_line_cursor(cursor: str) -> int:
    try:
        text = base64.b64decode(cursor.encode(), altchars=b"-_", validate=True).decode()
        kind, _, number = text.partition(":")
        line_id = int(number) if kind == "billing_line" else -1
    except (binascii.Error, UnicodeError, ValueError):
        line_id = -1
    if line_id < 0 or encode_line_cursor(line_id) != cursor:
        raise InvalidArgument(f"cursor {cursor!r} is not one this API handed out")
    return line_id


@dataclass(frozen=True)
class LinePage:
    lines: list[BillingLine]
    has_next_page: bool
    total_count: int


def billing_lines_page(
    conn: Connection,
    window: Window | None,
    filters: Mapping[str, Sequence[str]],
    *,
    access: Access,
    first: int,
    after: str | None,
    page_size_max: int,
) -> LinePage:
    """Up to ``first`` lines after the cursor (charge overlapping ``window`` if given), in import order."""
    access.require_everything("billingLines")
    if first < 0:
        raise InvalidArgument(f"first must not be negative (got {first})")
    if first > page_size_max:
        raise PageSizeTooLarge(f"first={first} is above the page size limit of {page_size_max}")
    t = table_of(BillingLine)
    terms: list[Any] = []
    if window is not None:
        terms += [t.c.charge_start < window.end, t.c.charge_end > window.start]
    terms += [t.c[LINE_FILTER_COLUMNS[k]].in_(list(v)) for k, v in filters.items() if v]
    total = conn.execute(select(func.count()).select_from(t).where(*terms)).scalar_one()
    # Keyset on id: ids grow with import order; ordering by id alone keeps the cursor one integer.
    stmt = select(t).where(*terms).order_by(t.c.id).limit(first + 1)
    if after is not None:
        stmt = stmt.where(t.c.id > decode_line_cursor(after))
    rows = conn.execute(stmt).mappings().all()
    lines = [BillingLine.model_validate(dict(r)) for r in rows[:first]]
    return LinePage(lines, len(rows) > first, int(total))


def rates_in(
    conn: Connection, window: Window, filters: Mapping[str, Sequence[str]], *, access: Access
) -> list[GpuRate]:
    """The GPU rates valid at some time in ``window`` matching ``filters``."""
    access.require_everything("rates")
    t = table_of(GpuRate)
    terms: list[Any] = [t.c.valid_from < window.end, or_(t.c.valid_to.is_(None), t.c.valid_to > window.start)]
    terms += [t.c[k].in_(list(v)) for k, v in filters.items() if v and k in RATE_FILTER_COLUMNS]
    stmt = select(t).where(*terms).order_by(t.c.environment, t.c.instance_id, t.c.valid_from, t.c.id)
    return [GpuRate.model_validate(dict(r)) for r in conn.execute(stmt).mappings()]
