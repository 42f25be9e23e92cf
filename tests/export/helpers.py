"""Helpers of the export tests: the demo fleet, GraphQL and export requests for one case, and the
column-by-column comparison of an export with GraphQL's answer."""

from __future__ import annotations

import datetime as dt
import io
from decimal import Decimal
from typing import Any

import httpx
import polars as pl
from sqlalchemy import Engine

from connectors.registry import default_registry
from service.analytics.dims import Dimension
from service.bootstrap import sync_config
from service.demo import with_demo
from service.ledger.ingest import ingest_window
from service.settings import Settings

UTC = dt.UTC
DEMO_START = dt.datetime(2025, 9, 1, tzinfo=UTC)
DEMO_END = dt.datetime(2025, 9, 2, 6, tzinfo=UTC)
#: Cut mid-day at both ends: DAY answers read the daily rollup and the hourly edges.
WINDOW = {"start": "2025-09-01T03:00:00Z", "end": "2025-09-02T05:00:00Z"}
FORMATS = ("arrow", "parquet", "csv")

MONEY = {
    "cost",
    "idle_cost",
    "shared_idle_cost",
    "allocated_idle_cost",
    "unallocated_idle_cost",
    "cost_per_gpu_hour",
    "cost_per_effective_gpu_hour",
}
FLOATS = {
    "gpu_hours",
    "effective_gpu_hours",
    "utilization_pct",
    "idle_gpu_hours",
    "energy_kwh",
    "coverage_pct",
    "unpriced_gpu_hours",
    "allocated_idle_gpu_hours",
    "unallocated_idle_gpu_hours",
    "threshold_pct",
}
SELECTIONS = {
    "usage": "gpuHours effectiveGpuHours utilizationPct idleGpuHours energyKwh coveragePct metric",
    "cost": "cost{amount currency} idleCost{amount currency} sharedIdleCost{amount currency} gpuHours "
    "unpricedGpuHours rateSource unallocated",
    "idleWaste": "idleGpuHours idleCost{amount currency} allocatedIdleGpuHours "
    "allocatedIdleCost{amount currency} unallocatedIdleGpuHours unallocatedIdleCost{amount currency} "
    "longestIdleStreakHours thresholdPct metric",
    "effectiveCost": "gpuHours effectiveGpuHours cost{amount currency} costPerGpuHour{amount currency} "
    "costPerEffectiveGpuHour{amount currency} metric",
}
EXPORT_NAMES = {
    "usage": "usage",
    "cost": "cost",
    "idleWaste": "idle-waste",
    "effectiveCost": "effective-cost",
}
DIMENSIONS = [d.name for d in Dimension]


def load_demo_fleet(engine: Engine) -> Settings:
    """The ``serve --demo`` fleet (about 90 GPUs, on-prem and three clouds, priced), DEMO_START–END."""
    settings = with_demo(Settings(database_url=engine.url.render_as_string(hide_password=False)))
    sync_config(engine, settings)
    connector = default_registry().build(settings.connector("demo"))
    ingest_window(engine, "demo", connector, DEMO_START, DEMO_END, sites=settings.sites)
    return settings


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def graphql_query(field: str, case: dict[str, Any]) -> str:
    """The GraphQL document asking ``field`` with ``case``'s arguments (window and filter as $w, $f)."""
    args = ["window: $w", "filter: $f"]
    if "granularity" in case:
        args.append(f"granularity: {case['granularity']}")
    if "groupBy" in case:
        args.append(f"groupBy: [{', '.join(case['groupBy'])}]")
    for enum in ("metric", "idlePolicy"):
        if enum in case:
            args.append(f"{enum}: {case[enum]}")
    if "currency" in case:
        args.append(f'currency: "{case["currency"]}"')
    if "thresholdPct" in case:
        args.append(f"thresholdPct: {case['thresholdPct']}")
    dims = " ".join(camel(d.lower()) for d in DIMENSIONS)
    return (
        f"query($w: TimeWindow!, $f: LedgerFilter) {{ {field}({', '.join(args)}) "
        f"{{ periodStart {dims} {SELECTIONS[field]} }} }}"
    )


