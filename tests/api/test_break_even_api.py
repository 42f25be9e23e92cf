"""breakEven over HTTP against the real app: the hand-computed case of
tests/analytics/test_break_even.py as GraphQL and as the break-even export (HTTP and CLI), scoped
tokens, hostile arguments, and the demo fleet (the issue's "done when").

The demo (``gpu-ledger serve --demo``), site ``dc1``, one model by hand — NVIDIA H100 80GB HBM3:

* fixed F = capex 40,000 / (4 years × 8,760 h) + opex 0.35 = 1.141552511… + 0.35 = **1.491552511** /h;
* energy k = 0.12 $/kWh × PUE 1.4 = **0.168 $/kWh**; the busy and idle draw come from the fit of the
  ledger's energy (the synthetic H100 draws 70 W without a process, +45 W with one, up to its 700 W
  TDP when busy): on the 2-day demo window about P_busy ≈ 700.7 W and P_idle ≈ 109.6 W, so
  busy energy ≈ 0.168 × 0.7007 = 0.1177 /h and idle ≈ 0.168 × 0.1096 = 0.0184 /h;
* p5.48xlarge on demand (catalog): R = 55.04 / 8 = **6.88** /GPU-h; the demo's 1-year savings plan
  38.528 / 8 = **4.816**; Azure ND96isr H100 v5 98.32 / 8 = **12.29**, its 1-year reservation
  62.24 / 8 = **7.78**, spot 19.664 / 8 = **2.458**; GCP a3-highgpu-8g 100.455184 / 8 = **12.556898**;
* with u ≈ 0.54 measured: a*(p5 on demand) = (1.491552511 + 0.0184) / (6.88 − 0.54 × 0.0993) ≈
  1.5100 / 6.8264 ≈ **22.1 %** — the H100s at ~86 % allocation sit far above it: owning wins; against
  spot (2.458) a* ≈ 1.5100 / 2.4044 ≈ **62.8 %**, still below the measured allocation.

The test asserts F and every R exactly, and every a* against this formula from the row's own
(rounded) parts; the demo's H200 has no public price (the catalog has none): its row says so.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal as D
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import client, serve
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger_rows import D0, at, row
from sqlalchemy import Engine
from typer.testing import CliRunner

from service.auth.tokens import TokenStore
from service.bootstrap import sync_config
from service.cli import app
from service.demo import load_demo, with_demo
from service.ledger.ingest import ingest_window
from service.models import FxRate
from service.settings import Settings

Put = Callable[[Iterable[Any]], None]
SITE = {
    "name": "dc9", "match_region": "dc9", "currency": "USD", "capex_per_gpu": {"H200": "43800"},
    "amortization_years": "5", "price_per_kwh": "0.10", "pue": "1.5", "opex_per_gpu_hour": "0.5",
}  # fmt: skip
OPTIONS = [{"name": "h200-3y", "provider": "aws", "gpu_model": "NVIDIA H200", "option": "3y",
            "price_per_gpu_hour": "2", "currency": "USD"}]  # fmt: skip
W = {"start": D0.isoformat(), "end": at(4).isoformat()}
FIELDS = """site gpuModel metric measuredAllocationPct measuredUtilizationPct allocationPct utilizationPct
    whatIf energyBasis busyPowerW idlePowerW ownFixed { amount currency }
    ownCostPerAllocatedGpuHour { amount }
    option rateSource rateSourceDetail instanceType rentCostPerGpuHour { amount currency }
    breakEvenAllocationPct outcome cheaperNow"""
QUERY = f"""query($w: TimeWindow!, $a: Float, $u: Float, $c: String) {{
    breakEven(window: $w, allocationPct: $a, utilizationPct: $u, currency: $c) {{ {FIELDS} }} }}"""


def hand_rows() -> list[Any]:
    def hour(h: int, workload: str, busy_s: float, watts: float) -> Any:
        return row(h, "GPU-h200", workload, region="dc9", busy_s=busy_s, energy_j=watts * 3600.0)

    fx = FxRate(base="EUR", quote="USD", day=D0.date(), rate=D("1.25"))
    return [hour(0, "", 0, 100), hour(1, "", 0, 100), hour(2, "j", 3600, 600), hour(3, "j", 0, 100), fx]


@pytest.fixture
def base(engine: Engine, put: Put, tmp_path: Path) -> Iterator[str]:
    put(hand_rows())
    catalog = tmp_path / "prices.csv"
    catalog.write_text(
        "# test catalog, version t1 (2026-11-30)\n"
        "provider,instance_type,region,price_per_instance_hour,currency,as_of,source\n"
        "aws,p5e.48xlarge,us-east-1,48.00,USD,2026-11-01,test\n"
    )
    yield from serve(engine, sites=[SITE], rent_options=OPTIONS, price_catalog_path=catalog)


def test_graphql_answer_is_the_hand_computed_one(base: str) -> None:
    body = client(base)(QUERY, {"w": W})
    assert "errors" not in body, body
    rows = {r["option"]: r for r in body["data"]["breakEven"]}
    assert set(rows) == {"COMMITMENT_3Y", "ON_DEMAND"}
    od = rows["ON_DEMAND"]
    assert od["site"] == "dc9" and od["gpuModel"] == "H200" and od["metric"] == "SM_ACTIVE"
    assert (od["measuredAllocationPct"], od["measuredUtilizationPct"], od["whatIf"]) == (50.0, 50.0, False)
    assert (od["energyBasis"], od["busyPowerW"], od["idlePowerW"]) == ("MEASURED", 600.0, 100.0)
    assert od["ownFixed"] == {"amount": "1.500000000", "currency": "USD"}
    assert od["ownCostPerAllocatedGpuHour"] == {"amount": "3.067500000"}
    assert od["rentCostPerGpuHour"] == {"amount": "6.000000000", "currency": "USD"}
    assert (od["breakEvenAllocationPct"], od["outcome"], od["cheaperNow"]) == (
        25.408805,
        "BREAKS_EVEN",
        "OWN",
    )
    assert od["rateSource"] == "CATALOG" and od["rateSourceDetail"].startswith("catalog t1 (2026-11-30)")
    assert rows["COMMITMENT_3Y"]["rateSource"] == "CONFIG"
    assert rows["COMMITMENT_3Y"]["breakEvenAllocationPct"] == 77.197452

    what_if = client(base)(QUERY, {"w": W, "a": 100, "u": 100, "c": "EUR"})["data"]["breakEven"]
    od = {r["option"]: r for r in what_if}["ON_DEMAND"]
    assert (od["allocationPct"], od["utilizationPct"], od["whatIf"]) == (100.0, 100.0, True)
    assert od["ownCostPerAllocatedGpuHour"] == {"amount": "1.272000000"}  # 1.59 USD / 1.25
    assert od["rentCostPerGpuHour"] == {"amount": "4.800000000", "currency": "EUR"}


@pytest.mark.parametrize(
    ("variables", "code"),
    [
        ({"a": 101}, "INVALID_ARGUMENT"),
        ({"u": -0.5}, "INVALID_ARGUMENT"),
        ({"a": 0}, "INVALID_ARGUMENT"),
        ({"c": "ZZZ"}, "UNKNOWN_CURRENCY"),
        ({"c": "not a currency"}, "UNKNOWN_CURRENCY"),
        ({"w": {"start": "2000-01-01T00:00:00Z", "end": "2030-01-01T00:00:00Z"}}, "WINDOW_TOO_LARGE"),
        ({"w": {"start": at(4).isoformat(), "end": D0.isoformat()}}, "INVALID_WINDOW"),
    ],
)
def test_hostile_arguments_are_named_errors(base: str, variables: dict[str, Any], code: str) -> None:
    body = client(base)(QUERY, {"w": W, **variables})
    assert body["data"] is None
    assert [e["extensions"]["code"] for e in body["errors"]] == [code], body


pcts = (
    st.none()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0.0, 1e-300, 5e-324, 100.0])
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    a=pcts,
    u=pcts,
    c=st.none() | st.sampled_from(["USD", "eur", "XXX", "ZZZ", ""]) | st.text(max_size=8),
    models=st.lists(st.text(max_size=20), max_size=3),
)
def test_any_arguments_answer_or_name_the_error(
    base: str, a: float | None, u: float | None, c: str | None, models: list[str]
) -> None:
    query = f"""query($w: TimeWindow!, $a: Float, $u: Float, $c: String, $m: [String!]) {{
        breakEven(window: $w, allocationPct: $a, utilizationPct: $u, currency: $c, filter: {{gpuModel: $m}})
        {{ {FIELDS} }} }}"""
    r = httpx.post(
        f"{base}/graphql",
        json={"query": query, "variables": {"w": W, "a": a, "u": u, "c": c, "m": models}},
        timeout=30,
    )
    assert r.status_code < 500 and "Traceback" not in r.text, r.text
    body = r.json()
    codes = {e["extensions"]["code"] for e in body.get("errors", [])}
    assert codes <= {"INVALID_ARGUMENT", "UNKNOWN_CURRENCY", "MISSING_FX_RATE"}, body
    for row_ in (body.get("data") or {}).get("breakEven") or []:
        assert (
            row_["ownCostPerAllocatedGpuHour"] is None
            or len(row_["ownCostPerAllocatedGpuHour"]["amount"]) < 30
        )


def test_the_export_equals_the_graphql_answer(base: str) -> None:
    query = {**W, "allocationPct": "80", "currency": "USD"}
    r = httpx.get(f"{base}/export/break-even.csv", params=query, timeout=30)
    assert r.status_code == 200, r.text
    rows = list(csv.DictReader(io.StringIO(r.text)))
    gql = client(base)(QUERY, {"w": W, "a": 80, "c": "USD"})["data"]["breakEven"]
    assert [(x["option"], x["rate_source"]) for x in rows] == [(g["option"], g["rateSource"]) for g in gql]
    for x, g in zip(rows, gql, strict=True):
        assert D(x["rent_cost_per_gpu_hour"]) == D(g["rentCostPerGpuHour"]["amount"])
        assert D(x["own_cost_per_allocated_gpu_hour"]) == D(g["ownCostPerAllocatedGpuHour"]["amount"])
        assert round(float(x["break_even_allocation_pct"]), 6) == g["breakEvenAllocationPct"]
        assert x["allocation_pct"] == "80.0" and x["what_if"] == "true"
    refused = httpx.get(f"{base}/export/break-even.csv", params={**W, "groupBy": "GPU_MODEL"}, timeout=30)
    assert refused.status_code == 400 and "groupBy" in refused.text
    bad = httpx.get(f"{base}/export/break-even.csv", params={**W, "utilizationPct": "nan"}, timeout=30)
    assert bad.status_code == 400 and "utilizationPct" in bad.text


def test_cli_export(engine: Engine, put: Put, tmp_path: Path) -> None:
    put(hand_rows())
    config = tmp_path / "ledger.toml"
    config.write_text(
        f'database_url = "{engine.url.render_as_string(hide_password=False)}"\n'
        '[[sites]]\nname = "dc9"\nmatch_region = "dc9"\ncurrency = "USD"\n'
        'capex_per_gpu = { H200 = "43800" }\n'
        'amortization_years = "5"\nprice_per_kwh = "0.10"\npue = "1.5"\nopex_per_gpu_hour = "0.5"\n'
        '[[rent_options]]\nname = "h200-3y"\nprovider = "aws"\ngpu_model = "NVIDIA H200"\noption = "3y"\n'
        'price_per_gpu_hour = "2"\ncurrency = "USD"\n'
    )
    out = tmp_path / "be.csv"
    args = [
        "export",
        "break-even",
        "--start",
        W["start"],
        "--end",
        W["end"],
        "-o",
        str(out),
        "--config",
        str(config),
    ]
    result = CliRunner().invoke(app, [*args, "--utilization-pct", "50"])
    assert result.exit_code == 0, result.output
    [line] = list(
        csv.DictReader(io.StringIO(out.read_text()))
    )  # the bundled catalog has no H200: the configured 3y only
    assert (line["option"], line["rent_cost_per_gpu_hour"], line["break_even_allocation_pct"]) == (
        "COMMITMENT_3Y", "2.000000000", "77.197452229"
    )  # fmt: skip
    bad = CliRunner().invoke(app, [*args, "--allocation-pct", "250"])
    assert bad.exit_code == 2 and "allocationPct" in bad.output and "Traceback" not in bad.output


def test_scoped_tokens_are_refused(engine: Engine, put: Put) -> None:
    put(hand_rows())
    store = TokenStore(engine)
    secrets = {
        s: store.create(f"be-{i}", [s])[0] for i, s in enumerate(("read:project:j", "read:team:ml", "read"))
    }
    for base_url in serve(engine, auth={}, sites=[SITE]):
        for scope, secret in secrets.items():
            r = httpx.post(
                f"{base_url}/graphql",
                json={"query": QUERY, "variables": {"w": W}},
                headers={"Authorization": f"Bearer {secret}"},
                timeout=30,
            )
            body = r.json()
            if scope == "read":
                assert body["data"]["breakEven"][0]["site"] == "dc9"
                continue
            assert body["data"] is None
            [error] = body["errors"]
            assert error["extensions"]["code"] == "FORBIDDEN"
            assert error["message"] == "breakEven is account-wide data: it needs the `read` scope"
            export = httpx.get(
                f"{base_url}/export/break-even.csv", params=W, headers={"Authorization": f"Bearer {secret}"}
            )
            assert export.status_code == 403 and "FORBIDDEN" in export.text


@pytest.mark.slow
def test_demo_fleet_break_even_per_model_and_option(engine: Engine) -> None:
    settings = with_demo(Settings(database_url=str(engine.url)))
    settings = settings.model_copy(
        update={"connectors": [settings.connectors[0].model_copy(update={"backfill_days": 2})]}
    )
    sync_config(engine, settings)
    now = dt.datetime(2026, 11, 3, tzinfo=dt.UTC)
    load_demo(engine, settings, ingest=ingest_window, now=now)
    window = {"start": (now - dt.timedelta(days=2)).isoformat(), "end": now.isoformat()}
    for base_url in serve(engine, sites=settings.sites, rent_options=settings.rent_options):
        gql = client(base_url)
        answer = gql(QUERY, {"w": window})
        assert "errors" not in answer, answer
        usage = gql(
            """query($w: TimeWindow!) { usage(window: $w, groupBy: [GPU_MODEL],
            filter: {environment: ["onprem"]}) { gpuModel gpuHours }
            allocated: usage(window: $w, groupBy: [GPU_MODEL],
            filter: {environment: ["onprem"], unallocated: false}) { gpuModel gpuHours } }""",
            {"w": window},
        )["data"]
    rows = answer["data"]["breakEven"]
    models = {r["gpuModel"] for r in rows}
    assert models == {"NVIDIA H100 80GB HBM3", "NVIDIA H200"}
    present = {u["gpuModel"]: u["gpuHours"] for u in usage["usage"]}
    allocated = {u["gpuModel"]: u["gpuHours"] for u in usage["allocated"]}
    for r in rows:  # the fleet's measured position: usage's allocated share
        assert r["measuredAllocationPct"] == pytest.approx(
            allocated[r["gpuModel"]] / present[r["gpuModel"]] * 100
        )
        assert 0 < r["measuredUtilizationPct"] < 100 and r["energyBasis"] == "MEASURED"
    h100 = {(r["option"], r["instanceType"]): r for r in rows if r["gpuModel"] == "NVIDIA H100 80GB HBM3"}
    rents = {k: D(r["rentCostPerGpuHour"]["amount"]) for k, r in h100.items()}
    assert rents == {
        ("ON_DEMAND", "p5.48xlarge"): D("6.88"),
        ("ON_DEMAND", "Standard_ND96isr_H100_v5"): D("12.29"),
        ("ON_DEMAND", "a3-highgpu-8g"): D("12.556898"),
        ("COMMITMENT_1Y", "p5.48xlarge"): D("4.816"),
        ("COMMITMENT_1Y", "Standard_ND96isr_H100_v5"): D("7.78"),
        ("SPOT", "Standard_ND96isr_H100_v5"): D("2.458"),
    }
    for r in h100.values():
        assert r["ownFixed"] == {"amount": "1.491552511", "currency": "USD"}
        k = D("0.168") / 1000  # $/Wh, PUE included
        busy, idle, u = (
            D(str(r["busyPowerW"])),
            D(str(r["idlePowerW"])),
            D(str(r["measuredUtilizationPct"])) / 100,
        )
        a_star = (D("1.491552511") + k * idle) / (
            D(r["rentCostPerGpuHour"]["amount"]) - u * k * (busy - idle)
        )
        assert r["outcome"] == "BREAKS_EVEN" and r["cheaperNow"] == "OWN"
        assert r["breakEvenAllocationPct"] == pytest.approx(float(a_star * 100), abs=1e-5)
        assert 0 < r["breakEvenAllocationPct"] < r["measuredAllocationPct"]
    [h200] = [r for r in rows if r["gpuModel"] == "NVIDIA H200"]
    assert (h200["rateSource"], h200["option"], h200["breakEvenAllocationPct"]) == ("NONE", None, None)
    assert "no catalog price" in h200["rateSourceDetail"]


def test_cli_table(engine: Engine, put: Put, tmp_path: Path) -> None:
    put(hand_rows())
    config = tmp_path / "ledger.toml"
    config.write_text(
        f'database_url = "{engine.url.render_as_string(hide_password=False)}"\n'
        '[[sites]]\nname = "dc9"\nmatch_region = "dc9"\ncurrency = "USD"\n'
        'capex_per_gpu = { H200 = "43800" }\n'
        'amortization_years = "5"\nprice_per_kwh = "0.10"\npue = "1.5"\nopex_per_gpu_hour = "0.5"\n'
        '[[rent_options]]\nname = "h200-3y"\nprovider = "aws"\ngpu_model = "NVIDIA H200"\noption = "3y"\n'
        'price_per_gpu_hour = "2"\ncurrency = "USD"\n'
    )
    args = ["break-even", "--start", W["start"], "--end", W["end"], "--config", str(config)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "dc9 H200: allocation 50.0% (measured 50.0%)" in result.output
    assert "COMMITMENT_3Y" in result.output and "77.20" in result.output and "3.0675" in result.output
    assert "source: rent option h200-3y" in result.output
    bare = config.read_text().split("[[rent_options]]")[0]  # no option: the H200 has no price at all
    config.write_text(bare)
    unpriced = CliRunner().invoke(app, args)
    assert "source: no catalog price, bill or [[rent_options]] entry for this GPU model" in unpriced.output
    for bad, option in (
        (["--utilization-pct", "101"], "--utilization-pct"),
        (["--currency", "ZZZ"], "--currency"),
    ):
        failed = CliRunner().invoke(app, [*args, *bad])
        assert failed.exit_code == 2 and option in failed.output and "Traceback" not in failed.output
