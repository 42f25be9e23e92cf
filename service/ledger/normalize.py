"""Samples → hourly ledger rows (docs/design.md §3), column by column with Polars and NumPy.

Rules, where a reading could differ (docs/design.md §3.6; docs/ledger-semantics.md says why):

* A gauge reading at ``t`` stands for ``[t, t_next)`` where ``t_next`` is the device's next
  reading *of the same metric*, capped at ``t + max_gap`` and at the device's next reading (any
  metric) that names other owners or shares; time past the cap is unobserved. So no owner is
  observed longer than it is present (service/ledger/invariants.py checks every row).
* A device is *present* while any of its metrics reports: each reading (any metric) stands for
  ``[t, t_next_any)`` when the next reading comes within ``presence_gap``, else ``[t, t + max_gap)``
  (a silence longer than ``presence_gap`` means the device was gone).
* An energy-counter delta between readings ``t1 < t2`` is spread evenly over ``[t1, t2)`` and owned
  by the workload of the reading at ``t1``; a drop is a reset and the later reading counts from
  zero. A delta spanning more than ``presence_gap`` is not counted: it cannot be placed in time,
  and a chunked ingestion would not see it either.
* Every interval is clipped to the window and cut at UTC hours. A time-sliced reading (several
  workloads at one ``t``) is split by ``share``; the shares at one reading are scaled to add to 1.
* A repeated (device, metric, ts, workload) reading counts once: the largest value wins, so the
  result never depends on the order a source delivers readings in.

The caller passes samples from ``[start − presence_gap, end + presence_gap)`` so that hour-by-hour
and long ingestions give identical rows. ``device_id``, ``metric`` and ``workload_key`` may be
String, Categorical or Enum columns (a connector that hands over categoricals saves hashing every
row's strings; the rows are identical either way). They become integer codes once; after that
every step runs on one bit-packed Int64 key (service/ledger/keys.py) in chain order — each
(device, metric) series contiguous and in time order, as connectors deliver them, so the batch
is sorted only when it is not (a read in several requests, each series in pieces, has its pieces
put together by one gather) — and the scrape-shaped common case (every metric of a device at
the same times, one owner per reading) takes presence from one chain per device, summed by
runs of equal ledger row, instead of a group-by of every sample (tests/ledger/
test_normalize_categorical.py and test_normalize_ingest_shape.py pin both to the general paths,
exactly). From the intervals on (gauge readings, presence, energy spans) the steps are NumPy
passes over the chains — clip to the window, cut at UTC hours, sum each run of equal (ledger
row, metric) — shared by the fast and the general paths, so both give the same floats.
When the layout is regular (every device's chains as long and aligned, as in a DCGM scrape) the
readings form a grid: intervals, hour split and runs are computed once per reading for all its
metrics and only the value sums touch every sample, in chunks of devices, so no array of every
sample is made fresh (tests/ledger/test_normalize_grid.py pins it to the chain path, exactly).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from service import heap
from service.ledger.keys import Packing
from service.metrics_catalog import (
    DEFAULT_IDLE_THRESHOLD_PCT,
    GAUGE_METRICS,
    HIST_COLUMNS,
    HIST_EDGES_PCT,
    UTIL_METRICS,
    Metric,
)
from service.timeutil import HOUR_MS

_METRICS = [m.value for m in Metric]
_CODE = {m: i for i, m in enumerate(_METRICS)}
_UTIL_CODES = [_CODE[m.value] for m in UTIL_METRICS]
_GAUGE_CODES = [_CODE[m.value] for m in GAUGE_METRICS]
_ENERGY = _CODE[Metric.ENERGY_J.value]
_SM, _GPU = _CODE[Metric.SM_ACTIVE.value], _CODE[Metric.GPU_UTIL.value]
_N_METRICS = 16
_N_BUCKETS = len(HIST_COLUMNS)


@dataclass(frozen=True, slots=True)
class Window:
    """The hour-aligned window being written, and how the source samples (all in milliseconds)."""

    start_ms: int
    end_ms: int
    max_gap_ms: int
    presence_gap_ms: int
    idle_threshold_pct: float = DEFAULT_IDLE_THRESHOLD_PCT

    def __post_init__(self) -> None:
        if self.start_ms % HOUR_MS or self.end_ms % HOUR_MS:
            raise ValueError("the ledger window must start and end on UTC hours")
        if self.end_ms <= self.start_ms:
            raise ValueError("the ledger window must end after it starts")
        if self.max_gap_ms <= 0:
            raise ValueError("max_gap must be positive")

    @property
    def presence_ms(self) -> int:
        return max(self.presence_gap_ms, self.max_gap_ms)

    @property
    def read_start_ms(self) -> int:
        """Where samples are read from: one presence gap back, floored to the hour."""
        return (self.start_ms - self.presence_ms) // HOUR_MS * HOUR_MS

    @property
    def read_end_ms(self) -> int:
        return self.end_ms + self.presence_ms


@dataclass(frozen=True, slots=True)
class _Batch:
    """Samples with integer codes and times relative to ``origin_ms`` (an hour boundary)."""

    frame: pl.DataFrame  # dev, metric, ts, wl, value, share
    devices: pl.Series
    workloads: pl.Series
    origin_ms: int
    sample_key: Packing  # (dev, metric, ts, wl)
    reading_key: Packing  # (dev, ts, wl)
    row_key: Packing  # (dev, hour, wl): a ledger row
    start: int  # window bounds relative to origin
    end: int


def normalize(samples: pl.DataFrame, window: Window) -> pl.DataFrame:
    """Ledger rows keyed by (device_id, hour_index, workload_key) for ``window``.

    ``samples`` has the columns of ``connectors.base.SAMPLE_SCHEMA``. The result has every
    measure of ``service.models.LedgerFacts`` that comes from metrics (seconds, histogram,
    energy, power, memory, temperature) plus ``default_metric``, ``energy_estimated``,
    ``power_avg_w`` and ``mem_used_avg_b``.
    """
    heap.keep_freed()  # the next batch reuses this one's freed arrays (service/heap.py)
    batch = _encode(samples, window)
    if batch.frame.is_empty():
        return _decode(_empty_row_frame(), batch)
    ordered = _order(batch)
    presence, owners, grid = _presence(batch, window, ordered)
    gauges = _gauge_stats(batch, window, owners, ordered, grid)
    energy = (
        _grid_energy(batch, window, ordered, grid) if grid is not None else _energy(batch, window, ordered)
    )
    rows = presence.join(gauges, on="rk", how="left").join(energy, on="rk", how="left")
    return _decode(rows, batch)


def _encode(samples: pl.DataFrame, window: Window) -> _Batch:
    origin = window.read_start_ms
    if (
        _categorical(samples, "device_id")
        or _categorical(samples, "workload_key")
        or _categorical(samples, "metric")
    ):
        return _encode_codes(samples, window)
    known = samples.filter(
        pl.col("metric").is_in(_METRICS)
        & pl.col("value").is_not_null()
        & pl.col("value").is_not_nan()
        & (pl.col("ts_ms") >= origin)
        & (pl.col("ts_ms") < window.read_end_ms)
    )
    devices = known["device_id"].unique().sort()
    workloads = known["workload_key"].fill_null("").unique().sort()
    frame = known.select(
        pl.col("device_id").cast(pl.Enum(devices)).to_physical().cast(pl.Int64).alias("dev"),
        pl.col("metric").cast(pl.Enum(_METRICS)).to_physical().cast(pl.Int64).alias("metric"),
        (pl.col("ts_ms") - origin).alias("ts"),
        pl.col("workload_key")
        .fill_null("")
        .cast(pl.Enum(workloads))
        .to_physical()
        .cast(pl.Int64)
        .alias("wl"),
        pl.col("value"),
        pl.col("share").fill_null(1.0).clip(0.0, 1.0),
    )
    return _batch(frame, devices, workloads, window)


def _batch(frame: pl.DataFrame, devices: pl.Series, workloads: pl.Series, window: Window) -> _Batch:
    origin = window.read_start_ms
    span = window.read_end_ms - origin
    n_dev, n_wl = max(len(devices), 1), max(len(workloads), 1)
    return _Batch(
        frame=frame,
        devices=devices,
        workloads=workloads,
        origin_ms=origin,
        sample_key=Packing.for_ranges(dev=n_dev, metric=_N_METRICS, ts=span, wl=n_wl),
        reading_key=Packing.for_ranges(dev=n_dev, ts=span, wl=n_wl),
        row_key=Packing.for_ranges(dev=n_dev, hour=span // HOUR_MS + 1, wl=n_wl),
        start=window.start_ms - origin,
        end=window.end_ms - origin,
    )


def _categorical(samples: pl.DataFrame, column: str) -> bool:
    return isinstance(samples.schema[column], pl.Categorical | pl.Enum)


def _encode_codes(samples: pl.DataFrame, window: Window) -> _Batch:
    """``_encode`` for Categorical/Enum columns (connectors that hand them over): each column's
    physical codes are mapped to ranks of the sorted distinct strings through a lookup table, so
    no string is hashed per row and the codes equal those the String path gives (the same rows
    come out, bit for bit). Rows of an unknown metric or without a device are dropped, as there."""
    origin = window.read_start_ms
    dev, devices = _ranks(samples["device_id"], None)
    wl, workloads = _ranks(samples["workload_key"], "")
    if _categorical(samples, "metric"):
        metric, _ = _ranks(samples["metric"], None, fixed=_METRICS)
    else:
        metric = samples["metric"].replace_strict(_CODE, default=-1, return_dtype=pl.Int64)
    share = samples["share"]  # within [0, 1] and never null as connectors hand it: no copy then
    if share.null_count() or (share.len() and not 0.0 <= share.min() <= share.max() <= 1.0):  # type: ignore[operator]
        share = share.fill_null(1.0).clip(0.0, 1.0)
    frame = pl.DataFrame(
        {
            "dev": dev,
            "metric": metric,
            "ts": samples["ts_ms"] - origin,
            "wl": wl,
            "value": samples["value"],
            "share": share,
        }
    )
    ts, value = pl.col("ts"), pl.col("value")
    keep = (
        (pl.col("dev") >= 0)
        & (pl.col("metric") >= 0)
        & value.is_not_null()
        & value.is_not_nan()
        & (ts >= 0)
        & (ts < window.read_end_ms - origin)
    )
    # Usually every row is kept: said by a few reductions instead of evaluating ``keep`` per row.
    values, times = samples["value"], samples["ts_ms"]
    every_row_kept = not len(dev) or (
        dev.min() >= 0  # type: ignore[operator]
        and metric.min() >= 0  # type: ignore[operator]
        and not values.null_count()
        and not values.is_nan().any()
        and times.min() >= origin  # type: ignore[operator]
        and times.max() < window.read_end_ms  # type: ignore[operator]
    )
    if not every_row_kept:
        frame = frame.filter(keep)
        # Devices and workloads of the kept rows only, as the String path encodes them.
        used_dev = np.flatnonzero(np.bincount(frame["dev"].to_numpy(), minlength=len(devices)))
        used_wl = np.flatnonzero(np.bincount(frame["wl"].to_numpy(), minlength=len(workloads)))
        if len(used_dev) < len(devices) or len(used_wl) < len(workloads):
            dev_lut = np.full(max(len(devices), 1), -1, dtype=np.int64)
            dev_lut[used_dev] = np.arange(len(used_dev))
            wl_lut = np.full(max(len(workloads), 1), -1, dtype=np.int64)
            wl_lut[used_wl] = np.arange(len(used_wl))
            frame = frame.with_columns(
                pl.Series("dev", dev_lut[frame["dev"].to_numpy()]),
                pl.Series("wl", wl_lut[frame["wl"].to_numpy()]),
            )
            devices, workloads = devices.gather(used_dev), workloads.gather(used_wl)
    return _batch(frame, devices, workloads, window)


def _ranks(
    column: pl.Series, null_as: str | None, fixed: list[str] | None = None
) -> tuple[pl.Series, pl.Series]:
    """Per row, the rank of the row's string among the column's sorted distinct strings (nulls
    read as ``null_as``; -1 where null and ``null_as`` is None), and those strings. With
    ``fixed``, the ranks are positions in ``fixed`` instead (-1 for a string not in it)."""
    if isinstance(column.dtype, pl.Enum):  # the codes index the fixed categories: nothing to scan
        strings = pl.Series(column.dtype.categories, dtype=pl.String)
        codes = pl.Series(np.arange(len(strings), dtype=np.uint32))
        physical = column.to_physical()
        if column.null_count():
            codes, strings = (
                codes.append(pl.Series([None], dtype=pl.UInt32)),
                strings.append(pl.Series([None])),
            )
    elif isinstance(column.dtype, pl.Categorical):
        physical = column.to_physical()
        heads = _run_heads(physical)
        # Each distinct value begins some run of equal codes: the runs' first rows hold them all.
        distinct = (column.gather(heads) if heads is not None else column).unique()
        codes, strings = distinct.to_physical(), distinct.cast(pl.String)
    else:
        strings = column.unique().drop_nulls()
        codes = pl.Series(np.arange(len(strings), dtype=np.uint32))
        physical = column.cast(pl.Enum(strings)).to_physical()
        if column.null_count():
            codes, strings = (
                codes.append(pl.Series([None], dtype=pl.UInt32)),
                strings.append(pl.Series([None])),
            )
    if null_as is not None:
        strings = strings.fill_null(null_as)
    names = fixed if fixed is not None else strings.drop_nulls().unique().sort().to_list()
    rank = {name: i for i, name in enumerate(names)}
    present = [c for c in codes.to_list() if c is not None]
    null_code = max(present) + 1 if present else 0  # where a null row's code is looked up
    lut = np.full(null_code + 1, -1, dtype=np.int64)
    for code, name in zip(codes.to_list(), strings.to_list(), strict=True):
        lut[null_code if code is None else code] = rank.get(name, -1) if name is not None else -1
    if len(present) == 1 and not physical.null_count():  # one value (one metric, no workload)
        out = pl.repeat(int(lut[present[0]]), len(physical), dtype=pl.Int64, eager=True)
    else:
        # Gathered by Polars: its allocator keeps freed pages (service/__init__.py), where a fresh
        # NumPy array of every row costs as much in page faults as the lookup itself.
        out = pl.Series(lut).gather(physical.fill_null(null_code))
    return out, pl.Series(names, dtype=pl.String)


def _run_heads(physical: pl.Series) -> np.ndarray | None:
    """The first row of each run of equal codes, when the runs are long (a connector's columns
    come series after series: a device's or workload's code repeats for a whole series), so
    that the distinct values are found among a few rows instead of hashing every one. ``None``
    when the column has nulls or its runs are short."""
    if physical.null_count() or physical.len() < 2:
        return None
    codes = physical.to_numpy()
    change = np.empty(len(codes), dtype=bool)
    change[:1] = True
    np.not_equal(codes[1:], codes[:-1], out=change[1:])
    heads = np.flatnonzero(change)
    return heads if len(heads) <= len(codes) // 8 else None


@dataclass(frozen=True, slots=True)
class _Ordered:
    """The samples in chain order — each (device, metric) chain contiguous and sorted by (ts,
    workload) — with their sample key ``k``; what every later step relies on instead of sorting."""

    rows: pl.DataFrame  # every sample (a repeated one too), chain order
    unique: pl.DataFrame  # one row per key: ``rows`` when nothing repeats
    repeated: bool  # some (device, metric, ts, workload) came more than once
    sliced: bool  # some (device, metric, ts) names several workloads (a time-sliced GPU)
    starts: np.ndarray  # where each chain of ``rows`` begins


def _chain_starts(frame: pl.DataFrame) -> np.ndarray:
    """Indices where a (device, metric) chain begins in ``frame`` (in chain order). Compared
    column by column: NumPy's fresh arrays cost page faults, and booleans are an eighth of them."""
    dev, metric = frame["dev"].to_numpy(), frame["metric"].to_numpy()
    new_chain = np.empty(len(dev), dtype=bool)
    new_chain[:1] = True
    np.not_equal(dev[1:], dev[:-1], out=new_chain[1:])
    new_chain[1:] |= metric[1:] != metric[:-1]
    return np.flatnonzero(new_chain)


