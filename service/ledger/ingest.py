"""Running a metrics connector over a window: collect → validate → normalize → price → write.

The ingestor, not the connector, owns idempotency and progress (docs/design.md §7): a window is cut into
UTC days, each day is read with one presence gap of context on both sides, its hours are
replaced in one transaction, and the connector's watermark moves only after the whole window is
in. A crash resumes from the watermark; a repeated window changes nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import polars as pl
from sqlalchemy import Engine
from sqlmodel import Session

from connectors.sdk import ConnectorStatus, DeviceInfo, MetricsConnector, WorkloadInfo
from connectors.sdk.shapes import DEVICE, WORKLOAD
from connectors.sdk.vendors import with_vendor
from service.attribution import ledger as attribution
from service.attribution.rules import AttributionRule
from service.attribution.shared_facts import other_facts, with_other_facts
from service.billing.tags import with_bill_tags
from service.dbtypes import table_of
from service.ledger import partitions, store
from service.ledger import version as ledger_version
from service.ledger.invariants import check_rows
from service.ledger.normalize import Window, normalize
from service.ledger.validate import validate_samples
from service.metrics_catalog import DEFAULT_IDLE_THRESHOLD_PCT
from service.models import Rejection
from service.pricing.apply import PriceBook, price_rows
from service.pricing.tco import SiteConfig
from service.run_recorder import RunRecorder
from service.runs import last_watermark as last_watermark
from service.timeutil import HOUR_MS, ceil_hour, floor_hour, from_ms, to_ms

DAY = dt.timedelta(days=1)
ChunkCallback = Callable[[dt.datetime, dt.datetime], None]


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What one ``ingest_window`` did. ``samples_read == samples_accepted + samples_rejected``."""

    connector: str
    start: dt.datetime
    end: dt.datetime
    status: ConnectorStatus
    samples_read: int
    samples_accepted: int
    samples_rejected: int
    ledger_rows: int
    devices: int
    run_id: int


def ingest_window(
    engine: Engine,
    name: str,
    connector: MetricsConnector,
    start: dt.datetime,
    end: dt.datetime,
    *,
    sites: Sequence[SiteConfig] = (),
    idle_threshold_pct: float = DEFAULT_IDLE_THRESHOLD_PCT,
    attribution_rules: Sequence[AttributionRule] = (),
    on_chunk: ChunkCallback | None = None,
    after_ingest: Callable[[Engine, dt.datetime, dt.datetime], object] | None = None,
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
) -> IngestResult:
    """Ingest hours ``[floor_hour(start), ceil_hour(end))`` of connector ``name`` into the ledger.

    ``attribution_rules`` (``[[attribution]]``, docs/attribution.md) name the rows' owners from
    the facts the connector reports; the facts are kept for ``gpu-ledger reattribute``.

    ``after_ingest(engine, start, end)`` runs once the window is in (the service passes the
    re-pricing from bills, ``service.billing.rates.reprice_after_metrics``)."""
    start, end = floor_hour(start), ceil_hour(end)
    if end <= start:
        raise ValueError(
            f"ingest window is empty: end {end.isoformat()} is not after start {start.isoformat()}"
        )
    devices_seen: set[str] = set()
    with RunRecorder(engine, name, type(connector).__name__, start, end, clock) as run:
        with Session(engine) as session:
            book = PriceBook.load(session, sites, start=start, end=end)
        chunk_start = start
        while chunk_start < end:
            next_midnight = dt.datetime.combine(chunk_start.date() + DAY, dt.time(), tzinfo=dt.UTC)
            chunk_end = min(end, next_midnight)
            window = Window(
                start_ms=to_ms(chunk_start),
                end_ms=to_ms(chunk_end),
                max_gap_ms=round(connector.sampling.max_gap_s * 1000),
                presence_gap_ms=round(connector.sampling.presence_gap_s * 1000),
                idle_threshold_pct=idle_threshold_pct,
            )
            devices_seen |= _ingest_chunk(
                engine, name, connector, window, book, run, attribution_rules, clock
            )
            if on_chunk is not None:
                on_chunk(chunk_start, chunk_end)
            chunk_start = chunk_end
        if run.counts.ledger_rows >= partitions.ANALYZE_AFTER_ROWS:  # a backfill: fresh statistics
            with engine.begin() as conn:
                partitions.analyze_parent(conn)
        if after_ingest is not None and run.counts.accepted:
            after_ingest(engine, start, end)
        status = ConnectorStatus.OK if run.counts.accepted else ConnectorStatus.MISSING_DATA
        # A window reaching into the current hour is complete only up to now; the scheduler
        # re-reads from the watermark, so the rest of the hour is filled in by the next run.
        now = clock()
        # a connector that can say why it found nothing (the prometheus connector: the selector and
        # names it asked for) says it in the run's message and lastError
        missing = status == ConnectorStatus.MISSING_DATA
        hint = getattr(connector, "missing_data_hint", None) if missing else None
        run.finish(status, now=now, watermark=min(end, max(start, now)), error=hint)
    return IngestResult(
        connector=name,
        start=start,
        end=end,
        status=status,
        samples_read=run.counts.read,
        samples_accepted=run.counts.accepted,
        samples_rejected=run.counts.rejected,
        ledger_rows=run.counts.ledger_rows,
        devices=len(devices_seen),
        run_id=run.run_id,
    )


