"""forecast and demandCapacity over HTTP against the running app: answers, scoped tokens, refusals.

The ledger: three weeks (D0 = Monday) of two projects on one on-prem pool of two GPUs. alpha holds
GPU-a every hour of weekdays (24 GPU-hours, 24 USD a weekday, 0 at weekends); beta (team web)
holds GPU-b 12 hours a day every day (12 GPU-hours, 6 EUR a day; 1 EUR = 2 USD every day).
GPU-b is free the other 12 hours. So a weekday has 12 saturated hours (both GPUs held), a weekend none.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from conftest import serve
from ledger_rows import D0, at, row
from sqlalchemy import Engine

from service.auth.tokens import TokenStore
from service.models import FxRate

DAYS = 21
W = {"start": at(0).isoformat(), "end": at(24 * DAYS).isoformat()}
FORECAST = """query($w: TimeWindow!, $h: Int!, $g: [Dimension!]!, $c: String, $l: [Float!]!) {
  forecast(window: $w, horizonDays: $h, groupBy: $g, currency: $c, levelsPct: $l) {
    firstDay horizonDays historyDays levelsPct
    groups { project team
      gpuHours { model total points { day value intervals { levelPct lower upper } } }
      effectiveGpuHours { model total }
      cost { currency model total { amount currency } points { value { amount currency }
             intervals { levelPct lower { amount } upper { amount } } } } } } }"""
CAPACITY = """query($w: TimeWindow!, $g: Granularity!, $t: Float!) {
  demandCapacity(window: $w, granularity: $g, allocationPct: $t) {
    periodStart environment gpuModel hours installedGpuHours allocatedGpuHours allocatedPct
    peakInstalledGpus peakAllocatedGpus saturatedHours cursor } }"""


@pytest.fixture
def ledger(put) -> None:  # type: ignore[no-untyped-def]
    rows: list[Any] = []
    for day in range(DAYS):
        for hour in range(24):
            h = day * 24 + hour
            if day % 7 < 5:
                rows.append(row(h, "GPU-a", "job-a", project="alpha", team="ml", cost="1", busy_s=1800.0))
            else:
                rows.append(row(h, "GPU-a", cost="1", idle_cost="1"))
            if hour < 12:
                rows.append(row(h, "GPU-b", "job-b", project="beta", team="web", cost="0.5", currency="EUR"))
            else:
                rows.append(row(h, "GPU-b", cost="0.5", idle_cost="0.5", currency="EUR"))
        rows.append(
            FxRate(base="EUR", quote="USD", day=(D0 + dt.timedelta(days=day)).date(), rate=Decimal(2))
        )
    put(rows)


class Caller:
    def __init__(self, base: str, secret: str) -> None:
        self.base, self.secret = base, secret

    def post(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        r = httpx.post(
            f"{self.base}/graphql",
            json={"query": query, "variables": variables},
            headers={"Authorization": f"Bearer {self.secret}"},
            timeout=60,
        )
        assert r.status_code in (200, 400), r.text
        assert "Traceback" not in r.text
        body: dict[str, Any] = r.json()
        return body


@pytest.fixture
def callers(engine: Engine, ledger: None) -> Iterator[dict[str, Caller]]:
    store = TokenStore(engine)
    scopes = {"alpha": "read:project:alpha", "web": "read:team:web", "all": "read"}
    secrets = {name: store.create(f"h2-{name}", [scope])[0] for name, scope in scopes.items()}
    for base in serve(engine, auth={}):
        yield {name: Caller(base, secret) for name, secret in secrets.items()}


def _vars(**kw: Any) -> dict[str, Any]:
    return {"w": W, "h": 7, "g": ["PROJECT"], "c": None, "l": [80, 95]} | kw


def test_forecast_per_project_with_weekly_season(callers: dict[str, Caller]) -> None:
    body = callers["all"].post(FORECAST, _vars(c="USD"))
    assert "errors" not in body, body
    f = body["data"]["forecast"]
    assert (f["horizonDays"], f["historyDays"], f["levelsPct"]) == (7, DAYS, [80.0, 95.0])
    assert dt.datetime.fromisoformat(f["firstDay"]) == at(24 * DAYS)
    by_project = {g["project"]: g for g in f["groups"]}
    assert set(by_project) == {None, "alpha", "beta"}
    alpha = by_project["alpha"]["gpuHours"]
    assert alpha["model"] == "HOLT_WINTERS_ADDITIVE_WEEKLY"
    # Day 21 is a Monday: alpha's pattern is 24, 24, 24, 24, 24, 0, 0 GPU-hours.
    values = [p["value"] for p in alpha["points"]]
    assert values == pytest.approx([24, 24, 24, 24, 24, 0, 0], abs=0.5)
    assert alpha["total"] == pytest.approx(120, abs=1)
    first = alpha["points"][0]["intervals"]
    assert [i["levelPct"] for i in first] == [80.0, 95.0]
    assert first[1]["lower"] <= first[0]["lower"] <= values[0] <= first[0]["upper"] <= first[1]["upper"]
    (beta_cost,) = by_project["beta"]["cost"]
    # 6 EUR a day at 2 USD: 12 USD every day.
    assert beta_cost["currency"] == "USD" and beta_cost["model"] == "CONSTANT"
    assert beta_cost["total"] == {"amount": "84.000000000", "currency": "USD"}
    assert by_project["beta"]["effectiveGpuHours"]["total"] == 0.0


def test_forecast_per_currency_without_conversion(callers: dict[str, Caller]) -> None:
    f = callers["all"].post(FORECAST, _vars(g=[]))["data"]["forecast"]
    (whole,) = f["groups"]
    assert [c["currency"] for c in whole["cost"]] == ["EUR", "USD"]
    eur = whole["cost"][0]
    assert eur["model"] == "CONSTANT" and eur["total"]["amount"] == "84.000000000"  # 12 EUR a day


def test_a_project_token_forecasts_only_its_project(callers: dict[str, Caller]) -> None:
    for name, projects in (("alpha", {"alpha"}), ("web", {"beta"})):
        f = callers[name].post(FORECAST, _vars(c="USD"))["data"]["forecast"]
        assert {g["project"] for g in f["groups"]} == projects, name
    # Ungrouped, alpha's token sees its own 24 GPU-hours a weekday, nothing of beta's.
    f = callers["alpha"].post(FORECAST, _vars(g=[]))["data"]["forecast"]
    (whole,) = f["groups"]
    assert [c["currency"] for c in whole["cost"]] == ["USD"]
    assert whole["gpuHours"]["total"] == pytest.approx(120, abs=1)


#: (variables, the error code; None: any coded error but INTERNAL, or no error for the wide groupBy).
HOSTILE: list[tuple[dict[str, Any], str | None]] = [
    ({"h": 0}, "INVALID_ARGUMENT"),
    ({"h": 10**9}, "INVALID_ARGUMENT"),
    ({"h": -1}, "INVALID_ARGUMENT"),
    ({"l": [100]}, "INVALID_ARGUMENT"),
    ({"l": []}, "INVALID_ARGUMENT"),
    ({"c": "ZZZ"}, "UNKNOWN_CURRENCY"),
    ({"c": "💶"}, "UNKNOWN_CURRENCY"),
    ({"c": "CHF"}, "UNKNOWN_CURRENCY"),
    ({"w": {"start": at(0).isoformat(), "end": at(24 * 6).isoformat()}}, "HISTORY_TOO_SHORT"),
    ({"w": {"start": at(1).isoformat(), "end": at(24 * 8).isoformat()}}, "WINDOW_NOT_ALIGNED"),
    ({"w": {"start": at(0).isoformat(), "end": at(24 * 500).isoformat()}}, "WINDOW_TOO_LARGE"),
    ({"g": ["NOPE"]}, None),  # a GraphQL validation error
    ({"g": ["DEVICE", "WORKLOAD", "NODE"] * 2}, None),  # allowed: fine, few groups here
]


def test_hostile_arguments_get_clear_errors(callers: dict[str, Caller]) -> None:
    """One server for every case (each would otherwise build the ledger and a server of its own)."""
    for variables, code in HOSTILE:
        body = callers["all"].post(FORECAST, _vars(**variables))
        if variables.get("g") == ["DEVICE", "WORKLOAD", "NODE"] * 2:
            assert "errors" not in body, (variables, body)
            continue
        (error,) = body["errors"]
        assert "Traceback" not in str(error) and error.get("extensions", {}).get("code") != "INTERNAL", (
            variables
        )
        if code is not None:
            assert error["extensions"]["code"] == code, (variables, error)


def test_missing_fx_rate_names_the_day(callers: dict[str, Caller], put) -> None:  # type: ignore[no-untyped-def]
    put([FxRate(base="USD", quote="JPY", day=D0.date(), rate=Decimal(150))])
    (error,) = callers["all"].post(FORECAST, _vars(c="JPY"))["errors"]
    assert error["extensions"]["code"] == "MISSING_FX_RATE" and "JPY" in error["message"]


def test_demand_capacity_per_day(callers: dict[str, Caller]) -> None:
    body = callers["all"].post(CAPACITY, {"w": W, "g": "DAY", "t": 100})
    assert "errors" not in body, body
    rows = body["data"]["demandCapacity"]
    assert len(rows) == DAYS
    monday, saturday = rows[0], rows[5]
    assert (monday["environment"], monday["gpuModel"], monday["hours"]) == ("onprem", "H200", 24)
    assert (monday["installedGpuHours"], monday["allocatedGpuHours"], monday["saturatedHours"]) == (
        48,
        36,
        12,
    )
    assert (monday["peakInstalledGpus"], monday["peakAllocatedGpus"], monday["allocatedPct"]) == (2, 2, 75)
    assert (saturday["allocatedGpuHours"], saturday["saturatedHours"]) == (12, 0)
    total = callers["all"].post(CAPACITY, {"w": W, "g": "TOTAL", "t": 50})["data"]["demandCapacity"]
    # Half the GPUs held: every hour but the weekends' afternoons (6 weekend days × 12 hours).
    assert total[0]["saturatedHours"] == 24 * DAYS - 6 * 12


def test_demand_capacity_is_forbidden_to_scoped_tokens(callers: dict[str, Caller]) -> None:
    for name in ("alpha", "web"):
        body = callers[name].post(CAPACITY, {"w": W, "g": "DAY", "t": 100})
        assert body["data"] is None
        (error,) = body["errors"]
        assert error["extensions"]["code"] == "FORBIDDEN"


def test_demand_capacity_export_over_http(callers: dict[str, Caller]) -> None:
    params = {"start": W["start"], "end": W["end"], "granularity": "TOTAL", "allocationPct": "50"}
    url = f"{callers['all'].base}/export/demand-capacity.csv"
    r = httpx.get(
        url, params=params, headers={"Authorization": f"Bearer {callers['all'].secret}"}, timeout=60
    )
    assert r.status_code == 200, r.text
    header, line = r.text.strip().splitlines()
    assert header.split(",")[:4] == ["period_start", "environment", "gpu_model", "hours"]
    assert line.split(",")[-2:] == [str(24 * DAYS - 6 * 12), "50.0"]
    scoped = httpx.get(url, params=params, headers={"Authorization": f"Bearer {callers['alpha'].secret}"})
    assert scoped.status_code == 403 and "FORBIDDEN" in scoped.text
    bad = httpx.get(
        url,
        params=params | {"groupBy": "PROJECT"},
        headers={"Authorization": f"Bearer {callers['all'].secret}"},
    )
    assert bad.status_code == 400 and "groupBy" in bad.text and "Traceback" not in bad.text