def export_params(case: dict[str, Any], window: dict[str, str] = WINDOW) -> list[tuple[str, str]]:
    """``case`` as the export's query parameters (filter values repeated)."""
    params = [("start", window["start"]), ("end", window["end"])]
    for key in ("granularity", "metric", "idlePolicy", "currency", "thresholdPct"):
        if key in case:
            params.append((key, str(case[key])))
    if "groupBy" in case:
        params.append(("groupBy", ",".join(case["groupBy"])))
    for key, values in case.get("filter", {}).items():
        if isinstance(values, list):
            params += [(key, v) for v in values]
        else:
            params.append((key, str(values).lower()))
    return params


def graphql_rows(
    base: str, field: str, case: dict[str, Any], headers: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    body = {"query": graphql_query(field, case), "variables": {"w": WINDOW, "f": case.get("filter")}}
    r = httpx.post(f"{base}/graphql", json=body, headers=headers, timeout=60)
    answer = r.json()
    assert "errors" not in answer, answer
    rows: list[dict[str, Any]] = answer["data"][field]
    return rows


def export(
    base: str, question: str, fmt: str, params: list[tuple[str, str]], headers: dict[str, str] | None = None
) -> httpx.Response:
    return httpx.get(f"{base}/export/{question}.{fmt}", params=params, headers=headers, timeout=60)


def read(fmt: str, content: bytes) -> pl.DataFrame:
    """An export read back with polars (CSV as text: every value exactly as written)."""
    if fmt == "arrow":
        return pl.read_ipc_stream(io.BytesIO(content))
    if fmt == "parquet":
        return pl.read_parquet(io.BytesIO(content))
    return pl.read_csv(io.BytesIO(content), infer_schema=False)


def expected_columns(field: str, group_by: list[str]) -> list[str]:
    measures = {
        "usage": "gpu_hours effective_gpu_hours utilization_pct idle_gpu_hours energy_kwh coverage_pct "
        "metric",
        "cost": "currency cost idle_cost shared_idle_cost gpu_hours unpriced_gpu_hours rate_source "
        "unallocated",
        "idleWaste": "currency idle_gpu_hours idle_cost allocated_idle_gpu_hours allocated_idle_cost "
        "unallocated_idle_gpu_hours unallocated_idle_cost longest_idle_streak_hours threshold_pct metric",
        "effectiveCost": "currency gpu_hours effective_gpu_hours cost cost_per_gpu_hour "
        "cost_per_effective_gpu_hour metric",
    }[field]
    return ["period_start", *(d.lower() for d in group_by), *measures.split()]


def assert_same(fmt: str, frame: pl.DataFrame, rows: list[dict[str, Any]]) -> None:
    """Every column of every row of an export equals GraphQL's row (GraphQL rounds floats to 6
    decimals for display: the export's full double, rounded so, is GraphQL's number)."""
    assert frame.height == len(rows), (frame.height, len(rows))
    for i, (got, want) in enumerate(zip(frame.iter_rows(named=True), rows, strict=True)):
        for column, value in got.items():
            expected = want[camel(column)] if column != "currency" else None
            where = f"{fmt} row {i} column {column}: {value!r} vs {expected!r}"
            if column == "currency":
                monies = [want[camel(m)] for m in MONEY if camel(m) in want and want[camel(m)] is not None]
                assert all(m["currency"] == value for m in monies), (where, monies)
            elif column == "period_start":
                instant = None if expected is None else dt.datetime.fromisoformat(expected)
                if fmt == "csv":
                    value = None if value is None else dt.datetime.fromisoformat(value)
                assert value == instant, where
            elif column in MONEY:
                if expected is None:
                    assert value is None, where
                else:
                    text = value if fmt == "csv" else format(value, "f")
                    assert isinstance(value, str if fmt == "csv" else Decimal), where
                    assert text == expected["amount"], where
            elif column in FLOATS:
                number = None if value is None else float(value)
                assert (None if number is None else round(number, 6)) == expected, where
            elif column == "longest_idle_streak_hours":
                assert (None if value is None else int(value)) == expected, where
            elif column == "unallocated":
                assert (value == "true" if fmt == "csv" else value) is expected, where
            else:
                assert value == expected, where
