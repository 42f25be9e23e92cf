"""Bulk writes of a Polars frame without per-row Python bind processing (and, on PostgreSQL, the
bulk read back: :func:`copy_out_frame`).

* PostgreSQL: ``COPY … FROM STDIN`` of CSV written by Polars on the connection's own driver
  connection (so inside the caller's transaction): a null is an unquoted empty field, an empty
  string ``""``; floats in their shortest round-trip text, which ``float8`` reads back to the same
  double; booleans ``true``/``false``.
* PostgreSQL, binary (:func:`copy_binary_into`): ``COPY … (FORMAT binary)`` of the frame's Arrow
  columns encoded by ``pgpq`` — the billing lines, where the server's text parsing was most of a
  COPY's cost.
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


#: Polars dtype a frame's column takes for PostgreSQL's binary COPY into a column of each type
#: (``format_type`` without its modifier); a numeric keeps its own scale, the column's typmod
#: rounds it as it would text.
_BINARY_DTYPES: dict[str, pl.DataType | type[pl.DataType]] = {
    "integer": pl.Int32(),
    "bigint": pl.Int64(),
    "boolean": pl.Boolean(),
    "timestamp with time zone": pl.Datetime("us", "UTC"),
    "numeric": pl.Decimal,
    "character varying": pl.String(),
    "text": pl.String(),
}


def copy_binary_into(conn: Connection, target: str, frame: pl.DataFrame, *, freeze: bool = False) -> None:
    """``COPY target (frame's columns) FROM STDIN (FORMAT binary)`` on PostgreSQL, in ``conn``'s
    transaction; ``target`` as SQL already quotes it. The frame's Arrow columns are encoded by
    ``pgpq`` (Rust, no per-row Python): each value goes as its type's binary form — an integer,
    a timestamp or a numeric as a few bytes the server copies, a text as its bytes — so the
    server neither splits fields nor parses numbers and times, and nothing is escaped. A
    1 M-line CUR month: 9.3 → 6.8 s of the server's CPU to COPY against text, and 3.1–4.4 →
    1.8 s of ours to encode against formatting text (BENCHMARKS.md (o)). Each column is cast to
    the dtype whose binary form its target column reads (``line_no`` Int64 → ``integer``: an
    out-of-range value raises); a column type without one raises ``TypeError``. ``freeze``:
    ``COPY … (FREEZE)``, for a table created or truncated in the current transaction."""
    if frame.is_empty():
        return
    import pgpq  # here: pgpq and pyarrow (~50 MB) load only in a process that imports billing lines

    driver = conn.connection.driver_connection
    assert driver is not None, "a connection in use has its driver connection"
    types = dict(
        driver.execute(
            "SELECT attname, format_type(atttypid, NULL) FROM pg_attribute"
            " WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped",
            (target,),
        ).fetchall()
    )
    casts = []
    for column, dtype in frame.schema.items():
        pg_type = types.get(column)
        if pg_type is None:
            raise TypeError(f"binary COPY into {target}: it has no column {column!r}")
        wanted = _BINARY_DTYPES.get(pg_type)
        if wanted is None:
            raise TypeError(f"binary COPY into {target}: no binary form for column {column!r} ({pg_type})")
        if wanted is pl.Decimal:
            if not isinstance(dtype, pl.Decimal):
                raise TypeError(f"binary COPY into {target}: column {column!r} is {dtype}, not a Decimal")
        elif dtype != wanted:
            casts.append(pl.col(column).cast(wanted, strict=True))
    if casts:
        frame = frame.with_columns(casts)
    table = frame.to_arrow()
    encoder = pgpq.ArrowToPostgresBinaryEncoder(table.schema)
    names = ", ".join(f'"{c}"' for c in frame.columns)
    options = "FORMAT binary, FREEZE" if freeze else "FORMAT binary"
    cursor = driver.cursor()
    try:
        with cursor.copy(f"COPY {target} ({names}) FROM STDIN ({options})") as copy:
            copy.write(encoder.write_header())
            for batch in table.to_batches():
                copy.write(encoder.write_batch(batch))
            copy.write(encoder.finish())
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
