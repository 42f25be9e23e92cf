"""``gpu-ledger reattribute``: the current ``[[attribution]]`` rules applied to stored ledger rows.

Each UTC day of the window is one transaction. Its rows' distinct (source, device, workload_key)
are put to the rules (:func:`service.attribution.engine.attribute`) with the facts kept at ingest
for that day — the device's ``device_tag_day`` tags and the workload's ``workload_fact_day`` row,
which also holds the owner the source itself named (a rule may have overwritten the ledger's copy);
for a day ingested before facts were kept per day, the latest ones (``device.tags``,
``workload_fact``). Rows whose owner changes
are updated by key; the day's rollups and segments are rebuilt and the ledger version bumped in
the same transaction. Nothing else of a row changes, so costs and hours stay where they were, and
a second run with the same rules finds nothing to change (and writes nothing).

A row with no ``workload_fact`` (ingested before facts were kept) is put to the rules with its
own owner as the source's when the source named it (``owner_rule`` null or 'source'); a row a rule
named and whose facts are gone is left as it is.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl
from sqlalchemy import Connection, Engine, and_, bindparam, select, update

from service.attribution.engine import FACTS_DTYPE, OWNER_COLUMNS, attribute, facts_series
from service.attribution.rules import SOURCE_RULE, AttributionRule
from service.attribution.shared_facts import with_other_facts_frame
from service.billing.tags import with_bill_tags_frame
from service.dbtypes import table_of
from service.ledger import store
from service.ledger import version as ledger_version
from service.models import Device, DeviceTagDay, LedgerHour, WorkloadFact, WorkloadFactDay
from service.timeutil import HOUR_S, ceil_hour, floor_hour, hour_start

KEYS = ("source", "device_id", "workload_key")
HOUR = table_of(LedgerHour)
HOURS_PER_DAY = 24
DayCallback = Callable[[dt.datetime, dt.datetime], None]


@dataclass(frozen=True, slots=True)
class ReattributeResult:
    """What one run did: owners asked (distinct source/device/workload per day), those whose
    owner changed, the hourly rows rewritten and the days rebuilt."""

    start: dt.datetime
    end: dt.datetime
    owners: int
    owners_changed: int
    rows_changed: int
    days_rebuilt: int


def reattribute(
    engine: Engine,
    rules: Sequence[AttributionRule],
    start: dt.datetime,
    end: dt.datetime,
    *,
    on_day: DayCallback | None = None,
    dry_run: bool = False,
) -> ReattributeResult:
    """Apply ``rules`` to ledger hours ``[floor_hour(start), ceil_hour(end))`` (module docstring).
    ``dry_run``: count what would change, then roll each day back (nothing written or bumped)."""
    start, end = floor_hour(start), ceil_hour(end)
    if end <= start:
        raise ValueError(
            f"reattribute window is empty: end {end.isoformat()} is not after start {start.isoformat()}"
        )
    owners = changed = rows = days = 0
    chunk = start
    while chunk < end:
        midnight = dt.datetime.combine(chunk.date() + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)
        chunk_end = min(end, midnight)
        with engine.connect() as conn, conn.begin() as tx:
            asked, moved, written = _chunk(conn, rules, _hour_index(chunk), _hour_index(chunk_end))
            if written and dry_run:
                days += 1
            elif written:
                day = _hour_index(chunk) // HOURS_PER_DAY
                store.rebuild_days(conn, day, day)
                ledger_version.bump(conn)  # last: cached answers are stale from this commit
                days += 1
            if dry_run:
                tx.rollback()
        owners, changed, rows = owners + asked, changed + moved, rows + written
        if on_day is not None:
            on_day(chunk, chunk_end)
        chunk = chunk_end
    return ReattributeResult(start, end, owners, changed, rows, days)


def _hour_index(at: dt.datetime) -> int:
    return int(at.timestamp()) // HOUR_S


def _chunk(conn: Connection, rules: Sequence[AttributionRule], lo: int, hi: int) -> tuple[int, int, int]:
    """(owners asked, owners changed, rows updated) for hours ``[lo, hi)``."""
    current = _current_owners(conn, lo, hi)
    if current.is_empty():
        return 0, 0, 0
    asked = current.unique(list(KEYS)).height
    question = _question(conn, current, lo, hi)
    if question.is_empty():
        return asked, 0, 0
    answer = attribute(question, rules)
    decided = answer.select(*KEYS, *[pl.col(c).alias(f"new_{c}") for c in (*OWNER_COLUMNS, "owner_rule")])
    differs = current.join(decided, on=list(KEYS), how="inner").filter(
        pl.any_horizontal(pl.col(c).ne_missing(pl.col(f"new_{c}")) for c in (*OWNER_COLUMNS, "owner_rule"))
    )
    moved = decided.join(differs.select(KEYS).unique(), on=list(KEYS), how="semi")
    if moved.is_empty():
        return asked, 0, 0
    return asked, moved.height, _update(conn, moved, lo, hi)


def _current_owners(conn: Connection, lo: int, hi: int) -> pl.DataFrame:
    """Distinct (source, device, workload_key, owner columns, owner_rule) of the allocated rows."""
    h = HOUR
    stmt = (
        select(*[h.c[k] for k in KEYS], *[h.c[c] for c in OWNER_COLUMNS], h.c.owner_rule)
        .where(
            h.c.hour_index >= lo,
            h.c.hour_index < hi,
            h.c.hour_start >= hour_start(lo),  # partition pruning on PostgreSQL
            h.c.hour_start < hour_start(hi),
            h.c.workload_key != "",
        )
        .distinct()
    )
    schema = dict.fromkeys((*KEYS, *OWNER_COLUMNS, "owner_rule"), pl.String)
    return pl.DataFrame([tuple(r) for r in conn.execute(stmt)], schema=schema, orient="row")


def _question(conn: Connection, current: pl.DataFrame, lo: int, hi: int) -> pl.DataFrame:
    """One row per key: the source's own owner and the facts, from ``workload_fact`` and ``device``;
    keys without kept facts whose owner a rule named are left out (nothing to re-decide from)."""
    keys = current.unique(list(KEYS)).select(KEYS)
    # Without kept facts, the row's own owner is the source's where the source named it.
    own = (
        current.filter(pl.col("owner_rule").is_null() | (pl.col("owner_rule") == SOURCE_RULE))
        .sort(*KEYS, *OWNER_COLUMNS, nulls_last=True)
        .unique(list(KEYS), keep="first", maintain_order=True)
        .select(*KEYS, *OWNER_COLUMNS)
        .with_columns(pl.lit(None, FACTS_DTYPE).alias("facts"))
    )
    day = lo // HOURS_PER_DAY  # a chunk is one UTC day: the facts reported for it
    kept = keys.join(_workload_facts(conn, keys, day), on=["source", "workload_key"], how="inner")
    without = own.join(kept.select(KEYS), on=list(KEYS), how="anti")
    question = pl.concat([kept.select(own.columns), without], how="vertical")
    question = with_other_facts_frame(conn, question)  # a facts connector's, about the same keys
    question = question.join(_device_tags(conn, keys, day), on="device_id", how="left")
    # what the bills of hours [lo, hi) say about the devices' instances (service.billing.tags)
    return with_bill_tags_frame(conn, question, hour_start(lo), hour_start(hi))


#: Keys per ``IN (…)``: under both databases' parameter limits.
KEY_CHUNK = 5_000


def _workload_facts(conn: Connection, keys: pl.DataFrame, day: int) -> pl.DataFrame:
    """Facts and the source's owner of ``keys``' (source, workload_key) as reported for UTC day
    ``day`` (``workload_fact_day``); a key with none kept for that day (ingested before they were
    kept) has its latest (``workload_fact``)."""
    by_day, latest = table_of(WorkloadFactDay), table_of(WorkloadFact)
    wanted = keys.select("source", "workload_key").unique()
    found: list[tuple[Any, ...]] = []
    for source, part in wanted.partition_by("source", as_dict=True).items():
        names = part["workload_key"].to_list()
        for i in range(0, len(names), KEY_CHUNK):
            chunk = names[i : i + KEY_CHUNK]
            dated = select(
                by_day.c.source, by_day.c.workload_key, *[by_day.c[c] for c in OWNER_COLUMNS], by_day.c.facts
            ).where(by_day.c.source == source[0], by_day.c.workload_key.in_(chunk), by_day.c.day_index == day)
            rows = [tuple(r) for r in conn.execute(dated)]
            missing = sorted(set(chunk) - {r[1] for r in rows})
            if missing:
                stmt = select(
                    latest.c.source,
                    latest.c.workload_key,
                    *[latest.c[c] for c in OWNER_COLUMNS],
                    latest.c.facts,
                ).where(latest.c.source == source[0], latest.c.workload_key.in_(missing))
                rows += [tuple(r) for r in conn.execute(stmt)]
            found += rows
    columns: list[Any] = list(zip(*found, strict=True)) if found else [[]] * 6
    return pl.DataFrame(
        [
            pl.Series("source", columns[0], pl.String),
            pl.Series("workload_key", columns[1], pl.String),
            *[pl.Series(c, columns[2 + i], pl.String) for i, c in enumerate(OWNER_COLUMNS)],
            facts_series(columns[5]),
        ]
    )


def _device_tags(conn: Connection, keys: pl.DataFrame, day: int) -> pl.DataFrame:
    """``keys``' devices' tags as reported for UTC day ``day`` (``device_tag_day``), else their
    latest (``device.tags``), as a ``device_tags`` facts column."""
    by_day, latest = table_of(DeviceTagDay), table_of(Device)
    ids = keys["device_id"].unique().to_list()
    found: list[tuple[Any, ...]] = []
    for i in range(0, len(ids), KEY_CHUNK):
        chunk = ids[i : i + KEY_CHUNK]
        dated = select(by_day.c.device_id, by_day.c.tags).where(
            by_day.c.device_id.in_(chunk), by_day.c.day_index == day
        )
        rows = [tuple(r) for r in conn.execute(dated)]
        missing = sorted(set(chunk) - {r[0] for r in rows})
        if missing:
            stmt = select(latest.c.device_id, latest.c.tags).where(latest.c.device_id.in_(missing))
            rows += [tuple(r) for r in conn.execute(stmt)]
        found += rows
    return pl.DataFrame(
        [
            pl.Series("device_id", [r[0] for r in found], pl.String),
            facts_series((r[1] for r in found), "device_tags"),
        ]
    )


def _update(conn: Connection, moved: pl.DataFrame, lo: int, hi: int) -> int:
    """Set the decided owner on every row of each moved key in hours ``[lo, hi)``; rows updated."""
    h = HOUR
    stmt = (
        update(h)
        .where(
            and_(
                h.c.source == bindparam("k_source"),
                h.c.device_id == bindparam("k_device_id"),
                h.c.workload_key == bindparam("k_workload_key"),
                # the hours as an hour_start range only: with device_id and workload_key that is the
                # natural key's index (and PostgreSQL's partitions); an hour_index range made SQLite
                # scan the whole day per key
                h.c.hour_start >= hour_start(lo),
                h.c.hour_start < hour_start(hi),
            )
        )
        .values({c: bindparam(f"v_{c}") for c in (*OWNER_COLUMNS, "owner_rule")})
    )
    params = moved.select(
        *[pl.col(k).alias(f"k_{k}") for k in KEYS],
        *[pl.col(f"new_{c}").alias(f"v_{c}") for c in (*OWNER_COLUMNS, "owner_rule")],
    ).to_dicts()
    return int(conn.execute(stmt, params).rowcount or 0)
