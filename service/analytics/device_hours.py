"""Usage per device and hour read from the ledger's day segments, without a GROUP BY in SQL.

``usage(granularity: HOUR, groupBy: [DEVICE])`` has one group per device-hour: grouping and
sorting every hour row of the window in SQL, then shipping the groups out as text, is most of
what it costs (720,000 groups for 1,000 GPUs × 30 days). The day segments
(:mod:`service.ledger.segments`) hold those rows already sorted by (hour, device, workload) with
each measure's summed term precomputed, so the answer is: read the window's segments, keep the
rows the caller may read (access scope, filter, window, page cursor), and fold the rows of each
device-hour — one row in the common case (one workload an hour), then nothing is folded at all.

It returns the frame the grouped SELECT of :func:`service.analytics.usage.usage` returns (same
column names, types, rows and order), or None where segments do not serve: another granularity
or groupBy, ``rollup=False`` (the SQL path, which tests compare with this one), a database whose
text order is not byte order (the cursor order is the database's), or a day whose segment does
not match its hours (:func:`service.ledger.segments.coverage`).

Per page, it reads only the days from the cursor's hour on, until the page is full: the cost of
a page does not grow with the answer's size.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import polars as pl
from sqlalchemy import Connection

from service.analytics.access import Access
from service.analytics.dims import Dimension, Granularity, LedgerFilter
from service.analytics.paging import Page
from service.analytics.query import PERIOD, LedgerQuery
from service.analytics.window import check_hours_kept, first_kept_hour
from service.ledger import segments
from service.timeutil import HOUR_S

HOURS_PER_DAY = segments.HOURS_PER_DAY
J_PER_KWH = 3_600_000.0
#: Collations whose order is the byte order of UTF-8 (polars compares strings so).
BYTE_ORDER_COLLATIONS = frozenset({"C", "POSIX", "C.UTF-8", "C.utf8", "ucs_basic"})
_KEYS = ("hour_index", "device_id")


def serves(q: LedgerQuery) -> bool:
    """Whether segments answer ``q`` (before looking at the database)."""
    return q.rollup and q.granularity is Granularity.HOUR and q.group_by == (Dimension.DEVICE,)


def _byte_ordered(conn: Connection) -> bool:
    if conn.dialect.name == "sqlite":
        return True  # BINARY collation: memcmp of UTF-8
    if conn.dialect.name != "postgresql":
        return False
    # asked once per database connection, not once a page
    return segments.collation(conn) in BYTE_ORDER_COLLATIONS


def _row_terms(flt: LedgerFilter, access: Access) -> list[pl.Expr]:
    """The filter's and the scope's row conditions (:func:`window.filter_conditions`,
    :func:`window.access_conditions`): a NULL value matches no list, as in SQL."""
    terms = [pl.col(d.column).is_in(list(values)) for d, values in flt.values.items() if values]
    if flt.unallocated is not None:
        terms.append(pl.col("unallocated") == flt.unallocated)
    if not access.everything:
        lists = (("project", access.projects), ("team", access.teams))
        scoped = [pl.col(column).is_in(sorted(values)) for column, values in lists if values]
        terms.append(pl.any_horizontal(*scoped).fill_null(False) if scoped else pl.lit(False))
    return terms


def _after(after: tuple[Any, ...] | None, devices: pl.Series) -> pl.Expr | None:
    """Rows whose (hour, device) comes after ``after`` in ``ORDER BY hour, device`` (NULLs first;
    neither key is ever NULL in the ledger: :func:`service.analytics.query.keyset_after`).
    ``devices``: the ``device_id`` dictionary, in byte order — a device id compares as its code."""
    if after is None:
        return None
    hour, device = after
    if hour is None:
        return None  # every hour comes after NULL
    if device is None:
        return pl.col("hour_index") >= hour
    # the first code after the cursor's device (which need not be in the dictionary)
    first_code = devices.search_sorted(device, side="right")
    code = pl.col("device_id").to_physical()
    return (pl.col("hour_index") > hour) | ((pl.col("hour_index") == hour) & (code >= first_code))


def _fold(rows: pl.DataFrame, obs: str, busy: str, idle: str) -> pl.DataFrame:
    """One row per (hour, device) of ``rows`` (sorted by them), as the grouped SELECT's columns."""
    hour, device = pl.col("hour_index"), pl.col("device_id").to_physical()
    single = rows.height == 0 or bool(
        rows.select(((hour != hour.shift(1)) | (device != device.shift(1))).fill_null(True).all()).item()
    )
    sums = ["gpu_present_s", obs, busy, idle]
    if not single:
        energy = pl.col("energy_j")
        rows = rows.group_by(_KEYS, maintain_order=True).agg(
            *[pl.col(c).sum() for c in sums],
            pl.col("default_metric").min().alias("min_default_metric"),
            pl.col("default_metric").max().alias("max_default_metric"),
            pl.when(energy.count() > 0).then(energy.sum()).alias("energy_j"),
        )
    else:
        rows = rows.with_columns(
            pl.col("default_metric").alias("min_default_metric"),
            pl.col("default_metric").alias("max_default_metric"),
        )
    per_hour = float(HOUR_S)
    return pl.DataFrame(
        [
            rows["hour_index"].alias(PERIOD),
            rows["device_id"].alias("device"),
            _divided(rows["gpu_present_s"], per_hour, "gpu_hours"),
            _divided(rows[obs], per_hour, "observed_gpu_hours"),
            _divided(rows[busy], per_hour, "effective_gpu_hours"),
            _divided(rows[idle], per_hour, "idle_gpu_hours"),
            rows["min_default_metric"],
            rows["max_default_metric"],
            _divided(rows["energy_j"], J_PER_KWH, "energy_kwh"),
        ]
    )


