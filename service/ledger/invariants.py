"""What every ledger row must satisfy before it is written, checked per batch with Polars.

A row that breaks one of these is a bug — in a connector's mapping or in normalization — never
a property of the source, so the write fails loudly (:class:`LedgerInvariantError`, naming the
connector, device, hour, workload and the numbers) instead of storing it:

* per row: ``present_s ≤ 3600``; ``observed_s ≤ present_s``; ``busy_s`` and ``idle_s ≤
  observed_s``; the same for every metric's ``obs_s_<m>``, ``busy_s_<m>``, ``idle_s_<m>``;
  ``energy_j ≥ 0``;
* per device and hour: the workloads' ``present_s`` add up to at most 3600;
* per physical GPU and hour: the energy of its MIG instances (devices whose
  ``parent_device_id`` is that GPU) adds up to at most the GPU's own energy when the GPU is a
  ledger device of the same batch with energy; otherwise (dcgm-exporter in flex mode, the usual
  case: the GPU is watched only through its instances) to at most its board's highest power ×
  the time its instances were present (capped at the hour), with ``POWER_MARGIN`` for sensor
  error. The board's highest power comes from its model (:func:`max_board_power_w`), not from
  ``tdp_w``: that is the *current* power limit an administrator may lower mid-hour, and sources
  disagree on whether an instance's ``tdp_w`` is the board's or its share.

Seconds are compared with a tolerance of ``SECONDS_TOLERANCE`` (rows are rounded to 1 µs after
float sums), energy with 1 mJ per row summed.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping

import polars as pl

from connectors.sdk import DeviceInfo
from service.metrics_catalog import UTIL_METRICS

HOUR_S = 3600.0
SECONDS_TOLERANCE = 1e-3
ENERGY_TOLERANCE_J = 1e-3
POWER_MARGIN = 1.1
EXAMPLES = 5
#: Highest board power (W) of any part of a MIG-capable family (the SXM/module part where there
#: are several); a model matching none gets ``MAX_BOARD_POWER_W``, above every GPU board made.
BOARD_POWER_W: tuple[tuple[re.Pattern[str], float], ...] = (
    (re.compile(r"\bA30\b"), 165.0),
    (re.compile(r"\bA[18]00\b"), 400.0),
    (re.compile(r"\bH[18]00\b"), 700.0),
    (re.compile(r"\bH200\b"), 700.0),
    (re.compile(r"\bGH200\b"), 1000.0),
    (re.compile(r"\bB200\b"), 1200.0),
    (re.compile(r"\bG?B300\b"), 1400.0),
)
MAX_BOARD_POWER_W = 2000.0


class LedgerInvariantError(RuntimeError):
    """Rows that would break a ledger invariant: a bug; the batch is not written.

    Not a ``ConnectorError``: the runner classifies it as ``INTERNAL_ERROR`` (logged with its
    traceback, not retried as a connection failure)."""


def max_board_power_w(model: str | None) -> float:
    """The highest power a board of ``model`` can draw, in W (see ``BOARD_POWER_W``)."""
    for pattern, watts in BOARD_POWER_W:
        if model and pattern.search(model):
            return watts
    return MAX_BOARD_POWER_W


def check_rows(rows: pl.DataFrame, devices: Mapping[str, DeviceInfo], *, connector: str) -> None:
    """Raise :class:`LedgerInvariantError` when any of ``rows`` (``normalize``'s output) breaks an
    invariant of this module's docstring; ``devices`` describes the batch's devices."""
    if rows.is_empty():
        return
    problems = [*_row_problems(rows), *_device_hour_problems(rows), *_mig_problems(rows, devices)]
    if problems:
        shown = "; ".join(problems[:EXAMPLES])
        more = f" (and {len(problems) - EXAMPLES} more)" if len(problems) > EXAMPLES else ""
        raise LedgerInvariantError(
            f"connector {connector!r} produced ledger rows that break the ledger's invariants "
            f"(a bug in the connector or the ledger; nothing of this batch was written): {shown}{more}"
        )


def _where(device: str, hour_index: int, workload: str | None = None) -> str:
    hour = dt.datetime.fromtimestamp(hour_index * 3600, dt.UTC).strftime("%Y-%m-%dT%H:00Z")
    text = f"device {device} hour {hour}"
    return text if workload is None else f"{text} workload {workload!r}"


def _pairs(columns: list[str]) -> list[tuple[str, str]]:
    """(smaller, larger): ``smaller ≤ larger`` must hold on every row (``_hour`` is 3600 s)."""
    pairs = [("present_s", "_hour"), ("observed_s", "present_s"), ("busy_s", "observed_s")]
    pairs.append(("idle_s", "observed_s"))
    for metric in UTIL_METRICS:
        obs = f"obs_s_{metric.value}"
        pairs += [(obs, "present_s"), (f"busy_s_{metric.value}", obs), (f"idle_s_{metric.value}", obs)]
    present = set(columns) | {"_hour"}
    return [p for p in pairs if p[0] in present and p[1] in present]


def _row_problems(rows: pl.DataFrame) -> list[str]:
    frame = rows.with_columns(pl.lit(HOUR_S).alias("_hour"))
    pairs = _pairs(frame.columns)
    broken = [
        (pl.col(small).fill_null(0.0) > pl.col(large).fill_null(0.0) + SECONDS_TOLERANCE).alias(f"_{i}")
        for i, (small, large) in enumerate(pairs)
    ]
    flags = frame.with_columns(*broken)
    if "energy_j" in frame.columns:
        flags = flags.with_columns((pl.col("energy_j") < 0).fill_null(False).alias("_energy"))
    flag_columns = [c for c in flags.columns if c.startswith("_") and c != "_hour"]
    bad = flags.filter(pl.any_horizontal(flag_columns)).head(EXAMPLES)
    out = []
    for row in bad.iter_rows(named=True):
        where = _where(row["device_id"], row["hour_index"], row["workload_key"])
        for i, (small, large) in enumerate(pairs):
            if row[f"_{i}"]:
                bound = "3600" if large == "_hour" else f"{large} {row[large]}"
                out.append(f"{where}: {small} {row[small]} > {bound}")
        if row.get("_energy"):
            out.append(f"{where}: energy_j {row['energy_j']} < 0")
    extra = flags.filter(pl.any_horizontal(flag_columns)).height - bad.height
    return out + ([f"{extra} more rows"] if extra > 0 else [])


def _device_hour_problems(rows: pl.DataFrame) -> list[str]:
    per = rows.group_by("device_id", "hour_index").agg(
        pl.col("present_s").sum(), pl.col("workload_key").n_unique().alias("workloads")
    )
    bad = per.filter(pl.col("present_s") > HOUR_S + SECONDS_TOLERANCE).sort("device_id", "hour_index")
    return [
        f"{_where(r['device_id'], r['hour_index'])}: present_s over its {r['workloads']} workloads "
        f"adds up to {r['present_s']} > 3600"
        for r in bad.head(EXAMPLES).iter_rows(named=True)
    ]


def _board_w(device: DeviceInfo, models: Mapping[str, str | None]) -> float:
    return max_board_power_w(device.gpu_model or models.get(device.parent_device_id or ""))


def _mig_problems(rows: pl.DataFrame, devices: Mapping[str, DeviceInfo]) -> list[str]:
    described = [d for d in devices.values() if d.parent_device_id]
    if not described or "energy_j" not in rows.columns:
        return []
    models = {d.device_id: d.gpu_model for d in devices.values()}
    parents = pl.DataFrame(
        {
            "device_id": [d.device_id for d in described],
            "parent": [d.parent_device_id for d in described],
            "max_w": [_board_w(d, models) for d in described],
        },
        schema={"device_id": pl.String, "parent": pl.String, "max_w": pl.Float64},
    )
    instances = (
        rows.join(parents, on="device_id", how="inner")
        .group_by("parent", "hour_index")
        .agg(
            pl.col("energy_j").sum().alias("instances_j"),
            pl.col("energy_j").is_not_null().sum().alias("n"),
            pl.col("device_id").n_unique().alias("count"),
            pl.col("present_s").sum().clip(upper_bound=HOUR_S).alias("span_s"),
            pl.col("max_w").max(),
        )
        .filter(pl.col("n") > 0)
    )
    own = (
        rows.filter(pl.col("energy_j").is_not_null())
        .group_by("device_id", "hour_index")
        .agg(pl.col("energy_j").sum().alias("parent_j"), pl.len().alias("parent_rows"))
        .rename({"device_id": "parent"})
    )
    checked = instances.join(own, on=["parent", "hour_index"], how="left").with_columns(
        pl.when(pl.col("parent_j").is_not_null())
        .then(pl.col("parent_j") + ENERGY_TOLERANCE_J * (pl.col("n") + pl.col("parent_rows")))
        .otherwise(pl.col("max_w") * POWER_MARGIN * pl.col("span_s") + ENERGY_TOLERANCE_J * pl.col("n"))
        .alias("bound_j")
    )
    bad = checked.filter(pl.col("instances_j") > pl.col("bound_j")).sort("parent", "hour_index")
    out = []
    for r in bad.head(EXAMPLES).iter_rows(named=True):
        if r["parent_j"] is not None:
            bound = f"the GPU's own energy_j {r['parent_j']}"
        else:
            bound = (
                f"{r['max_w']:g} W × {POWER_MARGIN:g} × {r['span_s']:g} s present = {r['bound_j']:.3f} J "
                "(the board's highest power; the GPU is no ledger device)"
            )
        out.append(
            f"{_where(r['parent'], r['hour_index'])}: energy_j of its {r['count']} MIG instances adds up "
            f"to {r['instances_j']:.3f} > {bound}"
        )
    return out