def _pack(key: Packing, **columns: pl.Series | np.ndarray) -> np.ndarray:
    """``key.pack`` in NumPy, in place (Horner's scheme: one array, no temporaries)."""
    packed: np.ndarray | None = None
    for name, width in key.fields:
        part = columns[name]
        part = part.to_numpy() if isinstance(part, pl.Series) else part
        if packed is None:
            packed = part.astype(np.int64, copy=True)
        else:
            packed <<= width
            packed |= part
    assert packed is not None
    return packed


def _order(batch: _Batch) -> _Ordered:
    """Chain order, sorting only when the source did not deliver it.

    Connectors hand over series: one (device, metric) chain after another, in time order (a
    Prometheus range query, a scrape log, an agent spool per device). Then the chains only need
    to be contiguous and each sorted — their order among themselves does not matter to any later
    step — and checking that is one pass, where sorting 10 M keys is the slowest step left.
    """
    key = batch.sample_key
    frame = batch.frame
    starts = _chain_starts(frame)
    within = np.ones(frame.height - 1, dtype=bool)  # row i+1 continues row i's chain
    within[starts[1:] - 1] = False
    chains = frame["dev"].to_numpy()[starts] * _N_METRICS + frame["metric"].to_numpy()[starts]
    distinct_chains = len(np.unique(chains)) == len(chains)
    ts = frame["ts"].to_numpy()
    rising = ts[1:] > ts[:-1]
    rising |= ~within
    if rising.all():
        # Every chain strictly rising in time (as a scrape is): in order, nothing repeated and
        # nothing time-sliced, which is all the key below would tell; so it is not built.
        if distinct_chains:
            return _Ordered(frame, frame, False, False, starts)
        joined = _join_pieces(frame, starts, chains, ts)
        if joined is not None:
            return _Ordered(joined[0], joined[0], False, False, joined[1])
    # Packed by Polars: its allocator keeps freed pages (a fresh NumPy key faults every page).
    frame = frame.with_columns(
        key.pack(dev=pl.col("dev"), metric=pl.col("metric"), ts=pl.col("ts"), wl=pl.col("wl")).alias("k")
    )
    k = frame["k"].to_numpy()
    if np.any(within & (k[1:] < k[:-1])) or not distinct_chains:
        frame = frame.sort("k")
        k = frame["k"].to_numpy()
        starts = _chain_starts(frame)
        within = np.ones(len(k) - 1, dtype=bool)
        within[starts[1:] - 1] = False
    same = k[1:] == k[:-1]
    repeated = bool(same.any())
    ts = frame["ts"].to_numpy()  # the same (device, metric, ts) for another workload: time-sliced
    sliced = bool(np.any(within & ~same & (ts[1:] == ts[:-1])))
    unique = _dedupe(frame) if repeated else frame
    return _Ordered(frame, unique, repeated, sliced, starts)