def _divided(column: pl.Series, divisor: float, name: str) -> pl.Series:
    """``column / divisor`` rounded once, as SQL's float division (and Python's) rounds: polars
    multiplies by the reciprocal instead, one ulp off for some values (7.2e6 / 3.6e6 ≠ 2)."""
    values = column.to_numpy() / divisor  # NumPy divides; a null reads NaN (no sum here is NaN)
    return pl.Series(name, values, dtype=pl.Float64, nan_to_null=True)


def _batches(covered: dict[int, int], need: int | None) -> Iterator[list[int]]:
    """The covered days in order, in batches of at least ``need`` rows (None: all at once): a
    page reads the days it needs, and more only where filters left too few rows."""
    days = sorted(covered)
    if need is None:
        yield days
        return
    batch: list[int] = []
    rows = 0
    for day in days:
        batch.append(day)
        rows += covered[day]
        if rows >= need:
            yield batch
            batch, rows = [], 0
    if batch:
        yield batch


def usage_frame(
    conn: Connection, q: LedgerQuery, metric_cols: tuple[str, str, str], page: Page
) -> pl.DataFrame | None:
    """The grouped usage SELECT's frame for ``q`` from segments, at most ``page.fetch`` rows after
    ``page``'s cursor; None where segments do not serve (see the module docstring).
    ``metric_cols``: the (observed, busy, idle) ledger columns of the metric."""
    if not serves(q):
        return None
    after = page.after_key((int, str))
    if not _byte_ordered(conn):
        return None
    lo_hour, hi_hour = q.window.start_hour, q.window.end_hour
    if after is not None and isinstance(after[0], int):
        lo_hour = max(lo_hour, after[0])
    if lo_hour >= hi_hour:
        return _fold(pl.DataFrame(schema=segments.SCHEMA), *(f"gpu_{c}" for c in metric_cols))
    check_hours_kept(lo_hour)  # segments of pruned days go with their hours: none would be read
    # the boundary check_hours_kept looked up, where a request serves it (not asked twice)
    kept_hour = first_kept_hour(conn)
    covered = segments.coverage(conn, lo_hour // HOURS_PER_DAY, (hi_hour - 1) // HOURS_PER_DAY, kept_hour)
    if covered is None:
        return None
    obs, busy, idle = (f"gpu_{c}" for c in metric_cols)
    flt, access = q.filter, q.access
    columns = [*_KEYS, "gpu_present_s", obs, busy, idle, "default_metric", "energy_j"]
    used = {d.column for d, values in flt.values.items() if values}
    if flt.unallocated is not None:
        used.add("unallocated")
    if not access.everything:
        used |= {"project", "team"}
    columns += sorted(used - set(columns))
    terms = [
        pl.col("hour_index") >= lo_hour,
        pl.col("hour_index") < hi_hour,
        *_row_terms(flt, access),
    ]
    fetch = page.fetch
    parts: list[pl.DataFrame] = []
    got = 0
    for days in _batches(covered, fetch):
        loaded = list(segments.load(conn, days, columns))
        if not loaded:
            continue
        rows = segments.concat(loaded)
        after_term = _after(after, rows.schema["device_id"].categories)  # type: ignore[attr-defined]
        kept = rows.filter(*terms, *([after_term] if after_term is not None else []))
        part = _fold(kept, obs, busy, idle)
        parts.append(part)
        got += part.height
        if fetch is not None and got >= fetch:
            break
    frame = segments.concat(parts) if parts else _fold(pl.DataFrame(schema=segments.SCHEMA), obs, busy, idle)
    if fetch is not None:
        frame = frame.head(fetch)
    if page.first is None:
        page.refuse_above(frame.height)
    return frame
