"""reporting views _v2: the v1 usage, device, idle-waste and device-inventory views plus vendor and owner_rule

The ``_v1`` views are a frozen column contract (docs/reporting.md, "Versioning"), so the two
dimensions issue 16 added to the ledger — ``vendor`` (nvidia | amd | intel | huawei, migration 0014)
and ``owner_rule`` (the attribution rule that named the row's owner, migration 0013) — come as new
views beside them:

* ``usage_cost_hourly_v2``, ``usage_cost_daily_v2``, ``device_usage_cost_hourly_v2``,
  ``device_usage_cost_daily_v2``, ``idle_waste_daily_v2``: the v1 columns in the v1 order, with
  ``vendor`` after ``gpu_model`` and ``owner_rule`` after the workload columns (null on
  unallocated time, as those are);
* ``devices_v2``: ``devices_v1`` with ``vendor`` after ``gpu_model``.

The other views have nothing to add (``effective_cost_daily_v1`` is by GPU model, which names the
vendor; reconciliation, unmonitored spend and the connector views have no such dimension) and keep
their v1 only. Each v2 view's rows and measures are v1's: it reads the same table, grouped by no
more than v1 (the rollups already key their rows by both columns).

The SQL builders and column documentation are migration 0008's, loaded from its file: a migration
is frozen, so what they build cannot change under this one. PostgreSQL only, as 0008; the
reporting role reads the new views through 0008's default privileges (and ``gpu-ledger reporting
grant`` grants SELECT on every view again).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 15:00:00
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _v1() -> ModuleType:
    """Migration 0008 (frozen): its builders, constants and column documentation."""
    path = Path(__file__).with_name("0008_reporting_views.py")
    spec = importlib.util.spec_from_file_location("gpu_ledger_migration_0008", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


V1 = _v1()
SCHEMA = V1.SCHEMA
NEW_DOCS = {
    "vendor": "Accelerator vendor: nvidia, amd, intel or huawei (from the source, else the GPU model); "
    "null where unknown.",
    "owner_rule": "Who named the row's owner: the [[attribution]] rule that named its project (else "
    "team, else user), 'source' when the connector itself named it; null when nobody did and on "
    "unallocated time.",
}


def _with(columns: Sequence[str], after: dict[str, str]) -> list[str]:
    """``columns`` with each value of ``after`` inserted right after its key."""
    out: list[str] = []
    for column in columns:
        out.append(column)
        if column in after:
            out.append(after[column])
    return out


_GROUP_DIMS = _with(V1._GROUP_DIMS, {"gpu_model": "vendor"})
_WORKLOAD_DIMS = [*V1._WORKLOAD_DIMS, "owner_rule"]
_DEVICE_DIMS = _with(V1._DEVICE_DIMS, {"gpu_model": "vendor", "workload_key": "owner_rule"})


def _group_view(table: str, hourly: bool) -> str:
    time = (
        ["TIMESTAMPTZ '1970-01-01 00:00:00+00' + hour_index * INTERVAL '1 hour' AS hour_start"]
        if hourly
        else []
    )
    time += [f"{V1._DAY} AS day", f"{V1._DAY_START} AS day_start"]
    workload = [f"CASE WHEN unallocated THEN NULL ELSE {d} END AS {d}" for d in _WORKLOAD_DIMS]
    cols = [
        *time,
        *_GROUP_DIMS,
        *workload,
        "unallocated",
        "default_metric",
        f"coalesce(currency, '{V1.NO_CURRENCY}') AS currency",
        "rate_source",
        *V1._measures(),
    ]
    return f"SELECT {', '.join(cols)} FROM public.{table}"


def _device_view(table: str, hourly: bool) -> str:
    time = ["hour_start"] if hourly else []
    time += [f"{V1._DAY} AS day", f"{V1._DAY_START} AS day_start"]
    extra = ["power_avg_w", "mem_used_avg_b"] if hourly else []
    cols = [
        *time,
        *_DEVICE_DIMS,
        "workload_key = '' AS unallocated",
        "default_metric",
        f"coalesce(currency, '{V1.NO_CURRENCY}') AS currency",
        "rate_source",
        *V1._measures(),
        *extra,
        "mem_used_max_b",
        "mem_total_b",
        "temp_max_c",
        "energy_estimated",
    ]
    return f"SELECT {', '.join(cols)} FROM public.{table}"


_hours = V1._hours
IDLE_WASTE = f"""
SELECT {V1._DAY} AS day, {V1._DAY_START} AS day_start, {", ".join(_GROUP_DIMS)},
       {", ".join(f"CASE WHEN unallocated THEN NULL ELSE {d} END AS {d}" for d in _WORKLOAD_DIMS)},
       unallocated, default_metric, coalesce(currency, '{V1.NO_CURRENCY}') AS currency,
       CASE WHEN unallocated THEN 0.0 ELSE {_hours("idle_s")} END AS allocated_idle_gpu_hours,
       CASE WHEN unallocated THEN {_hours("idle_s")} ELSE 0.0 END AS unallocated_idle_gpu_hours,
       {_hours("idle_s")} AS idle_gpu_hours,
       CASE WHEN unallocated THEN 0 ELSE coalesce(idle_cost, 0) END AS allocated_idle_cost,
       CASE WHEN unallocated THEN coalesce(idle_cost, 0) ELSE 0 END AS unallocated_idle_cost,
       coalesce(idle_cost, 0) AS idle_cost,
       {_hours("present_s")} AS gpu_hours,
       coalesce(cost, 0) AS cost