def _join_pieces(
    frame: pl.DataFrame, starts: np.ndarray, chains: np.ndarray, ts: np.ndarray
) -> tuple[pl.DataFrame, np.ndarray] | None:
    """``frame`` in chain order, and its chain starts, when it holds each chain in pieces that
    are each rising in time and follow one another without overlap — the batches of one read
    concatenated (the ingestor reads a day and its context in day-long requests, each a run of
    whole chains): the pieces are put in (chain, time) order and gathered once, the rows the
    sort by key gives, where sorting every key costs several times more. ``None`` otherwise."""
    ends = np.append(starts[1:], len(ts))
    order = np.lexsort((ts[starts], chains))  # by chain, then by the piece's first reading
    chain = chains[order]
    same = chain[1:] == chain[:-1]
    if np.any(same & (ts[ends[order[:-1]] - 1] >= ts[starts[order[1:]]])):
        return None  # two pieces of a chain overlap in time: merged by the sort
    lengths = (ends - starts)[order]
    offsets = np.cumsum(lengths) - lengths  # where each piece lands
    rows = np.repeat(starts[order] - offsets, lengths)
    rows += np.arange(len(ts))
    new_chain = np.ones(len(order), dtype=bool)
    new_chain[1:] = ~same
    return _gather(
        frame, rows, ts, one_metric=bool(np.all(chains % _N_METRICS == chains[0] % _N_METRICS))
    ), offsets[new_chain]


def _gather(frame: pl.DataFrame, rows: np.ndarray, ts: np.ndarray, one_metric: bool) -> pl.DataFrame:
    """``frame[rows]``, column by column: a column holding one value as it is (any order of it is
    itself: one metric, no workload, every share 1, as in a read of one field), the others by
    NumPy's take into arrays Polars wraps without a copy — a third of Polars' gather, which
    looks each index up among the chunks of the requests' concatenated columns. ``ts`` is the
    ``ts`` column as NumPy already has it."""
    columns = []
    for name in frame.columns:
        column = frame[name]
        if column.null_count():  # not as connectors hand them over: Polars keeps the nulls
            columns.append(column.gather(rows))
        elif (name == "metric" and one_metric) or (name in ("wl", "share") and _one_value(column)):
            columns.append(column)
        else:
            values = ts if name == "ts" else column.to_numpy()
            columns.append(pl.Series(name, values[rows]))
    return pl.DataFrame(columns)


def _one_value(column: pl.Series) -> bool:
    """Whether a column without nulls holds one value (min and max skip NaN: looked for apart)."""
    if not column.len() or column.min() != column.max():
        return False
    return not (column.dtype.is_float() and column.is_nan().any())


def _dedupe(frame: pl.DataFrame, prefer: list[str] | None = None) -> pl.DataFrame:
    """``frame`` (in key order) with one row per key ``k``, in the same order.

    A repeated reading counts once; when repeats disagree the largest value (then share) wins, so
    the answer never depends on the order a source delivered them in.
    """
    prefer = prefer or ["value", "share"]
    k = pl.col("k")
    repeated = ((k == k.shift(1)) | (k == k.shift(-1))).fill_null(False)
    tagged = frame.with_columns(repeated.alias("_repeated"), pl.int_range(pl.len()).alias("_at"))
    chosen = (
        tagged.filter(pl.col("_repeated"))
        .sort(["k", *prefer])
        .group_by("k", maintain_order=True)
        .agg(pl.all().last(), pl.col("_at").first().alias("_first"))
        .with_columns(pl.col("_first").alias("_at"))
        .select(tagged.columns)
    )
    return pl.concat([tagged.filter(~pl.col("_repeated")), chosen]).sort("_at").drop("_repeated", "_at")


def _next_distinct(value: pl.Expr, ts: pl.Expr, group: pl.Expr) -> pl.Expr:
    """In a frame sorted by (group, ts): ``value`` at the next greater ts of the same group, or null.

    Rows of one reading repeated for several workloads share a ts, so the next *distinct* reading
    is found by a backward fill that a group end stops.
    """
    same_group = group.shift(-1) == group
    later = same_group & (ts.shift(-1) > ts)
    is_end = ~same_group.fill_null(False)
    candidate = pl.when(later).then(value.shift(-1)).when(is_end).then(pl.lit(None)).otherwise(pl.lit(None))
    marker = (
        pl.when(later | is_end).then(pl.int_range(pl.len())).otherwise(None).fill_null(strategy="backward")
    )
    # marker: index of the first row at or after this one that ends a run of equal ts.
    return candidate.gather(marker)


def _shares(frame: pl.DataFrame, reading: pl.Expr) -> pl.DataFrame:
    """Scale the shares of the workloads at one reading to add to 1; a lone reading has share 1."""
    multi = ((reading == reading.shift(1)) | (reading == reading.shift(-1))).fill_null(False)
    frame = frame.with_columns(multi.alias("_multi"))
    lone = frame.filter(~pl.col("_multi")).with_columns(pl.lit(1.0).alias("share"))
    shared = frame.filter(pl.col("_multi"))
    if not shared.is_empty():
        total = pl.col("share").sum().over(reading)
        count = pl.len().over(reading)
        shared = shared.with_columns(
            pl.when(total > 0).then(pl.col("share") / total).otherwise(1.0 / count).alias("share")
        )
    return pl.concat([lone, shared]).drop("_multi")


def _presence(
    batch: _Batch, window: Window, ordered: _Ordered
) -> tuple[pl.DataFrame, pl.DataFrame, _Grid | None]:
    """Present milliseconds per ledger row; per (dev, ts) reading the time the device's next
    reading names other owners (``_owner_changes``); the scrape's grid when its layout is regular."""
    aligned = None if ordered.repeated or ordered.sliced else _aligned_readings(ordered.rows, ordered.starts)
    if aligned is not None:
        return _aligned_presence(batch, window, *aligned)
    key = batch.reading_key
    k = pl.col("k")
    # One reading per (device, ts, workload) across metrics; the largest share wins, whatever the order.
    readings = (
        batch.frame.group_by(key.pack(dev=pl.col("dev"), ts=pl.col("ts"), wl=pl.col("wl")).alias("k"))
        .agg(pl.col("share").max())
        .sort("k")
        .with_columns(
            key.unpack(k, "dev").alias("dev"),
            key.unpack(k, "ts").alias("ts"),
            key.unpack(k, "wl").alias("wl"),
        )
    )
    readings = readings.with_columns(_next_distinct(pl.col("ts"), pl.col("ts"), pl.col("dev")).alias("next"))
    readings = _shares(readings, key.prefix(k, "ts"))
    gap = pl.col("next") - pl.col("ts")
    intervals = readings.select(
        "dev",
        "wl",
        "share",
        pl.col("ts").alias("start"),
        pl.when(gap <= window.presence_ms)
        .then(pl.col("next"))
        .otherwise(pl.col("ts") + window.max_gap_ms)
        .alias("end"),
    )
    dev, wl, share, start, end = (intervals[c].to_numpy() for c in intervals.columns)
    present = _sum_by_row(batch, dev, wl, start, end.copy(), share, "present_ms")
    return present, _owner_changes(readings, key.prefix(k, "ts")), None


