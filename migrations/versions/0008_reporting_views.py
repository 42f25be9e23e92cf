"""reporting schema: versioned views for BI tools, and the read-only group role gpu_ledger_reporting

PostgreSQL only: on SQLite this migration does nothing (SQLite has no schemas and no roles; BI tools
connect to PostgreSQL). docs/reporting.md describes every view, its grain and columns.

Each view is named ``<name>_v<N>``: its columns (names, types, meaning) are a contract. A change to
a view's columns or meaning is a new view ``<name>_v<N+1>`` created by a new migration, beside the
old one, which is dropped only after a deprecation period. The SQL here is frozen with the
migration (it imports nothing that could change under it).

The role ``gpu_ledger_reporting`` (NOLOGIN: a group that BI logins are made members of) is
cluster-wide, so it is created only when absent (tests create many databases on one server) and
only when the migrating user may create roles; otherwise a NOTICE says so, and ``gpu-ledger
reporting grant`` (or the SQL in docs/reporting.md) creates it and grants later. It gets USAGE on
schema ``reporting`` and SELECT on its views, and nothing else: views run with their owner's
rights, so members read the views without any access to the tables behind them (ledger rows,
api_token hashes, billing lines). ``ALTER DEFAULT PRIVILEGES`` grants SELECT on views this owner
adds to the schema later (``_v2``…). The downgrade drops the schema, never the role (other
databases of the cluster may use it).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 03:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "reporting"
ROLE = "gpu_ledger_reporting"
METRICS = ("gpu_util", "sm_active", "tensor_active", "mem_bw")
NO_CURRENCY = "XXX"  # ISO 4217 "no currency": unpriced ledger time (service.analytics.fx)
MIXED_METRIC = "sm_active_else_gpu_util"  # service.analytics.dims.MIXED_DEFAULT_METRIC
#: service.billing.catalog.GPU_LOOKING as of this revision (instance types of GPU families).
GPU_LOOKING = r"^(?:[pg][a-z]?\d+[a-z0-9\-]*\.|a\d+[a-z]?-|g\d+-|standard_n[cdgv]|(?:bm|vm)\.gpu)"
UNMONITORED_SUFFIX = "/unmonitored"  # service.billing.rates.UNMONITORED_SUFFIX
CLOUDS = ("aws", "gcp", "azure")
ADJUSTMENT_CATEGORIES = ("Credit", "Tax", "Adjustment")

# Settings a view reads (a custom GUC: ALTER ROLE … SET / ALTER DATABASE … SET), with the defaults
# the service uses.
GPU_COST_SHARE = "coalesce(nullif(current_setting('gpu_ledger.gpu_cost_share', true), '')::numeric, 1)"
TOLERANCE_PCT = (
    "coalesce(nullif(current_setting('gpu_ledger.reconciliation_tolerance_pct', true), '')::numeric, 5)"
)

# --- column documentation ---------------------------------------------------------------------------

DIMENSION_DOCS = {
    "environment": "Where the GPU lives: onprem, aws, gcp or azure.",
    "provider": "Cloud provider or on-prem site provider.",
    "account": "Cloud account / project / subscription (on-prem: site account, usually null).",
    "region": "Cloud region or on-prem site.",
    "cluster": "Cluster name (Kubernetes, Slurm...).",
    "node": "Node / host name.",
    "instance_id": "Cloud instance id (the billing resource id).",
    "instance_type": "Cloud instance type or server model.",
    "gpu_model": "GPU model name as the driver reports it.",
    "mig_profile": "MIG profile of a MIG instance, else null.",
    "gpu_fraction": "Share of a physical GPU this device is (MIG 1g of 7 = 1/7); 1 for a whole GPU.",
    "project": "Project label of the workload; null on unallocated time.",
    "team": "Team label of the workload; null on unallocated time.",
    "user_name": "User label of the workload; null on unallocated time.",
    "namespace": "Kubernetes namespace of the workload; null on unallocated time.",
    "workload": "Workload name (pod, container, job); null on unallocated time.",
    "unallocated": "True for time no workload held the device (the idle pool).",
    "default_metric": "Utilization metric behind effective and idle hours: sm_active where the "
    "device has it, else gpu_util.",
    "currency": "ISO 4217 currency of the money columns; XXX for unpriced time (amounts 0).",
    "rate_source": "Where the price came from (billing source, rate card or on-prem TCO site).",
    "source": "Connector instance that ingested the row.",
    "device_id": "GPU or MIG instance id (NVML/DCGM UUID, or <instance-id>/gpu<index>).",
    "workload_key": "Workload identity; empty string for unallocated time.",
}
MEASURE_DOCS = {
    "gpu_hours": "GPU-hours present (device-seconds / 3600, MIG-fraction weighted). Additive.",
    "observed_gpu_hours": "GPU-hours covered by samples of the default metric. Additive.",
    "effective_gpu_hours": "Effective GPU-hours: the integral of default-metric utilization / 100. Additive.",
    "idle_gpu_hours": "GPU-hours below the ledger idle threshold (default 5 pct) of the default "
    "metric. Additive.",
    "unpriced_gpu_hours": "GPU-hours without a price (cost unknown). Additive.",
    "energy_kwh": "Energy in kWh (null where no energy reading). Additive.",
    "cost": "Cost (effective, amortized) in currency, NUMERIC exact to 1e-9. Additive.",
    "idle_cost": "Cost of the idle GPU-hours, NUMERIC. Additive.",
    "energy_cost": "Energy part of the cost (on-prem TCO), NUMERIC; null where not priced by "
    "energy. Additive.",
}
for _m in METRICS:
    MEASURE_DOCS[f"observed_gpu_hours_{_m}"] = f"GPU-hours covered by {_m} samples. Additive."
    MEASURE_DOCS[f"effective_gpu_hours_{_m}"] = f"Effective GPU-hours by {_m}. Additive."

TIME_DOCS = {
    "hour_start": "Start of the UTC hour (timestamptz); the row covers [hour_start, hour_start + 1 h).",
    "day": "UTC day (date).",
    "day_start": "Start of the UTC day (timestamptz), for tools that want a time column.",
}

# --- views over the group rollups and the device-level ledger ---------------------------------------

_GROUP_DIMS = (
    "environment",
    "provider",
    "account",
    "region",
    "cluster",
    "instance_type",
    "gpu_model",
)
_WORKLOAD_DIMS = ("project", "team", "user_name", "namespace")
_DAY = "(DATE '1970-01-01' + day_index)"
_DAY_START = "(TIMESTAMPTZ '1970-01-01 00:00:00+00' + day_index * INTERVAL '1 day')"


def _hours(column: str) -> str:
    return f"{column} * gpu_fraction / 3600.0"


def _measures() -> list[str]:
    cols = [
        f"{_hours('present_s')} AS gpu_hours",
        f"{_hours('observed_s')} AS observed_gpu_hours",
        f"{_hours('busy_s')} AS effective_gpu_hours",
        f"{_hours('idle_s')} AS idle_gpu_hours",
    ]
    for m in METRICS:
        cols.append(f"{_hours(f'obs_s_{m}')} AS observed_gpu_hours_{m}")
        cols.append(f"{_hours(f'busy_s_{m}')} AS effective_gpu_hours_{m}")
    cols += [
        f"CASE WHEN cost IS NULL THEN {_hours('present_s')} ELSE 0.0 END AS unpriced_gpu_hours",
        "energy_j / 3600000.0 AS energy_kwh",
        "coalesce(cost, 0) AS cost",
        "coalesce(idle_cost, 0) AS idle_cost",
        "energy_cost",
    ]
    return cols


def _group_view(table: str, hourly: bool) -> str:
    time = (
        ["TIMESTAMPTZ '1970-01-01 00:00:00+00' + hour_index * INTERVAL '1 hour' AS hour_start"]
        if hourly
        else []
    )
    time += [f"{_DAY} AS day", f"{_DAY_START} AS day_start"]
    workload = [f"CASE WHEN unallocated THEN NULL ELSE {d} END AS {d}" for d in _WORKLOAD_DIMS]
    cols = [
        *time,
        *_GROUP_DIMS,
        *workload,
        "unallocated",
        "default_metric",
        f"coalesce(currency, '{NO_CURRENCY}') AS currency",
        "rate_source",
        *_measures(),
    ]
    return f"SELECT {', '.join(cols)} FROM public.{table}"


_DEVICE_DIMS = (
    "source",
    "device_id",
    "environment",
    "provider",
    "account",
    "region",
    "cluster",
    "node",
    "instance_id",
    "instance_type",
    "gpu_model",
    "mig_profile",
    "gpu_fraction",
    "project",
    "team",
    "user_name",
    "namespace",
    "workload",
    "workload_key",
)
DEVICE_EXTRA_DOCS = {
    "power_avg_w": "Mean power draw over the hour in watts (null without readings).",
    "mem_used_max_b": "Largest GPU memory used in bytes.",
    "mem_used_avg_b": "Mean GPU memory used in bytes.",
    "mem_total_b": "GPU memory size in bytes.",
    "temp_max_c": "Highest temperature in degrees Celsius.",
    "energy_estimated": "True when energy is estimated (TDP x assumed load), not measured.",
}


def _device_view(table: str, hourly: bool) -> str:
    time = ["hour_start"] if hourly else []
    time += [f"{_DAY} AS day", f"{_DAY_START} AS day_start"]
    extra = ["power_avg_w", "mem_used_avg_b"] if hourly else []
    cols = [
        *time,
        *_DEVICE_DIMS,
        "workload_key = '' AS unallocated",
        "default_metric",
        f"coalesce(currency, '{NO_CURRENCY}') AS currency",
        "rate_source",
        *_measures(),
        *extra,
        "mem_used_max_b",
        "mem_total_b",
        "temp_max_c",
        "energy_estimated",
    ]
    return f"SELECT {', '.join(cols)} FROM public.{table}"


def _per_hour(amount: str, hours: str) -> str:
    """amount / hours rounded half-even to 1e-9 as service.analytics.effective does in Decimal: the
    float hours by their shortest text (Python's repr), the quotient to 24 decimals first."""
    return f"{SCHEMA}.round_half_even_nano({amount}::numeric(48, 24) / ({hours})::text::numeric)"


EFFECTIVE_COST = f"""
SELECT day, day_start, environment, gpu_model, currency, gpu_hours, effective_gpu_hours, cost,
       CASE WHEN currency = '{NO_CURRENCY}' OR gpu_hours <= 0 THEN NULL
            ELSE {_per_hour("cost", "gpu_hours")} END AS cost_per_gpu_hour,
       CASE WHEN currency = '{NO_CURRENCY}' OR effective_gpu_hours <= 0 THEN NULL
            ELSE {_per_hour("cost", "effective_gpu_hours")} END AS cost_per_effective_gpu_hour,
       metric
FROM (
  SELECT {_DAY} AS day, {_DAY_START} AS day_start, environment, gpu_model,
         coalesce(CASE WHEN cost IS NULL THEN NULL ELSE currency END, '{NO_CURRENCY}') AS currency,
         coalesce(sum(CAST(present_s * gpu_fraction AS double precision)), 0.0) / 3600.0 AS gpu_hours,
         coalesce(sum(CAST(busy_s * gpu_fraction AS double precision)), 0.0) / 3600.0
           AS effective_gpu_hours,
         coalesce(sum(cost), 0) AS cost,
         CASE WHEN min(default_metric) = max(default_metric) THEN min(default_metric)
              ELSE '{MIXED_METRIC}' END AS metric
  FROM public.ledger_group_day
  GROUP BY day_index, environment, gpu_model,
           coalesce(CASE WHEN cost IS NULL THEN NULL ELSE currency END, '{NO_CURRENCY}')
) AS g
"""

IDLE_WASTE = f"""
SELECT {_DAY} AS day, {_DAY_START} AS day_start, {", ".join(_GROUP_DIMS)},
       {", ".join(f"CASE WHEN unallocated THEN NULL ELSE {d} END AS {d}" for d in _WORKLOAD_DIMS)},
       unallocated, default_metric, coalesce(currency, '{NO_CURRENCY}') AS currency,
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

# --- reconciliation (service.billing.reconcile, reproduced at provider x account x resource x day) ---

_WS = "' ' || chr(9) || chr(10) || chr(11) || chr(12) || chr(13)"  # Python str.strip()'s whitespace
_NUL = "chr(1)"  # a key part no id contains: NULL-safe hash joins


def _same(a: str, b: str, cols: Sequence[str]) -> str:
    return " AND ".join(f"coalesce({a}.{c}::text, {_NUL}) = coalesce({b}.{c}::text, {_NUL})" for c in cols)


_KEY = ("provider", "account", "resource_id", "day")
RECONCILIATION = f"""
WITH line_groups AS (
  SELECT provider, account, resource_id, charge_start, currency, orphan,
         sum(effective_cost) AS cost,
         coalesce(sum(gpu_hours), 0) AS gpu_hours,
         coalesce(sum(CASE WHEN is_gpu_sku IS TRUE THEN gpu_hours ELSE 0 END), 0) AS sku_hours,
         max(CASE WHEN is_gpu_sku IS TRUE THEN 1 ELSE 0 END) AS has_sku,
         max(CASE WHEN gpu_count > 0 OR is_gpu_sku IS TRUE THEN 1 ELSE 0 END) AS gpu,
         max(instance_type) AS instance_type,
         count(*) AS n
  FROM (
    SELECT *,
           CASE WHEN resource_id IS NOT NULL THEN ''
                WHEN strpos(lower(charge_type), 'unused') > 0 THEN 'commitment'
                WHEN charge_category IN ({", ".join(f"'{c}'" for c in ADJUSTMENT_CATEGORIES)})
                  THEN 'adjustment'
                ELSE '' END AS orphan
    FROM public.billing_line
  ) AS l
  GROUP BY provider, account, resource_id, charge_start, currency, orphan
),
resource_flags AS (
  SELECT resource_id, max(gpu) AS gpu, max(has_sku) AS has_sku FROM line_groups GROUP BY resource_id
),
kinded AS (
  SELECT g.*,
         CASE WHEN g.resource_id IS NULL THEN nullif(g.orphan, '')
              WHEN f.gpu = 1 THEN 'gpu'
              WHEN g.instance_type <> ''
                   AND lower(btrim(g.instance_type, {_WS})) ~ '{GPU_LOOKING}' THEN 'unknown'
         END AS kind,
         CASE WHEN f.has_sku = 1 THEN g.sku_hours ELSE g.gpu_hours END AS line_gpu_hours
  FROM line_groups AS g
  JOIN resource_flags AS f ON coalesce(f.resource_id, {_NUL}) = coalesce(g.resource_id, {_NUL})
),
billed AS (
  SELECT provider, account, resource_id, (charge_start AT TIME ZONE 'UTC')::date AS day, kind, currency,
         sum(line_gpu_hours) AS billed_gpu_hours,
         sum(CASE WHEN kind IN ('commitment', 'adjustment') THEN cost
                  ELSE {SCHEMA}.round_half_even_nano(cost * {GPU_COST_SHARE}) END) AS billed_cost,
         sum(n) AS billing_lines
  FROM kinded
  WHERE kind IS NOT NULL
  GROUP BY provider, account, resource_id, (charge_start AT TIME ZONE 'UTC')::date, kind, currency
),
gpu_base AS (
  SELECT provider, account, resource_id, day, max(currency) AS currency
  FROM billed WHERE kind = 'gpu' GROUP BY provider, account, resource_id, day
),
metered AS (
  SELECT provider, account, instance_id AS resource_id, {_DAY} AS day, currency,
         coalesce(sum(CASE WHEN right(device_id, {len(UNMONITORED_SUFFIX)}) = '{UNMONITORED_SUFFIX}'
                           THEN 0.0 ELSE observed_s * gpu_fraction END), 0.0) / 3600.0 AS metered,
         coalesce(sum(cost), 0) AS cost
  FROM public.ledger_day
  WHERE environment IN ({", ".join(f"'{c}'" for c in CLOUDS)})
  GROUP BY provider, account, instance_id, day_index, currency
),
metered_rows AS (
  SELECT m.provider, m.account, m.resource_id, m.day, 'gpu' AS kind,
         coalesce(m.currency, b.currency, '{NO_CURRENCY}') AS currency, m.metered, m.cost
  FROM metered AS m LEFT JOIN gpu_base AS b ON {_same("m", "b", _KEY)}
  WHERE b.day IS NOT NULL OR m.metered <> 0 OR m.cost <> 0
),
rows AS (
  SELECT provider, account, resource_id, day, kind, currency,
         sum(billed_gpu_hours) AS billed_gpu_hours, sum(metered) AS metered_gpu_hours,
         sum(billed_cost) AS billed_cost, sum(ledger_cost) AS ledger_cost,
         sum(billing_lines) AS billing_lines, max(has_billing) AS has_billing
  FROM (
    SELECT provider, account, resource_id, day, kind, currency, billed_gpu_hours,
           CAST(0.0 AS double precision) AS metered, billed_cost, CAST(0 AS numeric) AS ledger_cost,
           billing_lines, 1 AS has_billing
    FROM billed
    UNION ALL
    SELECT provider, account, resource_id, day, kind, currency, CAST(0 AS numeric), metered,
           CAST(0 AS numeric), cost, 0, 0
    FROM metered_rows
  ) AS u
  GROUP BY provider, account, resource_id, day, kind, currency
)
SELECT provider, account, resource_id, day,
       CAST(day AS timestamp) AT TIME ZONE 'UTC' AS day_start, currency,
       billed_gpu_hours, metered_gpu_hours,
       metered_gpu_hours - CAST(billed_gpu_hours AS double precision) AS gpu_hours_variance,
       CASE WHEN billed_gpu_hours = 0 THEN NULL
            ELSE 100.0 * (metered_gpu_hours - CAST(billed_gpu_hours AS double precision))
                 / CAST(billed_gpu_hours AS double precision) END AS gpu_hours_variance_pct,
       billed_cost, ledger_cost, ledger_cost - billed_cost AS cost_variance,
       CASE WHEN billed_cost = 0 THEN NULL
            ELSE {SCHEMA}.round_half_even_nano(
                   CAST((ledger_cost - billed_cost) * 100 AS numeric(48, 24)) / billed_cost) END
         AS cost_variance_pct,
       CAST(billing_lines AS bigint) AS billing_lines,
       CASE WHEN kind = 'unknown' THEN 'UNKNOWN_INSTANCE_TYPE'
            WHEN kind = 'commitment' THEN 'UNUSED_COMMITMENT'
            WHEN kind = 'adjustment' THEN 'ACCOUNT_ADJUSTMENT'
            WHEN has_billing = 0 THEN
              CASE WHEN metered_dec > 0 THEN 'NO_BILLING' ELSE 'MATCHED' END
            WHEN billed_gpu_hours > 0 AND metered_dec = 0 THEN 'NO_METRICS'
            WHEN abs(metered_dec - billed_gpu_hours) <= billed_gpu_hours * {TOLERANCE_PCT} / 100
              THEN 'MATCHED'
            WHEN metered_dec > billed_gpu_hours THEN 'UNBILLED_USAGE'
            ELSE 'UNMONITORED_SPEND' END AS status
FROM (SELECT *, CAST(CAST(metered_gpu_hours AS text) AS numeric) AS metered_dec FROM rows) AS r
"""

UNMONITORED = f"""
SELECT {_DAY} AS day, {_DAY_START} AS day_start, provider, account, region, instance_id AS resource_id,
       instance_type, gpu_model, coalesce(currency, '{NO_CURRENCY}') AS currency,
       coalesce(sum(CAST(present_s * gpu_fraction AS double precision)), 0.0) / 3600.0 AS gpu_hours,
       coalesce(sum(cost), 0) AS cost
FROM public.ledger_day
WHERE right(device_id, {len(UNMONITORED_SUFFIX)}) = '{UNMONITORED_SUFFIX}'
GROUP BY day_index, provider, account, region, instance_id, instance_type, gpu_model, currency
"""

CONNECTOR_HEALTH = """
SELECT s.name AS connector, s.type AS connector_type, s.status,
       s.status IN ('OK', 'RUNNING') AS healthy,
       s.watermark, s.last_run_at, s.last_success_at, s.last_error, s.notice,
       EXTRACT(EPOCH FROM (now() - s.watermark)) / 3600.0 AS watermark_lag_hours,
       r.id AS last_run_id, r.status AS last_run_status, r.finished_at AS last_run_finished_at,
       EXTRACT(EPOCH FROM (r.finished_at - r.started_at)) AS last_run_duration_s,
       r.read AS last_run_read, r.accepted AS last_run_accepted, r.rejected AS last_run_rejected,
       r.ledger_rows AS last_run_ledger_rows, r.findings AS last_run_findings
FROM public.connector_state AS s
LEFT JOIN LATERAL (
  SELECT * FROM public.connector_run AS cr
  WHERE cr.connector = s.name AND cr.finished_at IS NOT NULL
  ORDER BY cr.id DESC LIMIT 1
) AS r ON true
"""

CONNECTOR_RUNS = """
SELECT id AS run_id, connector, window_start, window_end, started_at, finished_at,
       EXTRACT(EPOCH FROM (finished_at - started_at)) AS duration_s, status,
       read, accepted, rejected, ledger_rows, findings, error
FROM public.connector_run
"""

DEVICES = f"""
SELECT device_id, environment, provider, account, region, cluster, node, instance_id, instance_type,
       gpu_model, gpu_index, parent_device_id, mig_profile, gpu_fraction, tdp_w, source, metrics,
       first_seen, last_seen,
       right(device_id, {len(UNMONITORED_SUFFIX)}) = '{UNMONITORED_SUFFIX}' AS unmonitored_spend
FROM public.device
"""

ROUND_HALF_EVEN = f"""
CREATE FUNCTION {SCHEMA}.round_half_even_nano(x numeric) RETURNS numeric
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
  SELECT CASE
    WHEN abs(x * 1000000000 - trunc(x * 1000000000)) = 0.5
      THEN round((trunc(x * 1000000000)
                  + CASE WHEN mod(trunc(x * 1000000000), 2) = 0 THEN 0 ELSE sign(x) END) / 1000000000, 9)
    ELSE round(x, 9)
  END
$fn$
"""

_RECON_DOCS = {
    "provider": "aws, gcp or azure.",
    "account": "Account / project / subscription.",
    "resource_id": "Billing resource id = the instance id (null on commitment and adjustment rows).",
    "day": "UTC day (a billing line counts on the day its charge starts).",
    "day_start": "Start of the UTC day (timestamptz).",
    "currency": "ISO 4217 currency of the money columns.",
    "billed_gpu_hours": "GPU-hours on the bill (quantity x GPUs per instance; GPU-SKU rows only "
    "where the resource has them), NUMERIC.",
    "metered_gpu_hours": "Observed GPU-hours in the metrics (unmonitored-spend rows excluded).",
    "gpu_hours_variance": "metered - billed GPU-hours.",
    "gpu_hours_variance_pct": "Variance in percent of billed; null when nothing was billed.",
    "billed_cost": "Effective (amortized) cost on the bill x gpu_cost_share, NUMERIC.",
    "ledger_cost": "Cost in the ledger for the resource and day, unmonitored spend included, NUMERIC.",
    "cost_variance": "ledger_cost - billed_cost, NUMERIC.",
    "cost_variance_pct": "Cost variance in percent of billed cost; null when billed cost is 0.",
    "billing_lines": "Billing lines counted.",
    "status": "MATCHED, UNBILLED_USAGE, UNMONITORED_SPEND, NO_METRICS, NO_BILLING, "
    "UNKNOWN_INSTANCE_TYPE, UNUSED_COMMITMENT or ACCOUNT_ADJUSTMENT.",
}

VIEWS: dict[str, tuple[str, str, dict[str, str]]] = {}


def _docs(*names: str) -> dict[str, str]:
    every = {**TIME_DOCS, **DIMENSION_DOCS, **MEASURE_DOCS, **DEVICE_EXTRA_DOCS}
    return {n: every[n] for n in names}


def _register() -> None:
    group_cols = [
        *_GROUP_DIMS,
        *_WORKLOAD_DIMS,
        "unallocated",
        "default_metric",
        "currency",
        "rate_source",
        *MEASURE_DOCS,
    ]
    VIEWS["usage_cost_hourly_v1"] = (
        _group_view("ledger_group_hour", hourly=True),
        "GPU usage and cost per UTC hour by every non-device dimension (read from the hourly group "
        "rollup). Grain: hour x dimension values x currency (several rows may share the visible "
        "values: always SUM the measures). Cost is the ledger's effective cost, idle cost separate "
        "(GraphQL cost with idlePolicy SEPARATE), per currency, unconverted.",
        _docs("hour_start", "day", "day_start", *group_cols),
    )
    VIEWS["usage_cost_daily_v1"] = (
        _group_view("ledger_group_day", hourly=False),
        "GPU usage and cost per UTC day by every non-device dimension (read from the daily group "
        "rollup). Grain: day x dimension values x currency; always SUM the measures.",
        _docs("day", "day_start", *group_cols),
    )
    device_cols = [
        *_DEVICE_DIMS,
        "unallocated",
        "default_metric",
        "currency",
        "rate_source",
        *MEASURE_DOCS,
    ]
    VIEWS["device_usage_cost_hourly_v1"] = (
        _device_view("ledger_hour", hourly=True),
        "The hourly ledger itself: one row per device x UTC hour x workload, every dimension "
        "(node, device, instance, workload included). Filter on hour_start: the table is "
        "partitioned by it.",
        _docs(
            "hour_start",
            "day",
            "day_start",
            *device_cols,
            "power_avg_w",
            "mem_used_avg_b",
            "mem_used_max_b",
            "mem_total_b",
            "temp_max_c",
            "energy_estimated",
        ),  # fmt: skip
    )
    VIEWS["device_usage_cost_daily_v1"] = (
        _device_view("ledger_day", hourly=False),
        "The daily device rollup: one row per device x UTC day x workload x currency, every dimension.",
        _docs(
            "day",
            "day_start",
            *device_cols,
            "mem_used_max_b",
            "mem_total_b",
            "temp_max_c",
            "energy_estimated",
        ),  # fmt: skip
    )
    VIEWS["effective_cost_daily_v1"] = (
        EFFECTIVE_COST,
        "Cost per GPU-hour and per effective GPU-hour by environment x GPU model x currency per UTC "
        "day (the buy-or-rent comparison; GraphQL effectiveCost). For a longer window SUM cost, "
        "gpu_hours and effective_gpu_hours over its days and divide: the per-day ratios do not add.",
        {
            **_docs("day", "day_start", "environment", "gpu_model"),
            "currency": "ISO 4217 currency of the cost; XXX for unpriced time (ratios null).",
            "gpu_hours": MEASURE_DOCS["gpu_hours"],
            "effective_gpu_hours": MEASURE_DOCS["effective_gpu_hours"],
            "cost": MEASURE_DOCS["cost"],
            "cost_per_gpu_hour": "cost / gpu_hours, NUMERIC rounded half-even to 1e-9; null without "
            "GPU-hours or a price.",
            "cost_per_effective_gpu_hour": "cost / effective_gpu_hours, NUMERIC rounded half-even to "
            "1e-9; null when either is 0 or unpriced.",
            "metric": f"Utilization metric of effective hours: one default metric, or {MIXED_METRIC}.",
        },
    )
    VIEWS["idle_waste_daily_v1"] = (
        IDLE_WASTE,
        "Idle GPU-hours and their cost per UTC day by every non-device dimension, allocated (a "
        "workload held the idle GPU) vs unallocated (nobody did), at the ledger idle threshold of "
        "the default metric (GraphQL idleWaste without thresholdPct/metric). Always SUM.",
        {
            **_docs("day", "day_start", *_GROUP_DIMS, *_WORKLOAD_DIMS, "unallocated", "default_metric"),
            "currency": "ISO 4217 currency of the money columns; XXX for unpriced time.",
            "allocated_idle_gpu_hours": "Idle GPU-hours while a workload held the device.",
            "unallocated_idle_gpu_hours": "Idle GPU-hours of unallocated time.",
            "idle_gpu_hours": "allocated + unallocated idle GPU-hours.",
            "allocated_idle_cost": "Cost of allocated idle time, NUMERIC.",
            "unallocated_idle_cost": "Cost of unallocated idle time, NUMERIC.",
            "idle_cost": "allocated + unallocated idle cost, NUMERIC.",
            "gpu_hours": MEASURE_DOCS["gpu_hours"],
            "cost": MEASURE_DOCS["cost"],
        },
    )
    VIEWS["reconciliation_daily_v1"] = (
        RECONCILIATION,
        "Billed vs metered GPU-hours and bill vs ledger cost per provider x account x resource x "
        "UTC day, with a status (GraphQL reconciliation grouped by all four keys). Tolerance: "
        "setting gpu_ledger.reconciliation_tolerance_pct (default 5); bill share: "
        "gpu_ledger.gpu_cost_share (default 1).",
        _RECON_DOCS,
    )
    VIEWS["unmonitored_spend_daily_v1"] = (
        UNMONITORED,
        "Unmonitored spend: billed GPU time no metric covers (the ledger's <resource>/unmonitored "
        "rows), per UTC day and resource.",
        {
            **_docs("day", "day_start", "provider", "account", "region", "instance_type", "gpu_model"),
            "resource_id": "Billing resource id (instance id) of the unmonitored spend.",
            "currency": "ISO 4217 currency of cost.",
            "gpu_hours": "Billed GPU-hours without metrics.",
            "cost": "Their cost, NUMERIC.",
        },
    )
    VIEWS["connector_health_v1"] = (
        CONNECTOR_HEALTH,
        "One row per configured connector: status, watermark, last error, and its last finished run.",
        {
            "connector": "Connector instance name.",
            "connector_type": "Connector type (entry-point name).",
            "status": "NEVER_RUN, RUNNING, OK, MISSING_DATA, INVALID_CONFIGURATION, FAILED_CONNECTION, "
            "PARSE_ERROR, DEGRADED, INTERNAL_ERROR, DISABLED or ABORTED.",
            "healthy": "True when status is OK or RUNNING.",
            "watermark": "Ingested up to here (UTC).",
            "last_run_at": "Last run started (UTC).",
            "last_success_at": "Last successful run (UTC).",
            "last_error": "Last error message, or why it is DEGRADED.",
            "notice": "What the last run imported that the operator should know.",
            "watermark_lag_hours": "Hours from the watermark to now.",
            "last_run_id": "Id of the last finished run.",
            "last_run_status": "Status of the last finished run.",
            "last_run_finished_at": "When the last finished run ended (UTC).",
            "last_run_duration_s": "Its duration in seconds.",
            "last_run_read": "Rows it read.",
            "last_run_accepted": "Rows it accepted.",
            "last_run_rejected": "Rows it rejected.",
            "last_run_ledger_rows": "Ledger rows it wrote.",
            "last_run_findings": "Data-quality findings of the last finished run.",
        },
    )
    VIEWS["connector_runs_v1"] = (
        CONNECTOR_RUNS,
        "Every connector run: window, timing, counts, status and error.",
        {
            "run_id": "Run id (increasing).",
            "connector": "Connector instance name.",
            "window_start": "Start of the window ingested (UTC).",
            "window_end": "End of the window ingested, exclusive (UTC).",
            "started_at": "Run start (UTC).",
            "finished_at": "Run end (UTC); null while running.",
            "duration_s": "Duration in seconds; null while running.",
            "status": "Run status (as connector_health_v1.status).",
            "read": "Rows read (= accepted + rejected).",
            "accepted": "Rows accepted.",
            "rejected": "Rows rejected.",
            "ledger_rows": "Ledger rows written.",
            "findings": "Data-quality findings (rows imported although they break a rule).",
            "error": "Error message of a failed run.",
        },
    )
    VIEWS["devices_v1"] = (
        DEVICES,
        "The device inventory: every GPU or MIG instance the ledger has seen.",
        {
            **_docs(
                "device_id",
                "environment",
                "provider",
                "account",
                "region",
                "cluster",
                "node",
                "instance_id",
                "instance_type",
                "gpu_model",
                "mig_profile",
                "gpu_fraction",
                "source",
            ),  # fmt: skip
            "gpu_index": "GPU index on its host.",
            "parent_device_id": "Parent GPU of a MIG instance.",
            "tdp_w": "Thermal design power in watts.",
            "metrics": "Utilization metrics the device reports (comma-separated).",
            "first_seen": "First sample (UTC).",
            "last_seen": "End of the last sample (UTC).",
            "unmonitored_spend": "True for the pseudo-device of billed time without metrics.",
        },
    )


_register()


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _run(sql: str) -> None:
    # exec_driver_sql hands the text to the driver as is; '%' would be read as a placeholder.
    assert "%" not in sql, "no percent signs in driver SQL"
    op.get_bind().exec_driver_sql(sql)


GRANT = f"""
DO $do$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}') THEN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = current_user AND (rolsuper OR rolcreaterole)) THEN
      BEGIN
        CREATE ROLE {ROLE} NOLOGIN;
      EXCEPTION WHEN duplicate_object OR unique_violation THEN
        NULL;  -- another database's migration created it at the same time
      END;
    ELSE
      RAISE NOTICE 'role {ROLE} is absent and current_user may not create roles: run '
                   'gpu-ledger reporting grant as a user who may (docs/reporting.md)';
    END IF;
  END IF;
  IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}') THEN
    GRANT USAGE ON SCHEMA {SCHEMA} TO {ROLE};
    GRANT SELECT ON ALL TABLES IN SCHEMA {SCHEMA} TO {ROLE};
    ALTER DEFAULT PRIVILEGES IN SCHEMA {SCHEMA} GRANT SELECT ON TABLES TO {ROLE};
  END IF;
