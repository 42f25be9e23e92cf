"""Per-day columnar segments of ``ledger_hour`` (``ledger_hour_segment``): what device-level usage
answers read instead of grouping the hours in SQL.

A segment is one UTC day of ``ledger_hour`` rows as an Arrow IPC file (LZ4 per column), sorted by
(``hour_index``, ``device_id``, ``workload_key``) in the database's own order, with only the
columns a usage answer reads: the keys, every dimension (filters and access scopes apply to
rows), whether the time was unallocated, the default metric, energy, and each time measure
already multiplied by the MIG fraction (:data:`GPU_SECONDS`) by the very SQL expression the
grouped query sums (``CAST(x * gpu_fraction AS FLOAT)``), so a device-hour held by one workload
reads back the same double the database would have summed.

Segments are rebuilt whole for every day a writer rewrites, in its transaction
(:func:`service.ledger.store.rebuild_days` calls :func:`rebuild`): like ``ledger_day`` and the
group rollups they never disagree with the hours they copy. :func:`coverage` double-checks that
before any read: a day's segment must hold as many rows as ``ledger_group_day`` says the day has
(a database migrated before segments existed, or a writer that bypassed ``rebuild_days``, reads
the hours in SQL instead). Days whose hours were pruned (``gpu-ledger prune``) are left out, as
the pruned hours are.

Text columns (the device, every dimension, the default metric) are stored dictionary-encoded: an
Arrow dictionary whose values are the day's distinct values in byte order (a polars ``Enum``).
A day repeats a few thousand devices and a handful of labels over its rows, so the dictionary
reads several times faster than the text, and a device's code orders as its id does. Format 1
(before dictionaries: plain text columns) is still read — :func:`decode` encodes its text on
the fly — and migration 0012 rebuilds every stored day in format 2.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import polars as pl
from sqlalchemy import (
    Connection,
    Float,
    Integer,
    case,
    cast,
    delete,
    func,
    insert,
    literal,
    select,
    union_all,
)

from connectors.sdk.shapes import DIMENSIONS
from service.analytics.dims import MIXED_DEFAULT_METRIC
from service.dbtypes import table_of
from service.ledger import bulk
from service.ledger.rollups import hour_days
from service.metrics_catalog import UTIL_METRICS
from service.models import LedgerGroupDay, LedgerHour, LedgerHourSegment

SEGMENT = table_of(LedgerHourSegment)
HOUR = table_of(LedgerHour)
GROUP_DAY = table_of(LedgerGroupDay)

HOURS_PER_DAY = 24
#: The time measures, each stored as ``gpu_<name>`` = seconds × gpu_fraction (GPU-seconds).
TIME_MEASURES: tuple[str, ...] = (
    "present_s",
    "observed_s",
    "busy_s",
    "idle_s",
    *[f"{p}_s_{m.value}" for m in UTIL_METRICS for p in ("obs", "busy", "idle")],
)
GPU_SECONDS: tuple[str, ...] = tuple(f"gpu_{name}" for name in TIME_MEASURES)
#: Dimension columns besides ``device_id`` (``user_name`` for USER …).
DIMENSION_COLUMNS: tuple[str, ...] = tuple(d.column for d in DIMENSIONS if d.column != "device_id")
#: The columns of a segment, text as plain strings (what the database hands over; stored as
#: dictionaries: :data:`TEXT_COLUMNS`).
SCHEMA: dict[str, pl.DataType] = {
    "hour_index": pl.Int64(),
    "device_id": pl.String(),
    "unallocated": pl.Boolean(),
    **{name: pl.String() for name in DIMENSION_COLUMNS},
    "default_metric": pl.String(),
    **{name: pl.Float64() for name in GPU_SECONDS},
    "energy_j": pl.Float64(),
}
#: The text columns, each stored as an Enum of its sorted distinct values (format 2).
TEXT_COLUMNS: tuple[str, ...] = tuple(name for name, dtype in SCHEMA.items() if dtype == pl.String)
#: A label every default-metric dictionary holds besides the day's values: an answer folds
#: device-hours of different default metrics into it (``dims.MIXED_DEFAULT_METRIC``), and a
#: polars expression can only choose between values of one dictionary.
EXTRA_METRIC_LABELS: tuple[str, ...] = (MIXED_DEFAULT_METRIC,)
#: Compression of a segment's columns: LZ4 decodes several times faster than zstd for about the
#: same size here (dimension columns are runs of a few values).
COMPRESSION: Literal["lz4"] = "lz4"


def _rows_select(first_day: int, last_day: int) -> Any:
    h = HOUR
    return (
        select(
            h.c.hour_index,
            h.c.device_id,
            case((h.c.workload_key == "", 1), else_=0).label("unallocated"),
            *[h.c[name] for name in DIMENSION_COLUMNS],
            h.c.default_metric,
            # the grouped query's own term (service.analytics.window.hours): the same double
            *[
                cast(h.c[n] * h.c.gpu_fraction, Float).label(g)
                for n, g in zip(TIME_MEASURES, GPU_SECONDS, strict=True)
            ],
            h.c.energy_j,
        )
        .where(*hour_days(first_day, last_day))
        .order_by(h.c.hour_index, h.c.device_id, h.c.workload_key)
    )


def _read_rows(conn: Connection, first_day: int, last_day: int) -> pl.DataFrame:
    """The days' ledger rows as a frame of :data:`SCHEMA`, in segment order."""
    stmt = _rows_select(first_day, last_day)
    read_schema = {**SCHEMA, "unallocated": pl.Int8()}
    if conn.dialect.name == "postgresql":
        frame = bulk.copy_out_frame(conn, stmt, read_schema)
    else:
        rows = conn.execute(stmt).all()
        columns = list(zip(*rows, strict=True)) if rows else [()] * len(read_schema)
        frame = pl.DataFrame(
            [
                pl.Series(name, values, dtype=dtype, strict=False)
                for (name, dtype), values in zip(read_schema.items(), columns, strict=True)
            ]
        )
    return frame.with_columns(pl.col("unallocated").cast(pl.Boolean))