FROM public.ledger_group_day
"""

DEVICES = f"""
SELECT device_id, environment, provider, account, region, cluster, node, instance_id, instance_type,
       gpu_model, vendor, gpu_index, parent_device_id, mig_profile, gpu_fraction, tdp_w, source, metrics,
       first_seen, last_seen,
       right(device_id, {len(V1.UNMONITORED_SUFFIX)}) = '{V1.UNMONITORED_SUFFIX}' AS unmonitored_spend
FROM public.device
"""


def _views() -> dict[str, tuple[str, str, dict[str, str]]]:
    """name → (SQL, view comment, column comments): v1's comments, the new columns' added."""
    sql = {
        "usage_cost_hourly_v2": _group_view("ledger_group_hour", hourly=True),
        "usage_cost_daily_v2": _group_view("ledger_group_day", hourly=False),
        "device_usage_cost_hourly_v2": _device_view("ledger_hour", hourly=True),
        "device_usage_cost_daily_v2": _device_view("ledger_day", hourly=False),
        "idle_waste_daily_v2": IDLE_WASTE,
        "devices_v2": DEVICES,
    }
    out = {}
    for name, text in sql.items():
        _, doc, columns = V1.VIEWS[name.replace("_v2", "_v1")]
        added = ["vendor"] if name == "devices_v2" else ["vendor", "owner_rule"]
        docs = {**columns, **{c: NEW_DOCS[c] for c in added}}
        out[name] = (text, f"{doc} Version 2: {name[:-3]}_v1 plus {' and '.join(added)}.", docs)
    return out


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return  # SQLite: no schemas, no roles (migration 0008)
    for name, (sql, doc, columns) in _views().items():
        V1._run(f"CREATE VIEW {SCHEMA}.{name} AS {sql}")
        V1._run(f"COMMENT ON VIEW {SCHEMA}.{name} IS {V1._literal(doc)}")
        for column, text in columns.items():
            V1._run(f"COMMENT ON COLUMN {SCHEMA}.{name}.{column} IS {V1._literal(text)}")
    V1._run(V1.GRANT)  # SELECT on the new views where the default privileges did not (another owner)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name in reversed(list(_views())):
        V1._run(f"DROP VIEW {SCHEMA}.{name}")