def _ingest_chunk(
    engine: Engine,
    name: str,
    connector: MetricsConnector,
    window: Window,
    book: PriceBook,
    run: RunRecorder,
    rules: Sequence[AttributionRule],
    clock: Callable[[], dt.datetime],
) -> set[str]:
    """Ingest one day of the window in one transaction; its counts go to ``run``, the ids of the
    devices seen in it are returned."""
    frames: list[pl.DataFrame] = []
    devices: dict[str, DeviceInfo] = {}
    workloads: dict[str, WorkloadInfo] = {}
    for batch in connector.collect(from_ms(window.read_start_ms), from_ms(window.read_end_ms)):
        frames.append(batch.samples)
        # The descriptions (facts, tags) of a batch inside the day win over those of the context
        # read around it: a pod relabelled tomorrow keeps today's labels today.
        ts = batch.samples["ts_ms"] if batch.samples.height else None
        inside = ts is not None and bool(((ts >= window.start_ms) & (ts < window.end_ms)).any())
        # a device whose source names no vendor gets the one its model says (connectors.sdk.vendors)
        for d in batch.devices:
            if inside or d.device_id not in devices:
                devices[d.device_id] = with_vendor(d)
        for w in batch.workloads:
            if inside or w.workload_key not in workloads:
                workloads[w.workload_key] = w
    samples = pl.concat(frames, how="vertical_relaxed") if frames else pl.DataFrame()
    checked = validate_samples(samples, devices.keys())
    rows = normalize(checked.accepted, window)
    check_rows(rows, devices, connector=name)  # a row breaking the ledger's invariants is a bug: raise
    rows = _with_dimensions(rows, name, devices, workloads)
    asked = devices
    if rules:  # what other sources keep about the same keys (a Slurm job's account): shared_facts
        with engine.connect() as conn:
            held_keys = rows["workload_key"].unique().to_list() if not rows.is_empty() else []
            known = with_other_facts(workloads, other_facts(conn, name, held_keys))
            # and what the bills say about the devices' instances (service.billing.tags)
            asked = with_bill_tags(conn, devices, from_ms(window.start_ms), from_ms(window.end_ms))
    rows = price_rows(attribution.owners(rows, asked, known if rules else workloads, rules), book)
    in_window = checked.accepted.filter(
        (pl.col("ts_ms") >= window.start_ms) & (pl.col("ts_ms") < window.end_ms)
    )
    seen = in_window.group_by("device_id").agg(
        pl.col("ts_ms").min().alias("first_ms"),
        pl.col("ts_ms").max().alias("last_ms"),
        pl.col("metric").cast(pl.String).unique().sort().str.join(",").alias("metrics"),
    )
    ids = set(seen["device_id"].to_list())
    with engine.begin() as conn:
        store.upsert_devices(conn, name, devices.values(), seen)
        held = rows["workload_key"].unique().to_list() if not rows.is_empty() else []
        attribution.save_workload_facts(conn, name, workloads, held, clock())
        attribution.save_facts_by_day(conn, name, rows, devices, workloads)  # what reattribute reads
        written = store.replace_hours(
            conn, name, window.start_ms // HOUR_MS, window.end_ms // HOUR_MS, sorted(ids), rows
        )
        first_day, last_day = window.start_ms // (24 * HOUR_MS), (window.end_ms - 1) // (24 * HOUR_MS)
        store.rebuild_days(conn, first_day, last_day)
        if checked.rejections:
            conn.execute(
                table_of(Rejection).insert(),
                [{"run_id": run.run_id, "connector": name, **r} for r in checked.rejections],
            )
        ledger_version.bump(conn)  # last: cached answers of every process are stale from this commit
    run.counts.add(accepted=checked.accepted.height, rejected=checked.rejected, ledger_rows=written)
    return ids


def _with_dimensions(
    rows: pl.DataFrame, source: str, devices: dict[str, DeviceInfo], workloads: dict[str, WorkloadInfo]
) -> pl.DataFrame:
    """Ledger rows get their device and workload dimensions and their hour, day and month."""
    device_frame = pl.DataFrame(
        [{f: getattr(d, f) for f in _DEVICE_SCHEMA} for d in devices.values()],
        schema=_DEVICE_SCHEMA,
        orient="row",
    ).drop("gpu_index", "parent_device_id")
    workload_frame = pl.DataFrame(
        [{f: getattr(w, f) for f in _WORKLOAD_SCHEMA} for w in workloads.values()],
        schema=_WORKLOAD_SCHEMA,
        orient="row",
    )
    hour_start = pl.from_epoch(pl.col("hour_index") * 3600, time_unit="s").dt.replace_time_zone("UTC")
    return (
        rows.join(device_frame, on="device_id", how="left")
        .join(workload_frame, on="workload_key", how="left")
        .with_columns(
            pl.lit(source).alias("source"),
            hour_start.alias("hour_start"),
            (pl.col("hour_index") // 24).alias("day_index"),
            ((hour_start.dt.year() - 1970) * 12 + hour_start.dt.month() - 1)
            .cast(pl.Int64)
            .alias("month_index"),
        )
    )


_POLARS_TYPES = {str: pl.String, int: pl.Int64, float: pl.Float64}
# Column → dtype of the declared attributes (connectors.sdk.shapes), in DeviceInfo/WorkloadInfo order.
_DEVICE_SCHEMA = {a.name: _POLARS_TYPES[a.kind] for a in DEVICE}
_WORKLOAD_SCHEMA = {a.name: _POLARS_TYPES[a.kind] for a in WORKLOAD}
