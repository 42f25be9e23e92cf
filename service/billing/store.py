"""Writing billing lines: replace a period's (or a file's) lines, record files, quarantine rows.

Every function takes a ``Connection`` inside the caller's transaction: the ingestor deletes the
old lines, inserts the new ones and writes the ``billing_file`` rows of one billing period (or
one file) in one transaction, so a reader sees either the old import or the new one, never a mix.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import polars as pl
from sqlalchemy import Connection, and_, delete, func, insert, or_, select

from connectors.billing import BILLING_SCHEMA, RefusedRow
from service.models import BillingFile, BillingLine, Rejection

#: Keys per ``IN (…)`` query: under SQLite's and PostgreSQL's bound-parameter limits.
KEY_CHUNK = 500

_LINES = BillingLine.__table__
_FILES = BillingFile.__table__


@dataclass(frozen=True, slots=True)
class Deleted:
    lines: int
    first_start: dt.datetime | None
    last_end: dt.datetime | None


def delete_lines(
    conn: Connection,
    source: str,
    *,
    period: tuple[dt.datetime, dt.datetime] | None = None,
    files: Sequence[str] = (),
) -> Deleted:
    """Delete ``source``'s lines charged in ``period`` (start in ``[start, end)``) and those of
    ``files``; what was deleted (count and charge span, for re-pricing)."""
    clauses = []
    if period is not None:
        clauses.append(and_(_LINES.c.charge_start >= period[0], _LINES.c.charge_start < period[1]))
    if files:
        clauses.append(_LINES.c.source_file.in_(list(files)))
    if not clauses:
        return Deleted(0, None, None)
    scope = and_(_LINES.c.source == source, or_(*clauses))
    count, first, last = conn.execute(
        select(func.count(), func.min(_LINES.c.charge_start), func.max(_LINES.c.charge_end)).where(scope)
    ).one()
    if count:
        conn.execute(delete(_LINES).where(scope))
    return Deleted(int(count), _aware(first), _aware(last))


def _aware(value: dt.datetime | str | None) -> dt.datetime | None:
    # min()/max() bypass the column type: SQLite gives text, PostgreSQL an aware datetime.
    if value is None:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def existing_keys(conn: Connection, source: str, keys: Sequence[str]) -> pl.DataFrame:
    """Lines of ``source`` already stored under ``keys``: ``line_key``, ``source_file``, ``line_no``."""
    found: list[tuple[str, str, int]] = []
    for i in range(0, len(keys), KEY_CHUNK):
        chunk = list(keys[i : i + KEY_CHUNK])
        found += conn.execute(
            select(_LINES.c.line_key, _LINES.c.source_file, _LINES.c.line_no).where(
                _LINES.c.source == source, _LINES.c.line_key.in_(chunk)
            )
        ).all()
    return pl.DataFrame(
        found,
        schema={"line_key": pl.String, "source_file": pl.String, "line_no": pl.Int64},
        orient="row",
    )


def insert_lines(conn: Connection, source: str, lines: pl.DataFrame) -> int:
    """Insert ``lines`` (``BILLING_SCHEMA``) as ``source``'s. Money goes in as exact ``Decimal``
    (the ``Money``/``Quantity`` column types quantize half-even to 1e-9 on bind)."""
    if lines.is_empty():
        return 0
    # Parameters are built column-wise by Polars (Decimal and aware datetimes come out exact).
    frame = lines.select(list(BILLING_SCHEMA)).with_columns(pl.lit(source).alias("source"))
    rows = frame.to_dicts()
    conn.execute(insert(_LINES), rows)
    return len(rows)


def replace_file_rows(conn: Connection, source: str, rows: Iterable[dict[str, object]]) -> None:
    """Write ``billing_file`` rows, replacing earlier rows of the same ``source_file``."""
    rows = [dict(r, source=source) for r in rows]
    if not rows:
        return
    names = [str(r["source_file"]) for r in rows]
    conn.execute(delete(_FILES).where(_FILES.c.source == source, _FILES.c.source_file.in_(names)))
    conn.execute(insert(_FILES), rows)


def delete_period_files(conn: Connection, source: str, period_start: dt.datetime) -> None:
    """Forget the ``billing_file`` rows of a superseded import of the period (an older assembly
    whose files had other names: their lines were just replaced)."""
    conn.execute(
        delete(_FILES).where(_FILES.c.source == source, _FILES.c.billing_period_start == period_start)
    )


def insert_rejections(conn: Connection, run_id: int, source: str, refused: Sequence[RefusedRow]) -> None:
    if not refused:
        return
    conn.execute(
        insert(Rejection.__table__),
        [
            {
                "run_id": run_id,
                "connector": source,
                "file": _cut(r.file, 500),
                "line": r.line,
                "field": _cut(r.column, 100),
                "reason": r.reason,
                "raw": r.raw,
            }
            for r in refused
        ],
    )


def _cut(text: str | None, length: int) -> str | None:
    return text if text is None or len(text) <= length else text[: length - 1] + "…"