def _aligned_presence(
    batch: _Batch, window: Window, dev: np.ndarray, ts: np.ndarray, wl: np.ndarray, layout: _Layout | None
) -> tuple[pl.DataFrame, pl.DataFrame, _Grid | None]:
    """``_presence`` of aligned readings (``_aligned_readings``: one owner per reading, share 1,
    each device's readings in time order), in NumPy: a reading's next one is the following row
    when it is the same device's. Every share is 1, so the present time is whole milliseconds,
    and summing each run of equal ledger row first, then the runs, gives the general path's
    floats exactly (any order does). Only the readings whose owners change within ``max_gap``
    after them are returned for ``_cut``, with their reading number ``r``."""
    same_dev = dev[1:] == dev[:-1]
    follows = same_dev & (ts[1:] - ts[:-1] <= window.presence_ms)  # the next reading is in reach
    end = ts + window.max_gap_ms
    np.copyto(end[:-1], ts[1:], where=follows)
    # Each reading's first piece begins at its time clipped to the window, in the ledger row of
    # that hour: the same for the gauges of a regular layout (kept with its grid).
    start = np.maximum(ts, batch.start)
    hour = start // HOUR_MS
    rk = _pack_row(batch, dev, hour, wl)
    present = _sum_reading_ms(batch, dev, wl, start, hour, rk, end, "present_ms")
    # Owners change at a reading whose workload differs from its device predecessor's; the
    # readings whose interval that change cuts (``_owner_changes``, ``_cut``) are those since the
    # device's previous change or first reading that lie within ``max_gap`` before it: walked
    # back from every change at once, a step per reading in reach (one or two in a scrape).
    change = np.flatnonzero(same_dev & (wl[1:] != wl[:-1])) + 1
    rows, untils = [], []
    if change.size:
        marks = np.union1d(change, np.flatnonzero(~same_dev) + 1)
        since = np.append(0, marks)[np.searchsorted(marks, change)]  # the previous mark, or 0
        back = 1
        while change.size:
            r = change - back
            cut = (r >= since) & (ts[np.maximum(r, 0)] > ts[change] - window.max_gap_ms)
            change, since, r = change[cut], since[cut], r[cut]
            rows.append(r)
            untils.append(ts[change])
            back += 1
    r = np.concatenate(rows) if rows else np.empty(0, dtype=np.int64)
    until = np.concatenate(untils) if untils else np.empty(0, dtype=np.int64)
    cuts = pl.DataFrame(
        {"r": r, "dev": dev[r], "ts": ts[r], "owners_until": until},
        schema={"r": pl.Int64, "dev": pl.Int64, "ts": pl.Int64, "owners_until": pl.Int64},
    ).sort("r")
    grid = _Grid(layout, dev, ts, wl, start, hour, rk) if layout is not None else None
    return present, cuts, grid


@dataclass(frozen=True, slots=True)
class _Layout:
    """A scrape's regular layout: every chain ``width`` long and each device's ``chains`` chains
    together, so row ``(g·chains + j)·width + p`` is reading ``g·width + p`` (device group ``g``,
    chain ``j``)."""

    chains: int
    width: int


@dataclass(frozen=True, slots=True)
class _Grid:
    """A regular layout with its readings (one per device and time, in reading order): every
    chain of device group ``g`` holds the same (ts, workload) at each position."""

    layout: _Layout
    dev: np.ndarray
    ts: np.ndarray
    wl: np.ndarray
    start: np.ndarray  # ts clipped to the window's start
    hour: np.ndarray  # the hour of ``start``
    rk: np.ndarray  # the ledger row of (dev, hour, wl)


def _aligned_readings(
    rows: pl.DataFrame, starts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, _Layout | None] | None:
    """The readings (dev, ts, wl; each share 1) without a group-by over every sample, when
    every metric of each device reports at the same times for the same owner — one scrape, all
    fields — so one chain per device holds all of them. ``None`` when that is not so.

    ``rows`` is in chain order (chains beginning at ``starts``) with one workload per (device,
    metric, ts) and no repeats; then each reading has one owner and its share is 1 (as ``_shares``
    makes a lone reading's), and chain ``c`` of device ``d`` is aligned when it is as long as
    ``d``'s first chain and equal to it row by row in ts and workload: slices compared (views of
    one array when the layout is regular, as in a scrape), where the group-by hashes every sample.
    With the readings comes the ``_Layout`` when it is regular.
    """
    dev, ts, wl = rows["dev"].to_numpy(), rows["ts"].to_numpy(), rows["wl"].to_numpy()
    lengths = np.diff(np.append(starts, len(dev)))
    chain_dev = dev[starts]
    layout = _regular(chain_dev, lengths)
    if layout is not None:
        groups = len(starts) // layout.chains
        for column in (ts, wl):
            cube = column.reshape(groups, layout.chains, layout.width)
            if not all(np.array_equal(cube[:, j], cube[:, 0]) for j in range(1, layout.chains)):
                return None
        take: np.ndarray | slice = (
            (starts[:: layout.chains, None] + np.arange(layout.width)[None, :]).ravel()
            if layout.chains > 1
            else slice(None)
        )
    else:
        first = np.full(int(chain_dev.max()) + 1, -1, dtype=np.int64)
        first[chain_dev[::-1]] = np.arange(len(starts) - 1, -1, -1)  # each device's first chain
        ref = first[chain_dev]
        if not np.array_equal(lengths, lengths[ref]):
            return None
        for a, n, r in zip(starts, lengths, starts[ref], strict=True):
            if r != a and not (
                np.array_equal(ts[a : a + n], ts[r : r + n]) and np.array_equal(wl[a : a + n], wl[r : r + n])
            ):
                return None
        is_ref = ref == np.arange(len(starts))
        own, own_lengths = starts[is_ref], lengths[is_ref]  # the reference chains, one per device
        take = np.concatenate([np.arange(a, a + n) for a, n in zip(own, own_lengths, strict=True)])
    return dev[take], ts[take], wl[take], layout


def _regular(chain_dev: np.ndarray, lengths: np.ndarray) -> _Layout | None:
    """The layout when every chain is as long and each device has as many chains, together."""
    width = int(lengths[0])
    if not np.all(lengths == width):
        return None
    per = int(np.count_nonzero(chain_dev == chain_dev[0]))
    if len(chain_dev) % per:
        return None
    grid = chain_dev.reshape(-1, per)
    if not np.all(grid == grid[:, :1]) or len(np.unique(grid[:, 0])) != len(grid):
        return None
    return _Layout(per, width)


def _owner_changes(readings: pl.DataFrame, reading: pl.Expr) -> pl.DataFrame:
    """(dev, ts, ``owners_until``): the ts of the device's next reading whose owners or shares
    differ from this reading's, or null. ``readings`` is sorted by ``reading`` (dev, ts) then wl.

    A gauge reading stands for its metric until that metric's next reading — but where another
    metric's reading names other owners first, presence moves to them there, so the gauge interval
    ends there too (the rest is unobserved). Otherwise a reading that lacks one metric at an owner
    change would give the old owner more observed than present time.
    """
    mark = pl.col("wl").hash(1) ^ pl.col("share").hash(2)
    multi = (reading == reading.shift(1)) | (reading == reading.shift(-1))
    if readings.select(multi.any()).item():  # time-sliced readings: one signature per (dev, ts)
        owners = readings.group_by("dev", "ts").agg(mark.sum().alias("sig")).sort("dev", "ts")
    else:
        owners = readings.select("dev", "ts", mark.alias("sig"))
    dev, sig, ts = pl.col("dev"), pl.col("sig"), pl.col("ts")
    same_as_previous = (dev.shift(1) == dev).fill_null(False)
    # At each row: its ts where the owners change there, -1 where a new device starts (so the fill
    # below never reaches into the next device), else null; the first non-null after a row is its answer.
    change = (
        pl.when(same_as_previous & (sig != sig.shift(1)))
        .then(ts)
        .when(~same_as_previous)
        .then(pl.lit(-1, dtype=pl.Int64))
    )
    until = change.shift(-1).fill_null(strategy="backward")
    return owners.select("dev", "ts", pl.when(until >= 0).then(until).alias("owners_until"))


def _gauge_stats(
    batch: _Batch, window: Window, owners: pl.DataFrame, ordered: _Ordered, grid: _Grid | None
) -> pl.DataFrame:
    """Per ledger row, each gauge's observed time and its value statistics.

    The intervals come as NumPy columns in chain order: computed with Polars when time-sliced
    readings need the next *distinct* reading and shares, else straight from the chains (the next
    row of a chain is its next reading, every share is 1). The hour split and the sums are one
    NumPy pass either way (``_pieces``, ``_metric_stats``), so the two give the same floats.
    """
    if grid is not None:
        stats = _grid_gauge_stats(batch, window, owners, ordered, grid)
        if stats is not None:
            return _widen(stats, batch)
    layout = grid.layout if grid is not None else None
    if ordered.sliced:
        columns = _sliced_gauge_intervals(batch, window, owners, ordered)
    else:
        columns = _chain_gauge_intervals(batch, window, owners, ordered, layout)
    dev, wl, metric, share, value, start, end = columns
    segments = []
    for take, hour, dur in _pieces(start, end, batch):
        if take is not None:
            dev_, wl_, metric_, value_ = dev[take], wl[take], metric[take], value[take]
            share_ = share[take] if share is not None else None
        else:
            dev_, wl_, metric_, value_, share_ = dev, wl, metric, value, share
        segments.append((_pack_row(batch, dev_, hour, wl_), metric_, value_, dur, share_))
    return _widen(_metric_stats(segments, window), batch)