def sorted_enum(column: pl.Series, extra: Sequence[str] = ()) -> pl.Series:
    """``column`` (text, or an Enum) as an Enum of its distinct values and ``extra``, in byte
    order (nulls stay null)."""
    if isinstance(column.dtype, pl.Enum) and not extra:
        categories = column.dtype.categories
        if categories.is_sorted() and column.to_physical().n_unique() == len(categories):
            return column
    values = column.cast(pl.String).drop_nulls()
    categories = pl.concat([values, pl.Series(values.name, extra, dtype=pl.String)]).unique().sort()
    return column.cast(pl.String).cast(pl.Enum(categories))


def _dictionaries(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with each text column as :func:`sorted_enum` of its values (format 2)."""
    return frame.with_columns(
        sorted_enum(frame[name], EXTRA_METRIC_LABELS if name == "default_metric" else ())
        for name in TEXT_COLUMNS
        if name in frame.columns
    )


def encode(frame: pl.DataFrame) -> bytes:
    sink = io.BytesIO()
    _dictionaries(frame).write_ipc(sink, compression=COMPRESSION)
    return sink.getvalue()


def decode(data: bytes, columns: Sequence[str] | None = None) -> pl.DataFrame:
    """A stored segment (``columns`` of it), its text columns Enums of sorted values; a format-1
    segment's text is encoded here (slower: ``gpu-ledger db upgrade`` rebuilds them)."""
    frame = pl.read_ipc(io.BytesIO(data), columns=list(columns) if columns is not None else None)
    stale = [name for name in TEXT_COLUMNS if name in frame.columns and frame.schema[name] == pl.String]
    return _dictionaries(frame) if stale else frame


def concat(frames: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """Segments of several days as one frame: each text column an Enum of the union of the days'
    values, in byte order (the days of a steady fleet share one dictionary: nothing to recode)."""
    if len(frames) == 1:
        return frames[0]
    first = frames[0]
    recode = {}
    for name, dtype in first.schema.items():
        if not isinstance(dtype, pl.Enum):
            continue
        if all(f.schema[name] == dtype for f in frames[1:]):
            continue
        union = pl.concat([f.schema[name].categories for f in frames]).unique().sort()  # type: ignore[attr-defined]
        recode[name] = pl.Enum(union)
    if recode:
        frames = [f.with_columns(pl.col(n).cast(e) for n, e in recode.items()) for f in frames]
    return pl.concat(frames, how="vertical", rechunk=False)


def rebuild(conn: Connection, first_day: int, last_day: int) -> None:
    """Recompute the segments of days ``[first_day, last_day]`` from ``ledger_hour`` (a day
    without hours has none)."""
    conn.execute(delete(SEGMENT).where(SEGMENT.c.day_index >= first_day, SEGMENT.c.day_index <= last_day))
    rows = _read_rows(conn, first_day, last_day)
    if rows.height == 0:
        return
    days = rows.with_columns((pl.col("hour_index") // HOURS_PER_DAY).alias("_day"))
    values = [
        {"day_index": int(day[0]), "hour_rows": part.height, "arrow": encode(part.drop("_day"))}
        for day, part in days.partition_by("_day", as_dict=True, maintain_order=True).items()
    ]
    conn.execute(insert(SEGMENT), values)


def coverage(conn: Connection, first_day: int, last_day: int, kept_hour: int | None) -> dict[int, int] | None:
    """``{day: rows}`` of the segments of days ``[first_day, last_day]`` whose hours are kept
    (``kept_hour``: the first hour ``ledger_hour`` holds after a prune, None where none ran), or
    None unless every such day with ledger rows has its segment, of as many rows
    (``ledger_group_day.hour_rows``). One statement: the segments' counts and the rollup's."""
    kept = None if kept_hour is None else kept_hour // HOURS_PER_DAY
    lo = first_day if kept is None else max(first_day, kept)
    if lo > last_day:
        return {}
    g = GROUP_DAY
    stmt = union_all(
        select(literal(0).label("of_ledger"), SEGMENT.c.day_index, SEGMENT.c.hour_rows).where(
            SEGMENT.c.day_index >= lo, SEGMENT.c.day_index <= last_day
        ),
        select(literal(1), g.c.day_index, cast(func.sum(g.c.hour_rows), Integer))
        .where(g.c.day_index >= lo, g.c.day_index <= last_day)
        .group_by(g.c.day_index),
    )
    segments: dict[int, int] = {}
    ledger: dict[int, int] = {}
    for of_ledger, day, n in conn.execute(stmt).all():
        if of_ledger:
            if n:
                ledger[int(day)] = int(n)
        else:
            segments[int(day)] = int(n)
    return segments if ledger == segments else None


class DecodedSegments:
    """The last few day segments decoded (PostgreSQL), by what fixes their content: the database
    (server, database oid, the server's start), the day, the stored row version (``xmin``, ``ctid``:
    a segment is rewritten as a new row by every writer, :func:`rebuild`; and its size) and the
    columns read.

    A client paging through a window reads each day's segment twice: a page ends inside a day,
    and the next page starts there (a page of 50,000 device-hours of 1,000 GPUs spans three days,
    one of them its predecessor's last). Kept here, that day is neither fetched again nor
    decoded. At most ``max_entries`` segments and ``max_b`` bytes are kept, least recently used
    out: a page's days and the next page's first, not a window (a second pass over a window reads
    every day again).
    """

    def __init__(self, max_entries: int = 6, max_b: int = 96 * 2**20) -> None:
        self.max_entries, self.max_b = max_entries, max_b
        self._frames: OrderedDict[tuple[Any, ...], tuple[pl.DataFrame, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # pages are read in several threadpool threads at once

    def held(
        self, database: tuple[Any, ...], days: Sequence[int], columns: tuple[str, ...]
    ) -> dict[int, tuple[str, pl.DataFrame]]:
        """``{day: (row version, frame)}`` of the days kept for ``database`` and ``columns``."""
        with self._lock:
            return {
                key[1]: (key[2], frame)
                for key, (frame, _) in self._frames.items()
                if key[0] == database and key[3] == columns and key[1] in days
            }

    def put(self, key: tuple[Any, ...], frame: pl.DataFrame) -> None:
        size = int(frame.estimated_size())
        if size > self.max_b:
            return
        with self._lock:
            old = self._frames.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._frames[key] = (frame, size)
            self._bytes += size
            while len(self._frames) > self.max_entries or self._bytes > self.max_b:
                _, (_, dropped) = self._frames.popitem(last=False)
                self._bytes -= dropped

    def touch(self, key: tuple[Any, ...]) -> None:
        with self._lock:
            if key in self._frames:
                self._frames.move_to_end(key)

    def clear(self) -> None:
        with self._lock:
            self._frames.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._frames)


#: This process's decoded segments (:class:`DecodedSegments`).
DECODED = DecodedSegments()
#: Where a pooled connection keeps its database's facts (``Connection.info``: as long as the
#: database connection lives; neither fact changes while the database exists).
_DATABASE_KEY = "gpu_ledger_segment_database"


def _database_facts(conn: Connection) -> tuple[tuple[Any, ...], str]:
    """(what names the database, its collation), asked once per database connection."""
    info = conn.info
    if _DATABASE_KEY not in info:
        oid, started, collation = conn.exec_driver_sql(
            "SELECT oid, pg_postmaster_start_time(), datcollate FROM pg_database "
            "WHERE datname = current_database()"
        ).one()
        url = conn.engine.url
        info[_DATABASE_KEY] = ((url.host, url.port, url.database, int(oid), started), str(collation))
    facts: tuple[tuple[Any, ...], str] = info[_DATABASE_KEY]
    return facts


def collation(conn: Connection) -> str:
    """The PostgreSQL database's collation (``pg_database.datcollate``)."""
    return _database_facts(conn)[1]


def _database(conn: Connection) -> tuple[Any, ...]:
    """The server, the database's oid and the server's start: with a row's ``xmin`` and ``ctid``,
    what names one stored segment row version (transaction ids and oids are the server's own)."""
    return _database_facts(conn)[0]


#: A segment row's version: its day, ``xmin``, ``ctid`` (a new row for every rewrite) and size
#: (read from the stored value's header, not fetched).
_VERSION_SQL = "day_index::text || ':' || xmin::text || ':' || ctid::text || ':' || octet_length(arrow)::text"


def load(conn: Connection, days: Sequence[int], columns: Sequence[str]) -> Iterator[pl.DataFrame]:
    """The segments of ``days`` (each has one), in day order, with ``columns`` only (PostgreSQL:
    the ones :data:`DECODED` holds in the version stored now are not fetched nor decoded)."""
    if not days:
        return
    if conn.dialect.name == "postgresql":
        yield from _load_pg(conn, sorted(days), tuple(columns))
        return
    stmt = (
        select(SEGMENT.c.day_index, SEGMENT.c.arrow)
        .where(SEGMENT.c.day_index.in_(sorted(days)))
        .order_by(SEGMENT.c.day_index)
    )
    for _day, data in conn.execute(stmt):
        yield decode(bytes(data), columns)


def _load_pg(conn: Connection, days: list[int], columns: tuple[str, ...]) -> Iterator[pl.DataFrame]:
    database = _database(conn)
    held = DECODED.held(database, days, columns)
    known = [version for version, _ in held.values()]
    # One statement: each day's row version, and its bytes unless that version is held (read
    # as binary bytea, not as hex text twice its size to decode).
    sql = (
        f"SELECT day_index, {_VERSION_SQL}, CASE WHEN {_VERSION_SQL} = ANY(%s) THEN NULL ELSE arrow END "
        f"FROM {SEGMENT.name} WHERE day_index = ANY(%s) ORDER BY day_index"
    )
    raw: Any = conn.connection.dbapi_connection
    with raw.cursor() as cursor:
        cursor.execute(sql, (known, days), binary=True)
        for day, version, data in cursor:
            key = (database, int(day), version, columns)
            if data is None:  # held, in this very version
                DECODED.touch(key)
                yield held[int(day)][1]
                continue
            frame = decode(data, columns)
            DECODED.put(key, frame)
            yield frame
