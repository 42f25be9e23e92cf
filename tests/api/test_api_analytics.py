"""usage, cost, idleWaste and effectiveCost over HTTP against the running app (SQLite and PostgreSQL)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from conftest import Gql
from ledger_rows import at, row

from service.models import FxRate

D = Decimal
W = {"start": at(0).isoformat(), "end": at(2).isoformat()}
IDLE = {"idle_s": 3600.0, "hist_0_1_s": 3600.0, "obs_s_gpu_util": 3600.0, "idle_s_gpu_util": 3600.0}


@pytest.fixture
def ledger(put) -> None:  # type: ignore[no-untyped-def]
    put(
        [
            row(0, "GPU-a", "job-1", project="alpha", busy_s=1800.0, obs_s_gpu_util=3600.0,
                busy_s_gpu_util=3600.0, hist_25_50_s=3600.0, cost="3", idle_cost="0", energy_j=3.6e6),
            row(1, "GPU-a", cost="2.000000001", idle_cost="2.000000001", **IDLE),
            row(0, "MIG-b", "job-2", project="beta", environment="aws", gpu_fraction=1 / 7,
                default_metric="gpu_util", busy_s=900.0, obs_s_gpu_util=3600.0, busy_s_gpu_util=900.0,
                hist_25_50_s=3600.0, cost="1", idle_cost="0", currency="EUR", rate_source="billing:aws"),
            row(1, "MIG-b", "job-2", project="beta", environment="aws", gpu_fraction=1 / 7,
                default_metric="gpu_util", cost="1", idle_cost="1", currency="EUR", rate_source="billing:aws",
                **IDLE),
            FxRate(base="EUR", quote="USD", day=at(0).date(), rate=D("1.5")),
        ]
    )  # fmt: skip


def data(r: dict[str, Any], field: str) -> Any:
    assert "errors" not in r, r
    return r["data"][field]


def test_usage(gql: Gql, ledger: None) -> None:
    q = """query($w: TimeWindow!, $m: UtilMetric, $g: Granularity){
      usage(window: $w, metric: $m, granularity: $g, groupBy: [ENVIRONMENT]) {
      periodStart environment project gpuHours effectiveGpuHours utilizationPct
      idleGpuHours energyKwh coveragePct metric } }"""
    aws, onprem = data(gql(q, {"w": W}), "usage")
    assert onprem == {
        "periodStart": None, "environment": "onprem", "project": None, "gpuHours": 2.0,
        "effectiveGpuHours": 0.5, "utilizationPct": 25.0, "idleGpuHours": 1.0, "energyKwh": 1.0,
        "coveragePct": 100.0, "metric": "SM_ACTIVE",
    }  # fmt: skip
    assert aws["gpuHours"] == round(2 / 7, 6) and aws["effectiveGpuHours"] == round(0.25 / 7, 6)
    assert aws["metric"] == "GPU_UTIL" and aws["energyKwh"] is None
    [total] = data(gql(q.replace("groupBy: [ENVIRONMENT]", ""), {"w": W, "m": "GPU_UTIL"}), "usage")
    assert total["metric"] == "GPU_UTIL" and total["effectiveGpuHours"] == round(1 + 0.25 / 7, 6)
    [mixed] = data(gql(q.replace("groupBy: [ENVIRONMENT]", ""), {"w": W}), "usage")
    assert mixed["metric"] == "SM_ACTIVE_ELSE_GPU_UTIL"
    only_alpha = q.replace("groupBy: [ENVIRONMENT]", 'filter: {project: ["alpha"], unallocated: false}')
    [alpha] = data(gql(only_alpha, {"w": W}), "usage")
    assert (alpha["gpuHours"], alpha["effectiveGpuHours"], alpha["energyKwh"]) == (1.0, 0.5, 1.0)
    hourly = data(gql(q, {"w": W, "g": "HOUR"}), "usage")
    assert [(r["periodStart"], r["environment"]) for r in hourly] == [
        ("2025-01-06T00:00:00+00:00", "aws"),
        ("2025-01-06T00:00:00+00:00", "onprem"),
        ("2025-01-06T01:00:00+00:00", "aws"),
        ("2025-01-06T01:00:00+00:00", "onprem"),
    ]


COST = """query($w: TimeWindow!, $p: IdlePolicy, $c: String){ cost(window: $w, groupBy: GROUP, idlePolicy: $p,
  currency: $c) { project environment unallocated cost { amount currency } idleCost { amount currency }
  sharedIdleCost { amount } gpuHours unpricedGpuHours rateSource } }"""


@pytest.mark.slow
def test_cost_per_currency_and_policies(gql: Gql, ledger: None) -> None:
    rows = data(gql(COST.replace("GROUP", "[PROJECT]"), {"w": W}), "cost")
    assert [(r["project"], r["unallocated"], r["cost"], r["rateSource"]) for r in rows] == [
        (None, True, {"amount": "2.000000001", "currency": "USD"}, "tco:site-1"),
        ("alpha", False, {"amount": "3.000000000", "currency": "USD"}, "tco:site-1"),
        ("beta", False, {"amount": "2.000000000", "currency": "EUR"}, "billing:aws"),
    ]
    for policy in ("SEPARATE", "SHARE_BY_USAGE", "SHARE_EVENLY"):
        for group in ("[]", "[PROJECT]", "[ENVIRONMENT, PROJECT]", "[DEVICE, USER]"):
            rows = data(gql(COST.replace("GROUP", group), {"w": W, "p": policy, "c": "USD"}), "cost")
            assert sum(D(r["cost"]["amount"]) for r in rows) == D("8.000000001"), (policy, group)
            assert {r["cost"]["currency"] for r in rows} == {"USD"}
    shared = data(
        gql(COST.replace("GROUP", "[PROJECT]"), {"w": W, "p": "SHARE_BY_USAGE", "c": "USD"}), "cost"
    )
    assert [(r["project"], r["cost"]["amount"], r["idleCost"]["amount"], r["sharedIdleCost"]["amount"])
            for r in shared] == [
        ("alpha", "4.000000001", "1.000000001", "1.000000001"),  # pool 2.000000001 split 3 : 3
        ("beta", "4.000000000", "2.500000000", "1.000000000"),  # 2 EUR → 3 USD, its own idle 1.5 USD
    ]  # fmt: skip


def test_cost_fx_errors(gql: Gql, ledger: None) -> None:
    late = {"start": at(0).isoformat(), "end": at(48).isoformat()}
    # no EUR rows after day 0: no rate needed for day 1
    assert data(gql(COST.replace("GROUP", "[]"), {"w": late, "c": "USD"}), "cost")
    r = gql(COST.replace("GROUP", "[]"), {"w": W, "c": "GBP"})
    assert r["errors"][0]["extensions"]["code"] == "UNKNOWN_CURRENCY" and r["data"] is None
    r = gql(COST.replace("GROUP", "[]"), {"w": W, "c": "dollars"})
    assert r["errors"][0]["extensions"]["code"] == "UNKNOWN_CURRENCY"


def test_cost_missing_fx_rate(gql: Gql, ledger: None, put) -> None:  # type: ignore[no-untyped-def]
    put([row(25, "MIG-b", "job-2", project="beta", cost="1", idle_cost="0", currency="EUR")])
    w = {"start": at(0).isoformat(), "end": at(48).isoformat()}
    [err] = gql(COST.replace("GROUP", "[]"), {"w": w, "c": "USD"})["errors"]
    assert err["extensions"] == {"code": "MISSING_FX_RATE"}
    assert "EUR/USD" in err["message"] and "2025-01-07" in err["message"]


def test_idle_waste(gql: Gql, ledger: None) -> None:
    q = """query($w: TimeWindow!, $t: Float, $m: UtilMetric){ idleWaste(window: $w, groupBy: [ENVIRONMENT],
      thresholdPct: $t, metric: $m) { environment idleGpuHours idleCost { amount currency }
      allocatedIdleGpuHours allocatedIdleCost { amount } unallocatedIdleGpuHours
      unallocatedIdleCost { amount }
      longestIdleStreakHours thresholdPct metric } }"""
    aws, onprem = data(gql(q, {"w": W}), "idleWaste")
    assert onprem == {
        "environment": "onprem", "idleGpuHours": 1.0,
        "idleCost": {"amount": "2.000000001", "currency": "USD"},
        "allocatedIdleGpuHours": 0.0, "allocatedIdleCost": {"amount": "0.000000000"},
        "unallocatedIdleGpuHours": 1.0, "unallocatedIdleCost": {"amount": "2.000000001"},
        "longestIdleStreakHours": 1, "thresholdPct": 5.0, "metric": "SM_ACTIVE",
    }  # fmt: skip
    assert aws["allocatedIdleGpuHours"] == round(1 / 7, 6) and aws["idleCost"]["currency"] == "EUR"
    at_25 = data(gql(q, {"w": W, "t": 50}), "idleWaste")
    assert [r["idleGpuHours"] for r in at_25] == [round(2 / 7, 6), 2.0]  # hist 25–50 counts below 50 %
    for t, m in ((3, None), (10, "GPU_UTIL")):
        [err] = gql(q, {"w": W, "t": t, "m": m})["errors"]
        assert err["extensions"]["code"] == "UNSUPPORTED_THRESHOLD", err


def test_effective_cost(gql: Gql, ledger: None) -> None:
    q = """query($w: TimeWindow!){ effectiveCost(window: $w) { environment gpuModel gpuHours
      effectiveGpuHours cost { amount currency } costPerGpuHour { amount currency }
      costPerEffectiveGpuHour { amount } metric } }"""
    aws, onprem = data(gql(q, {"w": W}), "effectiveCost")
    assert onprem == {
        "environment": "onprem", "gpuModel": "H200", "gpuHours": 2.0, "effectiveGpuHours": 0.5,
        "cost": {"amount": "5.000000001", "currency": "USD"},
        "costPerGpuHour": {"amount": "2.500000000", "currency": "USD"},  # 2.5000000005, half-even
        "costPerEffectiveGpuHour": {"amount": "10.000000002"}, "metric": "SM_ACTIVE",
    }  # fmt: skip
    assert aws["cost"] == {"amount": "2.000000000", "currency": "EUR"}
    assert D(aws["costPerEffectiveGpuHour"]["amount"]) >= D(aws["costPerGpuHour"]["amount"])
