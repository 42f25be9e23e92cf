"""Bulk writes of a Polars frame without per-row Python bind processing (and, on PostgreSQL, the
bulk read back: :func:`copy_out_frame`).

* PostgreSQL: ``COPY … FROM STDIN`` of CSV written by Polars on the connection's own driver
  connection (so inside the caller's transaction): a null is an unquoted empty field, an empty
  string ``""``; floats in their shortest round-trip text, which ``float8`` reads back to the same
  double; booleans ``true``/``false``.
* SQLite: one ``INSERT … VALUES (?, …)`` executed over the rows as tuples (one ``executemany``
  fed lazily, so a batch's Python tuples are never all alive at once).

The caller gives each column already in the form its column type would bind (see
:func:`sqlite_time`, :func:`pg_time`, :func:`nanos_text`).
"""

from __future__ import annotations

from typing import Any

import polars as pl
from sqlalchemy import Connection, Select

#: SQLAlchemy's ``DateTime`` storage format on SQLite (naive UTC text, always with microseconds).
SQLITE_TIME = "%Y-%m-%d %H:%M:%S%.6f"
#: UTC text for ``timestamptz`` input.
PG_TIME = "%Y-%m-%d %H:%M:%S%.6f+00"
_COPY_BLOCK = 1 << 20
_TUPLE_ROWS = 10_000
_NANOS = 1_000_000_000


def sqlite_time(column: str) -> pl.Expr:
    """An aware datetime column as SQLite's stored text of its UTC instant."""
    return pl.col(column).dt.convert_time_zone("UTC").dt.replace_time_zone(None).dt.strftime(SQLITE_TIME)


def pg_time(column: str) -> pl.Expr:
    """An aware datetime column as ``timestamptz`` input text of its UTC instant."""
    return pl.col(column).dt.convert_time_zone("UTC").dt.strftime(PG_TIME)


def nanos_text(column: str) -> pl.Expr:
    """Integer nano-units as exact decimal text with 9 places (``-1`` → ``-0.000000001``)."""
    value = pl.col(column).cast(pl.Int64)
    magnitude = value.abs()
    return pl.concat_str(
        pl.when(value < 0).then(pl.lit("-")).otherwise(pl.lit("")),
        (magnitude // _NANOS).cast(pl.String),
        pl.lit("."),
        (magnitude % _NANOS).cast(pl.String).str.zfill(9),
    ).alias(column)


def copy_csv(conn: Connection, table: str, frame: pl.DataFrame) -> None:
    """``COPY table (frame's columns) FROM STDIN`` on PostgreSQL, in ``conn``'s transaction."""
    copy_csv_into(conn, f'"{table}"', frame)


def copy_csv_into(conn: Connection, target: str, frame: pl.DataFrame) -> None:
    """:func:`copy_csv` into ``target``, a table name as SQL already quotes it (schema-qualified)."""
    if frame.is_empty():
        return
    names = ", ".join(f'"{c}"' for c in frame.columns)
    data = frame.write_csv(include_header=False)
    driver = conn.connection.driver_connection
    assert driver is not None, "a connection in use has its driver connection"
    cursor = driver.cursor()
    try:
        with cursor.copy(f"COPY {target} ({names}) FROM STDIN (FORMAT csv)") as copy:
            for i in range(0, len(data), _COPY_BLOCK):
                copy.write(data[i : i + _COPY_BLOCK])
    finally:
        cursor.close()


def insert_tuples(conn: Connection, table: str, frame: pl.DataFrame) -> None:
    """One ``INSERT`` statement, one ``executemany`` over the frame's rows (SQLite's ``?``
    parameters) on ``conn``'s driver connection, in its transaction; the row tuples are made
    ``_TUPLE_ROWS`` at a time as the driver consumes them."""
    if frame.is_empty():
        return
    names = ", ".join(f'"{c}"' for c in frame.columns)
    sql = f'INSERT INTO "{table}" ({names}) VALUES ({", ".join("?" * frame.width)})'
    driver = conn.connection.driver_connection
    assert driver is not None, "a connection in use has its driver connection"
    cursor = driver.cursor()
    try:
        cursor.executemany(sql, frame.iter_rows(buffer_size=_TUPLE_ROWS))
    finally:
        cursor.close()


def copy_out_frame(conn: Connection, stmt: Select[Any], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """``stmt``'s rows as a frame of ``schema`` through ``COPY (stmt) TO STDOUT`` as CSV on PostgreSQL:
    no driver row or SQLAlchemy row object per row."""
    compiled = stmt.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
    processors: Any = compiled._bind_processors  # as SQLAlchemy's execute binds them
    escaped: dict[str, str] = compiled.escaped_bind_names or {}
    params = {
        escaped.get(k, k): processors[k](v) if k in processors else v
        for k, v in compiled.construct_params(escape_names=False).items()
    }
    # Any positive value prints floats shortest-exact (PostgreSQL ≥ 12): they parse back bit for bit.
    # SET LOCAL also opens the transaction the COPY then runs in (the request's statement_timeout).
    conn.exec_driver_sql("SET LOCAL extra_float_digits = 3")
    data = bytearray()
    raw: Any = conn.connection.dbapi_connection
    copy_sql = f"COPY ({compiled.string}) TO STDOUT WITH (FORMAT csv)"
    with raw.cursor() as cursor, cursor.copy(copy_sql, params) as copy:
        for block in copy:
            data += block
    if not data:
        return pl.DataFrame(schema=schema)
    # CSV distinguishes NULL (nothing) from '' (quoted); polars keeps that distinction.
    return pl.read_csv(bytes(data), has_header=False, schema=schema)