def _grid_gauge_stats(
    batch: _Batch, window: Window, owners: pl.DataFrame, ordered: _Ordered, grid: _Grid
) -> pl.DataFrame | None:
    """``_metric_stats`` of a regular scrape, computed from its grid: where each device's chains
    hold the same (ts, workload) at each position, a reading's interval, its hour split and the
    runs of equal ledger row are one for all its metrics, so they are computed once per reading
    (a sixth of the samples in a DCGM scrape) and only the value sums touch every sample — each
    run the same slice of the same products as on the chain path, so the same floats. Durations
    are whole milliseconds, so the observed, idle and histogram sums are exact in any order.
    ``None`` when a utilization chain leaves [0, 100] % (the chain path clips it).
    """
    chains, width = grid.layout.chains, grid.layout.width
    starts = ordered.starts
    value = ordered.rows["value"].to_numpy()
    chain_metric = ordered.rows["metric"].to_numpy()[starts]
    # Each reading's interval (as ``_chain_gauge_intervals`` gives each sample), clipped to the
    # window; its first piece's hour and milliseconds (``_pieces``).
    ts = grid.ts
    end = ts + window.max_gap_ms
    np.minimum(end[:-1], ts[1:], out=end[:-1])
    last = np.arange(width - 1, len(ts), width)
    end[last] = ts[last] + window.max_gap_ms
    _cut(end, batch, window, owners, grid.dev, ts, _Layout(1, width))
    start, hour, rk = grid.start, grid.hour, grid.rk
    np.minimum(end, batch.end, out=end)
    kept = end > start  # per device one stretch of readings (each ends by its successor's start)
    bound = hour + 1
    bound *= HOUR_MS
    crossing = np.flatnonzero(kept & (end > bound))
    np.minimum(end, bound, out=bound)
    bound -= start
    w = bound.astype(np.float64)
    # Runs of equal ledger row among the kept readings of each device; the dropped readings make
    # runs of their own, summed and thrown away (so the kept runs are the chain path's slices).
    new_run = np.empty(len(ts), dtype=bool)
    new_run[:1] = True
    np.not_equal(rk[1:], rk[:-1], out=new_run[1:])
    new_run[1:] |= kept[1:] != kept[:-1]
    new_run[::width] = True
    bounds = np.flatnonzero(new_run)
    # The same runs in every chain of the device: sample bounds in sample order (chain, reading).
    shift = bounds + bounds // width * ((chains - 1) * width)
    sample_bounds = (shift[None, :] + (np.arange(chains) * width)[:, None]).ravel()
    order = np.argsort(sample_bounds, kind="stable")
    sample_bounds = sample_bounds[order]
    ref = order % len(bounds)  # each sample run's reading run
    run_chain = bounds[ref] // width * chains + order // len(bounds)
    run_metric = chain_metric[run_chain]
    w_run = np.add.reduceat(w, bounds)[ref]
    sums = _grid_sums(value, w, sample_bounds, run_chain, w_run, chain_metric, grid.layout, window)
    if sums is None:
        return None
    wv, w_idle, hist = sums
    keep = kept[bounds][ref] & _IS_GAUGE[run_metric]
    first = {
        "g": (rk[bounds][ref] * _N_METRICS + run_metric)[keep],
        "w": w_run[keep],
        "wv": wv[keep],
        "w_idle": w_idle[keep],
        "v_max": np.maximum.reduceat(value, sample_bounds)[keep],
        **{f"h{i}": hist[keep, i] for i in range(_N_BUCKETS)},
    }
    tables = [first] if first["g"].size else []
    if crossing.size:  # the later pieces of the intervals that cross an hour, every chain's
        shift = crossing + crossing // width * ((chains - 1) * width)
        samples = (shift[None, :] + (np.arange(chains) * width)[:, None]).ravel()
        order = np.argsort(samples, kind="stable")
        samples, reading = samples[order], crossing[order % len(crossing)]
        at, more, more_dur = _later_pieces(np.arange(len(samples)), hour[reading], end[reading])
        sample, reading = samples[at], reading[at]
        rk_more = _pack_row(batch, grid.dev[reading], more, grid.wl[reading])
        tables.append(_runs(rk_more, chain_metric[sample // width], value[sample], more_dur, None, window))
    return _sum_runs(tables)


# The histogram bucket of a utilization in [0, 100] % by its whole percent: the edges are whole
# (ints), so ``v >= edge`` is ``floor(v) >= edge``; a table look-up where ``searchsorted`` costs
# ~40 instructions a sample and a compare per edge six passes.
_BUCKET_OF_WHOLE_PCT = np.searchsorted(np.asarray(HIST_EDGES_PCT[1:-1]), np.arange(101), side="right")
_CHUNK = 1 << 19  # samples per pass of ``_grid_sums``: its scratch arrays stay small and reused


def _grid_sums(
    value: np.ndarray,
    w: np.ndarray,
    bounds: np.ndarray,
    run_chain: np.ndarray,
    w_run: np.ndarray,
    chain_metric: np.ndarray,
    layout: _Layout,
    window: Window,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Per sample run (starting at ``bounds``, in chain ``run_chain``): ∫ value, idle and the
    histogram; ``w`` is each reading's first-piece ms, shared by its device's chains. Device
    groups at a time, so the products never fill fresh arrays of every sample (their page faults
    cost more than the arithmetic). ``None`` when a utilization value lies outside [0, 100] %."""
    chains, width = layout.chains, layout.width
    per_group = chains * width
    groups = len(value) // per_group
    value3, w3 = value.reshape(groups, chains, width), w.reshape(groups, 1, width)
    step = max(1, _CHUNK // per_group)
    scratch = np.empty(min(step, groups) * per_group)
    below = np.empty(len(scratch), dtype=bool)
    wv, w_idle = np.empty(len(bounds)), np.empty(len(bounds))
    hist = np.zeros((len(bounds), _N_BUCKETS))
    is_util = _IS_UTIL[chain_metric[run_chain]]
    for g0 in range(0, groups, step):
        g1 = min(g0 + step, groups)
        base = g0 * per_group
        a, b = np.searchsorted(bounds, [base, g1 * per_group])
        at = bounds[a:b] - base
        size = (g1 - g0) * per_group
        v, ww = value3[g0:g1], w3[g0:g1]
        product = scratch[:size].reshape(v.shape)
        np.multiply(v, ww, out=product)
        wv[a:b] = np.add.reduceat(scratch[:size], at)
        mask = below[:size].reshape(v.shape)
        np.less(v, window.idle_threshold_pct, out=mask)
        np.multiply(ww, mask, out=product)
        w_idle[a:b] = np.add.reduceat(scratch[:size], at)
        # Histogram of the utilization runs (observed ms by bucket of value).
        util = a + np.flatnonzero(is_util[a:b])
        if not util.size:
            continue
        chain = run_chain[util]
        util_chains = np.unique(chain)
        util_value = _rows_of(value.reshape(-1, width), util_chains)
        if util_value.min() < 0.0 or util_value.max() > 100.0:
            return None
        row = np.searchsorted(util_chains, chain)
        util_at = bounds[util] - (chain - row) * width
        util_w = _rows_of(w.reshape(groups, width), util_chains // chains)
        # Each sample's bucket in its run's row of buckets; the observed ms summed per (run,
        # bucket) in one pass (whole milliseconds: the sums of the comparisons per edge, exactly).
        slot = np.take(_BUCKET_OF_WHOLE_PCT, util_value.ravel().astype(np.int64))
        lengths = np.diff(np.append(util_at, util_value.size))
        slot += np.repeat(np.arange(0, len(util) * _N_BUCKETS, _N_BUCKETS), lengths)
        sums = np.bincount(slot, weights=util_w.ravel(), minlength=len(util) * _N_BUCKETS)
        hist[util] = sums.reshape(len(util), _N_BUCKETS)
    return wv, w_idle, hist


def _rows_of(table: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``table[rows]`` for sorted ``rows``: a view when they are consecutive (every chain of a
    chunk is a utilization chain, as with one metric), so no copy is made."""
    if len(rows) and rows[-1] - rows[0] + 1 == len(rows) and np.all(rows[1:] > rows[:-1]):
        return table[rows[0] : rows[-1] + 1]
    return table[rows]


_Columns = tuple[np.ndarray, np.ndarray, np.ndarray, "np.ndarray | None", np.ndarray, np.ndarray, np.ndarray]
_IS_GAUGE = np.isin(np.arange(_N_METRICS), _GAUGE_CODES)
_IS_UTIL = np.isin(np.arange(_N_METRICS), _UTIL_CODES)
_NO_CUT = np.iinfo(np.int64).max


def _cut(
    end: np.ndarray,
    batch: _Batch,
    window: Window,
    owners: pl.DataFrame,
    dev: np.ndarray,
    ts: np.ndarray,
    layout: _Layout | None = None,
) -> None:
    """End each row's interval (``end``, in place) where its device's owners change within
    ``max_gap`` after its reading. Such readings are few: with a regular layout their rows are
    computed from their positions, else found by a set lookup of (device, ts)."""
    if "r" not in owners.columns:  # every reading's (the general path); else the cuts alone
        owners = owners.with_row_index("r")
    cuts = owners.filter(pl.col("owners_until") < pl.col("ts") + window.max_gap_ms)
    if cuts.is_empty():
        return
    if layout is not None:  # owners are in reading order: reading g·width + p
        group, position = np.divmod(cuts["r"].to_numpy().astype(np.int64), layout.width)
        first = group * layout.chains * layout.width + position
        rows = (first[:, None] + np.arange(layout.chains)[None, :] * layout.width).ravel()
        until = np.repeat(cuts["owners_until"].to_numpy(), layout.chains)
    else:
        at = pl.Series("r", _reading(batch, dev, ts))
        cut_at = cuts.select(
            (pl.col("dev").cast(pl.Int64) * (1 << _ts_bits(batch)) + pl.col("ts")).alias("r"), "owners_until"
        )
        rows = np.flatnonzero(at.is_in(cut_at["r"].implode()).to_numpy())
        joined = pl.DataFrame({"r": at.gather(rows)}).join(cut_at, on="r", how="left", maintain_order="left")
        until = joined["owners_until"].to_numpy()
    end[rows] = np.minimum(end[rows], until)


def _ts_bits(batch: _Batch) -> int:
    return dict(batch.reading_key.fields)["ts"]


def _reading(batch: _Batch, dev: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """(device, ts) as one Int64, per row."""
    return (dev << _ts_bits(batch)) | ts


def _chain_gauge_intervals(
    batch: _Batch, window: Window, owners: pl.DataFrame, ordered: _Ordered, layout: _Layout | None
) -> _Columns:
    """Gauge intervals when nothing is time-sliced: each reading's chain successor is its next
    reading. Every sample is carried (no copy of the gauge rows); the energy counter's rows go
    through as well and are dropped with their sums (``_metric_stats``)."""
    rows = ordered.unique
    starts = ordered.starts if not ordered.repeated else _chain_starts(rows)
    dev, metric, ts = rows["dev"].to_numpy(), rows["metric"].to_numpy(), rows["ts"].to_numpy()
    wl, value = rows["wl"].to_numpy(), rows["value"].to_numpy()
    end = ts + window.max_gap_ms  # the cap; then the chain's next reading when sooner
    np.minimum(end[:-1], ts[1:], out=end[:-1])
    last = np.append(starts[1:] - 1, len(ts) - 1)  # a chain's last reading has no next one
    end[last] = ts[last] + window.max_gap_ms
    _cut(end, batch, window, owners, dev, ts, layout if not ordered.repeated else None)
    # Utilization is read within [0, 100] %: clip the chains that leave it (rarely any).
    util_chain = _IS_UTIL[metric[starts]]
    if util_chain.any():
        low, high = np.minimum.reduceat(value, starts), np.maximum.reduceat(value, starts)
        out_of_range = np.flatnonzero(util_chain & ((low < 0.0) | (high > 100.0)))
        if out_of_range.size:
            value = value.copy()
            for a, b in zip(starts[out_of_range], last[out_of_range] + 1, strict=True):
                np.clip(value[a:b], 0.0, 100.0, out=value[a:b])
    return dev, wl, metric, None, value, ts, end


def _sliced_gauge_intervals(
    batch: _Batch, window: Window, owners: pl.DataFrame, ordered: _Ordered
) -> _Columns:
    key = batch.sample_key
    k = pl.col("k")
    gauges = ordered.unique.filter(pl.col("metric").is_in(_GAUGE_CODES))  # still in chain order
    if "k" not in gauges.columns:  # chains found in order build no key (``_order``)
        gauges = gauges.with_columns(
            key.pack(dev=pl.col("dev"), metric=pl.col("metric"), ts=pl.col("ts"), wl=pl.col("wl")).alias("k")
        )
    chain = key.prefix(k, "metric")
    gauges = gauges.with_columns(_next_distinct(pl.col("ts"), pl.col("ts"), chain).alias("next"))
    gauges = _shares(gauges, key.prefix(k, "ts"))
    cap = pl.col("ts") + window.max_gap_ms
    intervals = gauges.select(
        "dev",
        "wl",
        "metric",
        "share",
        pl.when(pl.col("metric").is_in(_UTIL_CODES))
        .then(pl.col("value").clip(0.0, 100.0))
        .otherwise("value")
        .alias("value"),
        pl.col("ts").alias("start"),
        pl.min_horizontal(pl.col("next").fill_null(cap), cap).alias("end"),
    )
    dev, wl, metric, share, value, start = (intervals[c].to_numpy() for c in intervals.columns[:-1])
    end = intervals["end"].to_numpy().copy()
    _cut(end, batch, window, owners, dev, start)
    return dev, wl, metric, share, value, start, end


_Piece = tuple["np.ndarray | None", np.ndarray, np.ndarray]


def _pieces(start: np.ndarray, end: np.ndarray, batch: _Batch) -> list[_Piece]:
    """Intervals ``[start, end)`` clipped to the window and cut at UTC hours, as segments of
    pieces ``(take, hour, ms)``: ``take`` the interval each piece comes from (``None``: piece
    ``i`` is interval ``i``). The first segment is each kept interval's first piece, in order;
    the second, when some cross an hour (few), their further pieces. ``end`` may be clipped in
    place (callers pass an array of their own)."""
    take: np.ndarray | None = None
    if start.size and start.min() < batch.start:
        start = np.maximum(start, batch.start)
    if end.size and end.max() > batch.end:
        np.minimum(end, batch.end, out=end)
    kept = end > start
    if not kept.all():
        take = np.flatnonzero(kept)
        start, end = start[take], end[take]
    hour = start // HOUR_MS
    dur = hour + 1  # first the end of each start's hour, then the first piece's ms (one array)
    dur *= HOUR_MS
    crossing = np.flatnonzero(end > dur)
    np.minimum(end, dur, out=dur)
    dur -= start
    segments: list[_Piece] = [(take, hour, dur)]
    if crossing.size:
        at, more, more_dur = _later_pieces(crossing, hour[crossing], end)
        segments.append((take[at] if take is not None else at, more, more_dur))
    return segments


def _later_pieces(
    crossing: np.ndarray, hour: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pieces after the first of intervals ``crossing`` (indices into ``end``) that start in
    ``hour`` and cross its end: ``(at, hour, ms)``, ``at`` the interval each comes from, in order."""
    first, last = hour + 1, (end[crossing] - 1) // HOUR_MS
    counts = last - first + 1
    at = np.repeat(crossing, counts)
    more = np.repeat(first - np.cumsum(counts) + counts, counts) + np.arange(len(at))
    more_dur = np.minimum(end[at], (more + 1) * HOUR_MS) - more * HOUR_MS
    return at, more, more_dur


def _pack_row(batch: _Batch, dev: np.ndarray, hour: np.ndarray, wl: np.ndarray) -> np.ndarray:
    """``batch.row_key`` of (device, hour, workload) columns, in NumPy."""
    return _pack(batch.row_key, dev=dev, hour=hour, wl=wl)


_Segment = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, "np.ndarray | None"]


def _metric_stats(segments: list[_Segment], window: Window) -> pl.DataFrame:
    """Per (ledger row ``rk``, gauge metric): observed ``w``, ``wv`` (∫ value), ``w_idle``,
    ``v_max`` and, for utilization metrics, the histogram ``h0…`` of observed time by bucket.

    Each segment (``rk``, metric, value, ms, share) comes in chain order, so a (row, metric) is a
    few long runs of consecutive pieces (a workload or an hour changes rarely): each run is
    summed in one pass of NumPy's ``reduceat`` (the histogram by ``bincount`` on run × bucket),
    and only the runs — thousands, not millions — are grouped. A hash group-by of every piece by
    (row, metric, bucket) took most of this time. Runs of a metric that is no gauge (the energy
    counter, carried along) are dropped.
    """
    return _sum_runs([_runs(*segment, window) for segment in segments if segment[0].size])


def _sum_runs(tables: list[dict[str, np.ndarray]]) -> pl.DataFrame:
    """The runs of every segment (``_runs``' columns, in segment order) summed per (row, metric)."""
    hist_cols = [f"h{i}" for i in range(_N_BUCKETS)]
    if not tables:
        floats = {c: pl.Float64 for c in ["w", "wv", "w_idle", *hist_cols, "v_max"]}
        return pl.DataFrame(schema={"rk": pl.Int64, "metric": pl.Int64, **floats})
    runs = {name: np.concatenate([t[name] for t in tables]) for name in tables[0]}
    gauge_runs = _IS_GAUGE[runs["g"] % _N_METRICS]
    if not gauge_runs.all():
        runs = {name: column[gauge_runs] for name, column in runs.items()}
    return (
        pl.DataFrame(runs)
        .group_by("g")
        .agg(pl.col("w", "wv", "w_idle", *hist_cols).sum(), pl.col("v_max").max())
        .select(
            (pl.col("g") // _N_METRICS).alias("rk"),
            (pl.col("g") % _N_METRICS).alias("metric"),
            pl.all().exclude("g"),
        )
    )


def _runs(
    rk: np.ndarray,
    metric: np.ndarray,
    value: np.ndarray,
    dur: np.ndarray,
    share: np.ndarray | None,
    window: Window,
) -> dict[str, np.ndarray]:
    """One segment's runs of equal (row, metric): their key ``g`` and sums (``_metric_stats``)."""
    group = rk  # the caller's own array: turned into the (row, metric) key in place
    group *= _N_METRICS
    group += metric
    new_run = np.empty(len(group), dtype=bool)
    new_run[0] = True
    np.not_equal(group[1:], group[:-1], out=new_run[1:])
    starts = np.flatnonzero(new_run)
    w = dur * share if share is not None else dur.astype(np.float64)
    product = w * value
    runs: dict[str, np.ndarray] = {
        "g": group[starts],
        "w": np.add.reduceat(w, starts),
        "wv": np.add.reduceat(product, starts),
    }
    np.copyto(product, 0.0)
    np.copyto(product, w, where=value < window.idle_threshold_pct)
    runs["w_idle"] = np.add.reduceat(product, starts)
    runs["v_max"] = np.maximum.reduceat(value, starts)
    # The utilization pieces are whole runs (a run has one metric): their indices and run numbers
    # from the runs, and each piece's bucket: how many inner edges lie at or below the value (what
    # ``searchsorted(edges, value, "right")`` gives, by compares: no branches).
    util_runs = np.flatnonzero(_IS_UTIL[runs["g"] % _N_METRICS])
    lengths = np.diff(np.append(starts, len(group)))[util_runs]
    run = np.repeat(util_runs, lengths)
    util = np.repeat(starts[util_runs] - np.cumsum(lengths) + lengths, lengths) + np.arange(len(run))
    run *= _N_BUCKETS
    util_value = value[util]
    for edge in HIST_EDGES_PCT[1:-1]:
        run += util_value >= edge
    hist = np.bincount(run, weights=w[util], minlength=len(starts) * _N_BUCKETS)
    hist = hist.reshape(len(starts), _N_BUCKETS)
    runs.update({f"h{i}": hist[:, i] for i in range(_N_BUCKETS)})
    return runs


def _widen(per_metric: pl.DataFrame, batch: _Batch) -> pl.DataFrame:
    """Per-(row, metric) stats → one wide row per ledger row (small frames from here on).

    Each (row, metric) is one row of ``per_metric``, so a wide column is that row's value placed
    by index (the sum of one value is the value; of none, 0; the max of none, null) — NumPy over
    the rows once, where a group-by with a filtered aggregation per column cost as much as the
    sums over every sample."""
    rk, metric = per_metric["rk"].to_numpy(), per_metric["metric"].to_numpy()
    keys, row = np.unique(rk, return_inverse=True)
    row = row.ravel()
    rows_of = {code: np.flatnonzero(metric == code) for code in np.unique(metric).tolist()}
    none = np.empty(0, dtype=np.int64)
    wide: dict[str, np.ndarray] = {"rk": keys}
    present: dict[str, np.ndarray] = {}  # rows that have a value (else null), of the max columns
    columns = {name: per_metric[name].to_numpy() for name in per_metric.columns}
    # Divided as the group-by did, by an expression over the whole column: Polars multiplies by
    # the reciprocal (divides exactly when the frame has one row), and the rows keep those bits.
    columns["busy"] = per_metric.select(pl.col("wv") / 100.0).to_series().to_numpy()

    def place(name: str, column: str, code: int, at: np.ndarray | None = None) -> None:
        at = rows_of.get(code, none) if at is None else at
        out = np.zeros(len(keys))
        out[row[at]] = columns[column][at]
        wide[name] = out

    for m in UTIL_METRICS:
        code = _CODE[m.value]
        place(f"obs_{m.value}", "w", code)
        place(f"busy_{m.value}", "busy", code)
        place(f"idle_{m.value}", "w_idle", code)
    power, used = _CODE[Metric.POWER_W.value], _CODE[Metric.MEM_USED_B.value]
    place("power_wms", "wv", power)
    place("power_ms", "w", power)
    place("mem_wms", "wv", used)
    place("mem_ms", "w", used)
    for name, metric_max in (("mem_used_max_b", Metric.MEM_USED_B), ("mem_total_b", Metric.MEM_TOTAL_B),
                             ("temp_max_c", Metric.TEMP_C)):  # fmt: skip
        code = _CODE[metric_max.value]
        place(name, "v_max", code)
        present[name] = np.zeros(len(keys), dtype=bool)
        present[name][row[rows_of.get(code, none)]] = True
    # A device-hour with sm_active for any workload reads it as every workload's default metric.
    shift = batch.row_key.shift_of("hour")
    sm_dev_hours = np.unique(rk[rows_of.get(_SM, none)] >> shift)
    has_sm = np.isin(keys >> shift, sm_dev_hours)
    picked = np.flatnonzero(metric == np.where(has_sm, _SM, _GPU)[row])  # its histogram's rows
    present["hist"] = np.zeros(len(keys), dtype=bool)
    present["hist"][row[picked]] = True
    for i, column in enumerate(HIST_COLUMNS):
        place(column, f"h{i}", -1, picked)
    frame = pl.DataFrame(wide).with_columns(pl.Series("has_sm", has_sm))
    masks = pl.DataFrame(present)
    return frame.with_columns(
        [pl.when(masks[name]).then(pl.col(name)) for name in ("mem_used_max_b", "mem_total_b", "temp_max_c")]
        + [pl.when(masks["hist"]).then(pl.col(column)) for column in HIST_COLUMNS]
    )


def _energy(batch: _Batch, window: Window, ordered: _Ordered) -> pl.DataFrame:
    """Counter joules per ledger row: each delta spread evenly over the span between readings."""
    if not ordered.sliced:
        return _chain_energy(batch, window, ordered)
    key = batch.reading_key
    k = pl.col("k")
    # The energy chains, in chain order: keyed by (dev, ts, wl) they are in key order too.
    counter = ordered.unique.filter(pl.col("metric") == _ENERGY).with_columns(
        key.pack(dev=pl.col("dev"), ts=pl.col("ts"), wl=pl.col("wl")).alias("k")
    )
    counter = counter.with_columns(
        _next_distinct(pl.col("ts"), pl.col("ts"), pl.col("dev")).alias("next"),
        _next_distinct(pl.col("value"), pl.col("ts"), pl.col("dev")).alias("next_value"),
    )
    counter = counter.filter(
        pl.col("next").is_not_null() & ((pl.col("next") - pl.col("ts")) <= window.presence_ms)
    )
    counter = _shares(counter, key.prefix(k, "ts"))
    # A drop is a counter reset: the later reading counts from zero.
    delta = (
        pl.when(pl.col("next_value") >= pl.col("value"))
        .then(pl.col("next_value") - pl.col("value"))
        .otherwise(pl.col("next_value"))
    )
    spans = counter.select(
        "dev",
        "wl",
        pl.col("ts").alias("start"),
        pl.col("next").alias("end"),
        (delta * pl.col("share") / (pl.col("next") - pl.col("ts"))).alias("j_per_ms"),
    )
    dev, wl, start, end, j_per_ms = (spans[c].to_numpy() for c in spans.columns)
    return _sum_by_row(batch, dev, wl, start, end.copy(), j_per_ms, "counter_j")


def _chain_energy(batch: _Batch, window: Window, ordered: _Ordered) -> pl.DataFrame:
    """``_energy`` when nothing is time-sliced: a reading's successor in its device's energy chain
    is its next reading, every share is 1 (``delta × 1 / ms`` is ``delta / ms``, bit for bit)."""
    rows = ordered.unique
    starts = ordered.starts if not ordered.repeated else _chain_starts(rows)
    metric = rows["metric"].to_numpy()
    chains = np.flatnonzero(metric[starts] == _ENERGY)
    if not chains.size:
        return pl.DataFrame(schema={"rk": pl.Int64, "counter_j": pl.Float64})
    begin, stop = starts[chains], np.append(starts[1:], len(metric))[chains]
    lengths = stop - begin
    at = np.repeat(begin - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))
    ts, value = rows["ts"].to_numpy()[at], rows["value"].to_numpy()[at]
    same = np.ones(max(len(at) - 1, 0), dtype=bool)  # reading i+1 is in reading i's chain
    same[np.cumsum(lengths)[:-1] - 1] = False
    step = ts[1:] - ts[:-1]
    i = np.flatnonzero(same & (step <= window.presence_ms))
    value, next_value = value[i], value[i + 1]
    # A drop is a counter reset: the later reading counts from zero.
    delta = np.where(next_value >= value, next_value - value, next_value)
    j_per_ms = delta / step[i]
    at = at[i]
    dev, wl = rows["dev"].to_numpy()[at], rows["wl"].to_numpy()[at]
    return _sum_by_row(batch, dev, wl, ts[i], ts[i + 1], j_per_ms, "counter_j")


def _grid_energy(batch: _Batch, window: Window, ordered: _Ordered, grid: _Grid) -> pl.DataFrame:
    """``_chain_energy`` of a regular scrape: each energy chain and its times are one row of the
    grid, so the pairs of successive readings are two shifted views, not gathered samples."""
    chains, width = grid.layout.chains, grid.layout.width
    chain_metric = ordered.rows["metric"].to_numpy()[ordered.starts]
    energy_chains = np.flatnonzero(chain_metric == _ENERGY)
    if not energy_chains.size or width < 2:
        return pl.DataFrame(schema={"rk": pl.Int64, "counter_j": pl.Float64})
    group = energy_chains // chains
    ts = grid.ts.reshape(-1, width)[group]
    value = ordered.rows["value"].to_numpy().reshape(-1, width)[energy_chains]
    step = ts[:, 1:] - ts[:, :-1]
    # A drop is a counter reset: the later reading counts from zero.
    j_per_ms = value[:, 1:] - value[:, :-1]
    np.copyto(j_per_ms, value[:, 1:], where=value[:, 1:] < value[:, :-1])
    j_per_ms /= step
    start, end = ts[:, :-1], ts[:, 1:]
    dev, wl = grid.dev.reshape(-1, width)[group, :-1], grid.wl.reshape(-1, width)[group, :-1]
    spanned = step <= window.presence_ms
    if spanned.all():
        return _sum_by_row(
            batch, dev.ravel(), wl.ravel(), start.ravel(), end.ravel(), j_per_ms.ravel(), "counter_j"
        )
    return _sum_by_row(
        batch, dev[spanned], wl[spanned], start[spanned], end[spanned], j_per_ms[spanned], "counter_j"
    )


def _sum_by_row(
    batch: _Batch,
    dev: np.ndarray,
    wl: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    weight: np.ndarray,
    name: str,
) -> pl.DataFrame:
    """Per ledger row, the sum of ``weight × ms`` over the intervals' pieces (``_pieces``; ``end``
    may be clipped in place)."""
    rk, x = [], []
    for take, hour, dur in _pieces(start, end, batch):
        if take is None:
            rk.append(_pack_row(batch, dev, hour, wl))
            x.append(weight * dur)
        else:
            rk.append(_pack_row(batch, dev[take], hour, wl[take]))
            x.append(weight[take] * dur)
    pieces = pl.DataFrame(
        {"rk": np.concatenate(rk) if len(rk) > 1 else rk[0], "x": np.concatenate(x) if len(x) > 1 else x[0]}
    )
    return pieces.group_by("rk").agg(pl.col("x").sum().alias(name))


def _sum_reading_ms(
    batch: _Batch,
    dev: np.ndarray,
    wl: np.ndarray,
    start: np.ndarray,
    hour: np.ndarray,
    rk: np.ndarray,
    end: np.ndarray,
    name: str,
) -> pl.DataFrame:
    """``_sum_by_row`` of readings ``[start, end)`` with every weight 1, ``start`` already clipped
    to the window and its hour and ledger row given (``end`` is clipped in place): the first
    pieces summed over each run of equal row in NumPy, then per row over the runs (thousands,
    where the readings are millions), with the later pieces of the few that cross an hour.
    Whole milliseconds, so the floats are those of any order of summing."""
    np.minimum(end, batch.end, out=end)
    kept = end > start
    bound = hour + 1
    bound *= HOUR_MS
    crossing = np.flatnonzero(kept & (end > bound))
    np.minimum(end, bound, out=bound)
    bound -= start  # each reading's first piece, in ms
    new_run = np.empty(len(rk), dtype=bool)
    new_run[:1] = True
    np.not_equal(rk[1:], rk[:-1], out=new_run[1:])
    new_run[1:] |= kept[1:] != kept[:-1]  # a dropped reading's run is summed and thrown away
    runs = np.flatnonzero(new_run)
    kept_runs = kept[runs]
    keys, sums = [rk[runs][kept_runs]], [np.add.reduceat(bound, runs)[kept_runs] if runs.size else bound]
    if crossing.size:
        at, more, more_ms = _later_pieces(crossing, hour[crossing], end)
        keys.append(_pack_row(batch, dev[at], more, wl[at]))
        sums.append(more_ms)
    frame = pl.DataFrame({"rk": np.concatenate(keys), "x": np.concatenate(sums).astype(np.float64)})
    return frame.group_by("rk").agg(pl.col("x").sum().alias(name))


def _empty_row_frame() -> pl.DataFrame:
    return pl.DataFrame(schema={"rk": pl.Int64, "present_ms": pl.Float64})


def _decode(rows: pl.DataFrame, batch: _Batch) -> pl.DataFrame:
    for column in (
        *[f"{p}_{m.value}" for m in UTIL_METRICS for p in ("obs", "busy", "idle")],
        *HIST_COLUMNS,
        "power_wms",
        "power_ms",
        "mem_wms",
        "mem_ms",
        "counter_j",
        "mem_used_max_b",
        "mem_total_b",
        "temp_max_c",
    ):
        if column not in rows.columns:
            rows = rows.with_columns(pl.lit(None, dtype=pl.Float64).alias(column))
    if "has_sm" not in rows.columns:
        rows = rows.with_columns(pl.lit(None, dtype=pl.Boolean).alias("has_sm"))
    # The codes are ranks of the sorted strings (``_encode``), so the key's order is the rows'
    # order by (device_id, hour_index, workload_key): sorted by one integer here, not by strings.
    rows = rows.sort("rk")
    key = batch.row_key
    rk = pl.col("rk")
    zero_filled = [f"{p}_{m.value}" for m in UTIL_METRICS for p in ("obs", "busy", "idle")] + list(
        HIST_COLUMNS
    )
    rows = rows.with_columns(pl.col(c).cast(pl.Float64).fill_null(0.0) for c in [*zero_filled, "present_ms"])
    sm = pl.col("has_sm").fill_null(False)

    def pick(part: str) -> pl.Expr:
        return pl.when(sm).then(pl.col(f"{part}_sm_active")).otherwise(pl.col(f"{part}_gpu_util")) / 1000.0

    power_ms, mem_ms = pl.col("power_ms").fill_null(0.0), pl.col("mem_ms").fill_null(0.0)
    origin_hour = batch.origin_ms // HOUR_MS
    out = rows.select(
        key.unpack(rk, "dev").alias("dev"),
        (key.unpack(rk, "hour") + origin_hour).alias("hour_index"),
        key.unpack(rk, "wl").alias("wl"),
        pl.when(sm)
        .then(pl.lit(Metric.SM_ACTIVE.value))
        .otherwise(pl.lit(Metric.GPU_UTIL.value))
        .alias("default_metric"),
        (pl.col("present_ms") / 1000.0).alias("present_s"),
        pick("obs").alias("observed_s"),
        pick("busy").alias("busy_s"),
        pick("idle").alias("idle_s"),
        *[(pl.col(c) / 1000.0).alias(c) for c in HIST_COLUMNS],
        *[
            (pl.col(f"{p}_{m.value}") / 1000.0).alias(f"{p}_s_{m.value}")
            for m in UTIL_METRICS
            for p in ("obs", "busy", "idle")
        ],
        pl.coalesce(pl.col("counter_j"), pl.when(power_ms > 0).then(pl.col("power_wms") / 1000.0)).alias(
            "energy_j"
        ),
        (pl.col("counter_j").is_null() & (power_ms > 0)).alias("energy_estimated"),
        pl.when(power_ms > 0).then(pl.col("power_wms") / power_ms).alias("power_avg_w"),
        pl.col("mem_used_max_b").cast(pl.Float64),
        pl.when(mem_ms > 0).then(pl.col("mem_wms") / mem_ms).alias("mem_used_avg_b"),
        pl.col("mem_total_b").cast(pl.Float64),
        pl.col("temp_max_c").cast(pl.Float64),
    )
    # Float sums depend on summation order, which a hash group-by does not fix; rounding to 1 µs
    # and 1 mJ makes a re-ingest write identical rows (the sensors are nowhere near that precise).
    out = out.with_columns(
        pl.col([c for c in out.columns if c.endswith("_s") or "_s_" in c]).round(6),
        pl.col("energy_j", "power_avg_w", "mem_used_avg_b").round(3),
    )
    devices, workloads = batch.devices, batch.workloads
    out = out.with_columns(
        pl.col("dev").map_batches(lambda c: devices.gather(c), return_dtype=pl.String),
        pl.col("wl").map_batches(lambda c: workloads.gather(c), return_dtype=pl.String),
    )
    return out.rename({"dev": "device_id", "wl": "workload_key"})
