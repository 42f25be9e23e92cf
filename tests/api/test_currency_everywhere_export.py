"""The exports take the same `currency` (effective-cost, idle-waste) and `timeZone` (heatmap) as
GraphQL and give the same numbers: the hand-computed ledger of test_currency_everywhere, over
HTTP (CSV, Parquet) and through `gpu-ledger export`; hostile parameters are 400s naming them."""

from __future__ import annotations

import io
from decimal import Decimal
from pathlib import Path

import httpx
import polars as pl
import pytest
from api.conftest import serve
from api.test_currency_everywhere import W, ledger  # noqa: F401  (fixture)
from sqlalchemy import Engine
from typer.testing import CliRunner

from service.cli import app

D = Decimal
PARAMS = [("start", W["start"]), ("end", W["end"])]


def _get(base: str, name: str, params: list[tuple[str, str]]) -> httpx.Response:
    return httpx.get(f"{base}/export/{name}", params=[*PARAMS, *params], timeout=30)


@pytest.fixture
def base(engine: Engine, ledger: None) -> str:  # noqa: F811
    yield from serve(engine)


def test_effective_cost_and_idle_waste_exports_convert(base: str) -> None:
    r = _get(base, "effective-cost.csv", [("currency", "USD"), ("groupBy", "ENVIRONMENT")])
    assert r.status_code == 200, r.text
    frame = pl.read_csv(io.BytesIO(r.content), infer_schema=False)
    assert frame.select("environment", "currency", "cost", "cost_per_effective_gpu_hour").rows() == [
        ("aws", "USD", "6.000000000", "4.000000000"),
        ("azure", "USD", "4.600000000", "2.300000000"),
        ("onprem", "USD", "28.500000000", "19.000000000"),
    ]
    r = _get(base, "idle-waste.parquet", [("currency", "EUR"), ("groupBy", "ENVIRONMENT")])
    assert r.status_code == 200, r.text
    idle = pl.read_parquet(io.BytesIO(r.content))
    assert idle.select("environment", "currency", "idle_cost").rows() == [
        ("aws", "EUR", D("0.909090909")),
        ("azure", "EUR", D(0)),
        ("onprem", "EUR", D(11)),
    ]


def test_heatmap_export_equals_graphql(base: str) -> None:
    r = _get(base, "heatmap.csv", [("timeZone", "Europe/Berlin"), ("currency", "USD")])
    assert r.status_code == 200, r.text
    frame = pl.read_csv(io.BytesIO(r.content), infer_schema=False)
    assert frame.height == 168 and frame.columns[0] == "period_start"
    gql = httpx.post(
        f"{base}/graphql",
        json={
            "query": """query($w: TimeWindow!) { heatmap(window: $w, timeZone: "Europe/Berlin",
              currency: "USD") { hourOfWeek windowHours gpuHours utilizationPct
              idleCost { amount currency } } }""",
            "variables": {"w": W},
        },
        timeout=30,
    ).json()["data"]["heatmap"]
    for row, cell in zip(frame.iter_rows(named=True), gql, strict=True):
        assert int(row["hour_of_week"]) == cell["hourOfWeek"]
        assert int(row["window_hours"]) == cell["windowHours"]
        assert round(float(row["gpu_hours"]), 6) == cell["gpuHours"]
        money = [(row["idle_cost"], row["currency"])] if row["currency"] else []
        assert money == [(m["amount"], m["currency"]) for m in cell["idleCost"]]
    # Mon 01:00 Berlin = Mon 00:00 UTC: GPU-eu, GPU-eu2, GPU-us, GPU-az; idle 9 EUR × 1.1 + 1 USD.
    mon01 = frame.row(1, named=True)
    assert (mon01["gpu_hours"], mon01["idle_cost"], mon01["currency"]) == ("4.0", "10.900000000", "USD")


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ([("timeZone", "Mars/Olympus")], "timeZone"),
        ([("timeZone", "../../etc/passwd")], "timeZone"),
        ([], "timeZone"),
        ([("timeZone", "UTC"), ("groupBy", "PROJECT")], "groupBy"),
        ([("timeZone", "UTC"), ("currency", "usd'; drop table fx_rate; --")], "currency"),
        ([("timeZone", "UTC"), ("granularity", "DAY")], "granularity"),
    ],
)
def test_hostile_heatmap_parameters(base: str, params: list[tuple[str, str]], parameter: str) -> None:
    r = _get(base, "heatmap.csv", params)
    assert r.status_code == 400, r.text
    assert "Traceback" not in r.text and parameter in r.text


def test_cli_writes_the_same_heatmap(engine: Engine, ledger: None, tmp_path: Path, base: str) -> None:  # noqa: F811
    out = tmp_path / "heatmap.csv"
    url = engine.url.render_as_string(hide_password=False)
    result = CliRunner().invoke(
        app,
        ["export", "heatmap", "--start", W["start"], "--end", W["end"], "--time-zone", "Europe/Berlin",
         "--currency", "EUR", "--output", str(out)],
        env={"GPU_LEDGER_DATABASE_URL": url},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    http = _get(base, "heatmap.csv", [("timeZone", "Europe/Berlin"), ("currency", "EUR")])
    assert out.read_bytes() == http.content
    bad = CliRunner().invoke(
        app,
        ["export", "heatmap", "--start", W["start"], "--end", W["end"], "--time-zone", "x" * 10_000,
         "--output", str(out)],
        env={"GPU_LEDGER_DATABASE_URL": url},
    )  # fmt: skip
    assert bad.exit_code != 0 and "--time-zone" in bad.output and len(bad.output) < 2_000


@pytest.mark.parametrize(
    ("zone", "currency", "code"),
    [
        ("Mars/Olympus", None, "INVALID_ARGUMENT"),
        ("x" * 10_000, None, "INVALID_ARGUMENT"),
        ("../../etc/passwd", None, "INVALID_ARGUMENT"),
        ("Europe/Berlin\x00", None, "INVALID_ARGUMENT"),
        ("Europe/Berlin", "usd'; drop table fx_rate; --", "UNKNOWN_CURRENCY"),
        ("Europe/Berlin", "GBP", "UNKNOWN_CURRENCY"),
    ],
)
def test_hostile_heatmap_arguments_over_graphql(
    base: str, zone: str, currency: str | None, code: str
) -> None:
    r = httpx.post(
        f"{base}/graphql",
        json={
            "query": "query($w: TimeWindow!, $z: String!, $c: String) { heatmap(window: $w, timeZone: $z, "
            "currency: $c) { hourOfWeek } }",
            "variables": {"w": W, "z": zone, "c": currency},
        },
        timeout=30,
    )
    assert r.status_code == 200 and "Traceback" not in r.text
    body = r.json()
    assert body["data"] is None
    [error] = body["errors"]
    assert error["extensions"]["code"] == code and len(error["message"]) < 300, error
