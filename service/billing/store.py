"""Writing billing lines: replace a period's (or a file's) lines, record files, quarantine rows.

Every function takes a ``Connection`` inside the caller's transaction: the ingestor deletes the
old lines, inserts the new ones and writes the ``billing_file`` rows of one billing period (or
one file) in one transaction, so a reader sees either the old import or the new one, never a mix.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

import polars as pl
from sqlalchemy import Connection, and_, delete, func, insert, or_, select, text

from connectors.billing import BILLING_SCHEMA, MONEY, UTC_TIME, RefusedRow
from service.db import local_settings
from service.dbtypes import table_of
from service.ledger import bulk
from service.models import BillingFile, BillingLine, Rejection

#: Keys per ``IN (…)`` query: under SQLite's and PostgreSQL's bound-parameter limits.
KEY_CHUNK = 500

_LINES = table_of(BillingLine)
_FILES = table_of(BillingFile)
#: The temporary table (SQLite) a batch's keys are probed through.
_PROBE = "billing_key_probe"
_EXACT = [c for c, t in BILLING_SCHEMA.items() if t == MONEY]  # Money / Quantity columns
_TIMES = [c for c, t in BILLING_SCHEMA.items() if t == UTC_TIME]
_NANOS = 10**9
#: Bytes handed to the driver at a time by a COPY.
_COPY_BLOCK = 1 << 20
#: SQLite page cache of an importing connection, in KiB (``begin_import``).
IMPORT_CACHE_KIB = 131_072


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
    sparing: Sequence[int] = (),
) -> Deleted:
    """Delete ``source``'s lines charged in ``period`` (start in ``[start, end)``) and those of
    ``files``; what was deleted (count and charge span, for re-pricing). ``sparing``: tables
    (``tableoid``) left alone — a unit table the import replaces whole (``service.billing.unit_tables``)."""
    clauses = []
    if period is not None:
        clauses.append(and_(_LINES.c.charge_start >= period[0], _LINES.c.charge_start < period[1]))
    if files:
        clauses.append(_LINES.c.source_file.in_(list(files)))
    if not clauses:
        return Deleted(0, None, None)
    scope = and_(_LINES.c.source == source, or_(*clauses))
    if sparing:
        return _delete_sparing(conn, source, period, files, sparing)
    count, first, last = conn.execute(
        select(func.count(), func.min(_LINES.c.charge_start), func.max(_LINES.c.charge_end)).where(scope)
    ).one()
    if count:
        conn.execute(delete(_LINES).where(scope))
    return Deleted(int(count), aware(first), aware(last))


def _line_tables(conn: Connection, sparing: Sequence[int]) -> list[str]:
    """``billing_line`` itself and its unit tables but those ``sparing`` names, each to be read
    alone (``ONLY``): a filter on ``tableoid`` would look up and fetch every line of the spared
    table first — on a re-import, the whole month it replaces."""
    children = conn.execute(
        text(
            "SELECT CAST(i.inhrelid AS bigint), CAST(CAST(i.inhrelid AS regclass) AS text)"
            " FROM pg_inherits i WHERE i.inhparent = CAST('public.billing_line' AS regclass) ORDER BY 1"
        )
    ).all()
    spared = {int(oid) for oid in sparing}
    return ["ONLY public.billing_line", *(f"ONLY {name}" for oid, name in children if int(oid) not in spared)]


def _delete_sparing(
    conn: Connection,
    source: str,
    period: tuple[dt.datetime, dt.datetime] | None,
    files: Sequence[str],
    sparing: Sequence[int],
) -> Deleted:
    """:func:`delete_lines` on PostgreSQL, table by table, leaving the ``sparing`` tables alone."""
    terms = []
    if period is not None:
        terms.append("(charge_start >= %(start)s AND charge_start < %(end)s)")
    if files:
        terms.append("source_file = ANY(%(files)s)")
    where = f"source = %(source)s AND ({' OR '.join(terms)})"
    params = {
        "source": source,
        "files": list(files),
        "start": period and period[0],
        "end": period and period[1],
    }
    count, first, last = 0, None, None
    with excluding(conn):
        for table in _line_tables(conn, sparing):
            n, lo, hi = conn.exec_driver_sql(
                f"SELECT count(*), min(charge_start), max(charge_end) FROM {table} WHERE {where}", params
            ).one()
            if n:
                conn.exec_driver_sql(f"DELETE FROM {table} WHERE {where}", params)
                count += int(n)
                first = lo if first is None else min(first, lo)
                last = hi if last is None else max(last, hi)
    return Deleted(count, aware(first), aware(last))


def excluding(conn: Connection) -> AbstractContextManager[None]:
    """PostgreSQL's constraint exclusion for the statements inside, on tables read one by one
    (``ONLY``): a unit table whose CHECK contradicts the query — another source's, another
    provider's (``service.billing.unit_tables``) — is not read at all. The server's default
    (``partition``) applies it only to the children of a table read through it."""
    return local_settings(conn, **_EXCLUDING)


#: :func:`excluding`'s setting
_EXCLUDING = {"constraint_exclusion": "on"}


def aware(value: dt.datetime | str | None) -> dt.datetime | None:
    # min()/max() bypass the column type: SQLite gives text, PostgreSQL an aware datetime.
    if value is None:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def begin_import(conn: Connection) -> int | None:
    """Give an importing SQLite connection a larger page cache (``IMPORT_CACHE_KIB``); the
    setting to restore with :func:`end_import` (``None``: nothing was changed).

    ``billing_line``'s indexes are keyed by random line ids and resource ids, so every batch
    writes pages all over them; with SQLite's default 2 MB cache each batch reads most of them
    back (measured: 600k lines in 12 batches insert in 13.7 s with 128 MiB, 23.3 s with 2 MB).
    The cache is bounded: memory stays O(batch), whatever the run's size.
    """
    if conn.dialect.name != "sqlite":
        return None
    old = int(conn.exec_driver_sql("PRAGMA cache_size").scalar_one())
    conn.exec_driver_sql(f"PRAGMA cache_size=-{IMPORT_CACHE_KIB}")
    return old


def end_import(conn: Connection, old: int | None) -> None:
    """Put back the page cache setting :func:`begin_import` changed (the connection is pooled)."""
    if old is not None:
        conn.exec_driver_sql(f"PRAGMA cache_size={old}")


def existing_keys(
    conn: Connection, source: str, keys: Sequence[str] | pl.Series, *, sparing: Sequence[int] = ()
) -> pl.DataFrame:
    """Lines of ``source`` stored under ``keys`` — including lines this connection inserted
    earlier in its open transaction: ``line_key``, ``source_file``, ``line_no``. ``sparing``
    (PostgreSQL): unit tables whose lines do not count (the import replaces them whole).

    One join per call, whatever the number of keys: the keys go into a temporary table — by
    ``COPY`` on PostgreSQL, one ``executemany`` on SQLite — joined on the ``(source, line_key)``
    unique index. Nothing grows with what is stored: each stored line is looked up by its key.
    """
    schema = {"line_key": pl.String, "source_file": pl.String, "line_no": pl.Int64}
    probe = pl.Series("line_key", keys, dtype=pl.String).drop_nulls().unique(maintain_order=True)
    if probe.is_empty():
        return pl.DataFrame(schema=schema)
    if conn.dialect.name == "postgresql":
        found = _probe_postgresql(conn, source, probe, sparing)
        return pl.DataFrame(found, schema=schema, orient="row")
    unique = probe.to_list()
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql(f"CREATE TEMP TABLE IF NOT EXISTS {_PROBE} (line_key TEXT PRIMARY KEY)")
        conn.exec_driver_sql(f"DELETE FROM temp.{_PROBE}")
        conn.exec_driver_sql(f"INSERT INTO temp.{_PROBE} (line_key) VALUES (?)", [(k,) for k in unique])
        # CROSS JOIN fixes the loop order (SQLite's rule): each probe key looks up the unique
        # (source, line_key) index. Left to itself the planner scanned the source's lines by the
        # source_file index instead: 23 s of a 1M-line import.
        found = [
            tuple(r)
            for r in conn.exec_driver_sql(
                f"SELECT l.line_key, l.source_file, l.line_no FROM temp.{_PROBE} AS k"
                " CROSS JOIN billing_line AS l WHERE l.source = ? AND l.line_key = k.line_key",
                (source,),
            )
        ]
        conn.exec_driver_sql(f"DELETE FROM temp.{_PROBE}")
    else:
        found = []
        for i in range(0, len(unique), KEY_CHUNK):
            chunk = unique[i : i + KEY_CHUNK]
            found += [
                tuple(r)
                for r in conn.execute(
                    select(_LINES.c.line_key, _LINES.c.source_file, _LINES.c.line_no).where(
                        _LINES.c.source == source, _LINES.c.line_key.in_(chunk)
                    )
                )
            ]
    return pl.DataFrame(found, schema=schema, orient="row")


def _probe_postgresql(
    conn: Connection, source: str, keys: pl.Series, sparing: Sequence[int] = ()
) -> list[tuple[object, ...]]:
    """``keys`` COPYed into a temporary table (dropped at the transaction's end), joined to
    ``billing_line``, each key looked up in the unique index (hash and merge joins off for the
    query). Not analyzed: with the join method fixed, its size as the planner reads it from the
    table's pages makes the same plan, and an ANALYZE a batch cost ~16 ms of server CPU."""
    conn.exec_driver_sql(f"CREATE TEMP TABLE IF NOT EXISTS {_PROBE} (line_key text NOT NULL) ON COMMIT DROP")
    conn.exec_driver_sql(f"TRUNCATE {_PROBE}")
    bulk.copy_csv(conn, _PROBE, keys.to_frame("line_key"))
    tables = _line_tables(conn, sparing) if sparing else ["billing_line"]
    query = " UNION ALL ".join(
        f"SELECT l.line_key, l.source_file, l.line_no FROM {_PROBE} AS k"
        f" JOIN {table} AS l ON l.line_key = k.line_key WHERE l.source = %(source)s"
        for table in tables
    )
    # Each probe key looked up in the unique index, whatever the planner's guess: against a
    # stored month of 1 M lines it hashed the whole of it for every batch of 20,000 keys (365 ms
    # of server CPU a batch where the lookups take 42). Only for this query: the settings go back.
    with local_settings(conn, **PROBE_SETTINGS):
        rows = conn.exec_driver_sql(query, {"source": source}).all()
    return [tuple(r) for r in rows]


#: The probe's settings: each key looked up by index, unit tables of other sources not read.
PROBE_SETTINGS = {"enable_hashjoin": "off", "enable_mergejoin": "off", **_EXCLUDING}


def insert_lines(conn: Connection, source: str, lines: pl.DataFrame) -> int:
    """Insert ``lines`` (``BILLING_SCHEMA``) as ``source``'s; the number inserted.

    The driver's parameters are built column-wise by Polars, stored exactly as the column types
    (``Money``/``Quantity``, ``UTCDateTime``) would bind them, without their per-row Python
    bind processing (three quarters of an import's time through ``insert(...)``):

    * SQLite: money and quantities as integer nanos (``Decimal(38, 9)`` × 10⁹, exact: the ingestor
      refused amounts beyond 2⁶³−1 nanos); datetimes as the naive-UTC text SQLAlchemy's
      ``DateTime`` writes (``2025-09-01 00:00:00.000000``), so stored bytes are the same as an
      ORM insert's; one ``executemany`` of tuples.
    * PostgreSQL: ``COPY … FROM STDIN`` in the binary format (:func:`bulk.copy_binary_into`, as a
      period's unit tables are filled): money as its exact decimal, datetimes as their instants.

    Other databases go through SQLAlchemy's ``insert`` (the column types bind).
    """
    if lines.is_empty():
        return 0
    frame = lines.select(list(BILLING_SCHEMA)).with_columns(pl.lit(source).alias("source"))
    dialect = conn.dialect.name
    if dialect == "sqlite":
        frame = frame.with_columns(
            *[(pl.col(c) * _NANOS).cast(pl.Int64) for c in _EXACT],
            *[bulk.sqlite_time(c) for c in _TIMES],
        )
        bulk.insert_tuples(conn, "billing_line", frame)
    elif dialect == "postgresql":
        bulk.copy_binary_into(conn, '"billing_line"', frame)
    else:
        conn.execute(insert(_LINES), frame.to_dicts())
    return frame.height


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
        insert(table_of(Rejection)),
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