END
$do$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return  # SQLite: no schemas, no roles; BI tools read PostgreSQL
    _run(f"CREATE SCHEMA {SCHEMA}")
    _run(f"REVOKE ALL ON SCHEMA {SCHEMA} FROM PUBLIC")
    _run(
        f"COMMENT ON SCHEMA {SCHEMA} IS "
        + _literal("GPU Ledger views for BI tools: versioned (_vN), documented; see docs/reporting.md.")
    )
    _run(ROUND_HALF_EVEN)
    _run(
        f"COMMENT ON FUNCTION {SCHEMA}.round_half_even_nano(numeric) IS "
        + _literal("Rounds half-even to 9 decimals, as the service rounds money (Decimal quantize).")
    )
    for name, (sql, doc, columns) in VIEWS.items():
        _run(f"CREATE VIEW {SCHEMA}.{name} AS {sql}")
        _run(f"COMMENT ON VIEW {SCHEMA}.{name} IS {_literal(doc)}")
        for column, text in columns.items():
            _run(f"COMMENT ON COLUMN {SCHEMA}.{name}.{column} IS {_literal(text)}")
    _run(GRANT)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _run(f"""
DO $do$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}') THEN
    ALTER DEFAULT PRIVILEGES IN SCHEMA {SCHEMA} REVOKE SELECT ON TABLES FROM {ROLE};
  END IF;
END
$do$
""")
    _run(f"DROP SCHEMA {SCHEMA} CASCADE")
