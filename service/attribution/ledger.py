"""Attribution on the ledger: rules applied to a batch's rows at ingest, and the facts kept for
``gpu-ledger reattribute`` (table ``workload_fact``, column ``device.tags``).

Rules run once per distinct (device, workload_key) of the rows, never per row: the answer is
joined back. Unallocated rows (workload_key '') are left without an owner — time nobody held
belongs to nobody, as in every answer (docs/design.md §4).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl
from sqlalchemy import Connection, Executable, Table
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from connectors.sdk import DeviceInfo, WorkloadInfo
from service.attribution.engine import OWNER_COLUMNS, attribute, facts_series
from service.attribution.rules import AttributionRule
from service.dbtypes import table_of
from service.models import DeviceTagDay, FactScope, WorkloadFact, WorkloadFactDay

KEYS = ("device_id", "workload_key")


def owners(
    rows: pl.DataFrame,
    devices: Mapping[str, DeviceInfo],
    workloads: Mapping[str, WorkloadInfo],
    rules: Sequence[AttributionRule],
) -> pl.DataFrame:
    """``rows`` (ledger rows with device_id, workload_key and the source's project, team,
    user_name) with the owner columns the rules decide and ``owner_rule``."""
    if rows.is_empty():
        return rows.with_columns(pl.lit(None, pl.String).alias("owner_rule"))
    held = (
        rows.filter(pl.col("workload_key") != "")
        .select(*[pl.col(k).cast(pl.String) for k in KEYS], *OWNER_COLUMNS)
        .unique(KEYS)
    )
    keys, ids = list(workloads), list(devices)
    facts = pl.DataFrame(
        [pl.Series("workload_key", keys, pl.String), facts_series(workloads[k].facts for k in keys)]
    )
    tags = pl.DataFrame(
        [pl.Series("device_id", ids, pl.String), facts_series((devices[i].tags for i in ids), "device_tags")]
    )
    question = held.join(facts, on="workload_key", how="left").join(tags, on="device_id", how="left")
    answer = attribute(question, rules).select(*KEYS, *OWNER_COLUMNS, "owner_rule")
    # the rows' keys may be Categorical (connectors hand them so): joined as text
    answer = answer.rename({k: f"__{k}" for k in KEYS})
    return (
        rows.drop(*OWNER_COLUMNS, "owner_rule", strict=False)
        .with_columns(pl.col(k).cast(pl.String).alias(f"__{k}") for k in KEYS)
        .join(answer, on=[f"__{k}" for k in KEYS], how="left", maintain_order="left")
        .drop(*[f"__{k}" for k in KEYS])
    )


def save_workload_facts(
    conn: Connection,
    source: str,
    workloads: Mapping[str, WorkloadInfo],
    keys: Sequence[str],
    now: dt.datetime,
) -> int:
    """Keep what ``source`` said about the workloads ``keys`` (those its ledger rows name): facts
    and the owner it named itself. One ``INSERT … ON CONFLICT DO UPDATE``; the number written."""
    records = [
        {
            "source": source,
            "workload_key": key,
            "facts": dict(w.facts) or None,
            "project": w.project,
            "team": w.team,
            "user_name": w.user_name,
            "updated_at": now,
        }
        for key in keys
        if key and (w := workloads.get(key)) is not None
    ]
    if records:
        conn.execute(_upsert(table_of(WorkloadFact), conn.dialect.name), records)
    return len(records)


def save_fact_scope(conn: Connection, source: str, describes: Sequence[str] | None, now: dt.datetime) -> None:
    """Keep which metrics sources facts connector ``source`` describes (None: every source)."""
    record = {"source": source, "describes": sorted(describes) if describes else None, "updated_at": now}
    conn.execute(_upsert(table_of(FactScope), conn.dialect.name, ("source",)), [record])


def save_facts_by_day(
    conn: Connection,
    source: str,
    rows: pl.DataFrame,
    devices: Mapping[str, DeviceInfo],
    workloads: Mapping[str, WorkloadInfo],
) -> int:
    """Keep, for every UTC day ``rows`` (ledger rows with ``day_index``) cover, the facts ``source``
    reported then: each held workload's (``workload_fact_day``) and each device's tags
    (``device_tag_day``) — what ``reattribute`` re-decides that day from. An ingest of a day
    replaces what an earlier one kept for it (one ``INSERT … ON CONFLICT DO UPDATE`` per table);
    returns the rows written."""
    if rows.is_empty():
        return 0
    held = (
        rows.filter(pl.col("workload_key") != "")
        .select(pl.col("workload_key").cast(pl.String), "day_index")
        .unique()
    )
    facts = [
        {"source": source, "workload_key": key, "day_index": day, "facts": dict(w.facts) or None,
         "project": w.project, "team": w.team, "user_name": w.user_name}
        for key, day in held.iter_rows()
        if (w := workloads.get(key)) is not None
    ]  # fmt: skip
    present = rows.select(pl.col("device_id").cast(pl.String), "day_index").unique()
    tags = [
        {"device_id": device, "day_index": day, "tags": dict(d.tags) or None}
        for device, day in present.iter_rows()
        if (d := devices.get(device)) is not None
    ]
    if facts:
        conn.execute(
            _upsert(table_of(WorkloadFactDay), conn.dialect.name, ("source", "workload_key", "day_index")),
            facts,
        )
    if tags:
        conn.execute(_upsert(table_of(DeviceTagDay), conn.dialect.name, ("device_id", "day_index")), tags)
    return len(facts) + len(tags)


def _upsert(
    table: Table, dialect: str, key_columns: Sequence[str] = ("source", "workload_key")
) -> Executable:
    keys = [table.c[c] for c in key_columns]
    columns = [c.name for c in table.c if c.name not in key_columns]
    statement: Any
    if dialect == "postgresql":
        statement = pg_insert(table)
    elif dialect == "sqlite":
        statement = sqlite_insert(table)
    else:
        raise NotImplementedError(f"workload facts: no INSERT … ON CONFLICT for {dialect}")
    return statement.on_conflict_do_update(
        index_elements=keys, set_={c: statement.excluded[c] for c in columns}
    )
