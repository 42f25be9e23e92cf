"""The Grafana dashboards and provisioning under deploy/grafana: every panel's SQL, expanded as Grafana
expands it (tests/reporting/grafana.py), runs on PostgreSQL as the BI login over the demo fleet and
the billing scenario and returns rows; the cost panel's total is GraphQL's, to the cent and beyond."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import defaultdict
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from api.conftest import serve
from reporting.grafana import ALL, Context, MacroError, Variable, expand, quote_literal
from reporting.helpers import gql, money, window
from sqlalchemy import Connection, Engine, text

GRAFANA = Path(__file__).resolve().parents[2] / "deploy" / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
UTC = dt.UTC
#: Cut mid-day; its last hour (2025-09-03 05:00) holds data, so BETWEEN's inclusive end would show.
START, END = dt.datetime(2025, 9, 1, 3, tzinfo=UTC), dt.datetime(2025, 9, 3, 5, tzinfo=UTC)
LEFTOVER = re.compile(r"\$\w|\$\{|\[\[")


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _datasource() -> dict[str, Any]:
    config = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "gpu-ledger.yaml").read_text())
    (ds,) = config["datasources"]
    return dict(ds)


def test_provisioning_files_and_dashboard_structure() -> None:
    ds = _datasource()
    assert ds["type"] == "grafana-postgresql-datasource" and ds["access"] == "proxy"
    assert ds["jsonData"]["database"] and ds["secureJsonData"]["password"].startswith("${")
    providers = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "gpu-ledger.yaml").read_text())
    (provider,) = providers["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]
    assert {p.name for p in DASHBOARDS} == {
        "gpu-ledger-cost.json",
        "gpu-ledger-utilization.json",
        "gpu-ledger-operations.json",
    }
    uids = set()
    titles = set()
    for path in DASHBOARDS:
        board = _load(path)
        uids.add(board["uid"])
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)), path.name
        for p in board["panels"]:
            assert p["datasource"]["uid"] == ds["uid"], (path.name, p["title"])
            assert {"x", "y", "w", "h"} <= set(p["gridPos"]) and p["targets"], p["title"]
            for t in p["targets"]:
                assert t["rawQuery"] is True and t["format"] in ("table", "time_series")
                assert "reporting." in t["rawSql"], p["title"]  # the views, never the tables
                assert not re.search(r"\bFROM\s+(public\.)?(ledger_|api_token|billing_line)", t["rawSql"])
            titles.add(p["title"])
    assert len(uids) == len(DASHBOARDS)
    wanted = ["Cost", "Cost per effective GPU-hour", "Idle", "hour of week", "Connector health"]
    assert all(any(w.lower() in t.lower() for t in titles) for w in wanted), titles


def test_the_expansion_is_grafanas() -> None:
    ctx = Context(
        START,
        END,
        {
            "env": Variable("env", True, True, "'__all'", ["aws", "onprem"], ["o'prem", "aws"]),
            "tz": Variable("tz", False, False, None, ["UTC"], ["Europe/Berlin"]),
            "all": Variable("all", True, True, None, ["a", "b"]),
            "custom": Variable("custom", True, True, "'__all'", ["a"]),
        },
    )
    panel = {"interval": "1h"}
    sql = (
        "SELECT $__timeGroupAlias(hour_start, $__interval), $__timeGroup(t, '1d') x, "
        "$__timeGroup(t, 5m), $__time(t) FROM v WHERE $__timeFilter(hour_start) "
        "AND e IN ($env) AND a IN (${all}) AND c IN ([[custom]]) AND z = '${tz}' "
        "AND s >= $__unixEpochFrom() AND $__timeFrom() < $__timeTo() AND n = $__interval_ms AND $nope"
    )
    assert expand(sql, ctx, panel) == (
        'SELECT floor(extract(epoch from hour_start)/3600)*3600 AS "time", '
        "floor(extract(epoch from t)/86400)*86400 x, "
        'floor(extract(epoch from t)/300)*300 AS "time", t AS "time" FROM v '
        "WHERE hour_start BETWEEN '2025-09-01T03:00:00Z' AND '2025-09-03T05:00:00Z' "
        "AND e IN ('o''prem','aws') AND a IN ('a','b') AND c IN ('__all') AND z = 'Europe/Berlin' "
        "AND s >= 1756695600 AND '2025-09-01T03:00:00Z' < '2025-09-03T05:00:00Z' AND n = 3600000 AND $nope"
    )
    # no panel minimum: (to - from) / 1000 points = 180 s, which Grafana's ladder rounds to 2m
    assert expand("$__interval", ctx, {}) == "2m"
    with pytest.raises(MacroError, match="unknown macro"):
        expand("SELECT $__timeRange(x)", ctx, panel)
    assert quote_literal("it's") == "'it''s'"


@pytest.fixture(scope="module")
def base(reporting_engine: Engine) -> Iterator[str]:
    yield from serve(reporting_engine)


def _variables(conn: Connection, board: dict[str, Any]) -> dict[str, Variable]:
    out = {}
    for spec in board["templating"]["list"]:
        if spec["type"] == "query":
            options = [str(v) for (v,) in conn.execute(text(spec["query"]))]
            assert options, spec["name"]
        else:
            options = [o["value"] for o in spec["options"]]
        var = Variable.of(spec, options)
        if spec["type"] == "custom":
            var.current = [spec["current"]["value"]]
        out[var.name] = var
    return out


def _run_panels(conn: Connection, board: dict[str, Any], ctx: Context) -> dict[str, list[dict[str, Any]]]:
    answers = {}
    for panel in board["panels"]:
        for target in panel["targets"]:
            sql = expand(target["rawSql"], ctx, panel)
            assert not LEFTOVER.search(sql), (panel["title"], sql)
            rows = [dict(r._mapping) for r in conn.execute(text(sql.replace(":", r"\:")))]
            answers[panel["title"]] = rows
    return answers


def _cost_by_currency(rows: list[dict[str, Any]]) -> dict[str, str]:
    return {r["metric"]: money(r["cost"]) for r in rows}


def _graphql_cost(base: str, flt: dict[str, Any] | None) -> dict[str, str]:
    answer = gql(
        base,
        "query($w: TimeWindow!, $f: LedgerFilter) { cost(window: $w, filter: $f) "
        "{ cost { amount currency } } }",
        {"w": window(START, END), "f": flt},
    )["cost"]
    total: dict[str, Decimal] = defaultdict(Decimal)
    for row in answer:
        total[row["cost"]["currency"]] += Decimal(row["cost"]["amount"])
    return {c: money(v) for c, v in total.items()}


@pytest.mark.postgres
@pytest.mark.slow
def test_every_panel_returns_rows_and_the_cost_panel_is_graphqls(bi_engine: Engine, base: str) -> None:
    datasource_interval = _datasource()["jsonData"]["timeInterval"]
    with bi_engine.connect() as conn:
        for path in DASHBOARDS:
            board = _load(path)
            variables = _variables(conn, board)
            ctx = Context(START, END, variables, datasource_interval=datasource_interval)
            answers = _run_panels(conn, board, ctx)
            empty = [title for title, rows in answers.items() if not rows]
            assert empty == [], (path.name, empty)
            if board["uid"] != "gpu-ledger-cost":
                continue
            assert _cost_by_currency(answers["Cost"]) == _graphql_cost(base, None)
            by_pair = {
                (r["environment"], r["gpu_model"]): money(r["cost"])
                for r in answers["Cost per effective GPU-hour by environment × GPU model"]
            }
            effective = gql(
                base,
                "query($w: TimeWindow!) { effectiveCost(window: $w) "
                "{ environment gpuModel cost { amount currency } } }",
                {"w": window(START, END)},
            )["effectiveCost"]
            assert by_pair == {
                (e["environment"], e["gpuModel"]): e["cost"]["amount"]
                for e in effective
                if e["cost"]["currency"] != "XXX"
            }
            # One environment and one project chosen: the same total as GraphQL's filter.
            project = variables["project"].options[0]
            variables["environment"].current = ["onprem"]
            variables["project"].current = [project]
            answers = _run_panels(conn, board, ctx)
            assert answers["Cost"], project
            flt = {"environment": ["onprem"], "project": [project]}
            assert _cost_by_currency(answers["Cost"]) == _graphql_cost(base, flt)


@pytest.mark.postgres
@pytest.mark.slow
def test_the_heatmap_has_seven_days_of_24_hours_and_moves_with_the_time_zone(bi_engine: Engine) -> None:
    board = _load(GRAFANA / "dashboards" / "gpu-ledger-utilization.json")
    (panel,) = [p for p in board["panels"] if "hour of week" in p["title"]]
    with bi_engine.connect() as conn:
        variables = _variables(conn, board)
        grids = {}
        for tz in ("UTC", "Asia/Tokyo"):
            variables["tz"].current = [tz]
            sql = expand(panel["targets"][0]["rawSql"], Context(START, END, variables), panel)
            rows = [dict(r._mapping) for r in conn.execute(text(sql.replace(":", r"\:")))]
            assert [r["weekday"] for r in rows] == ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
            assert all(len([k for k in r if k.isdigit()]) == 24 for r in rows)
            cells = {(r["weekday"], h): r[h] for r in rows for h in r if h.isdigit() and r[h] is not None}
            assert cells and all(0 <= v <= 100 for v in cells.values())
            grids[tz] = cells
    # 2025-09-01 03:00 UTC was a Monday; in Tokyo (UTC+9) that hour is Monday 12:00
    assert ("Mon", "03") in grids["UTC"] and ("Mon", "12") in grids["Asia/Tokyo"]
    assert ("Mon", "03") not in grids["Asia/Tokyo"] or grids["Asia/Tokyo"][("Mon", "03")] is None
    assert ALL == "$__all"
