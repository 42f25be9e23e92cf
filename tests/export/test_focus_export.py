"""GET /export/focus.{csv,parquet} and ``gpu-ledger export focus`` on a hand-built ledger whose
FOCUS rows are computed here by hand: on-prem TCO rows in two currencies, a MIG slice, unallocated
time, an unpriced device, and cloud GPUs priced from bills (on demand, discounted, covered by a
savings plan). Totals are checked against GraphQL's ``cost`` with exact ``Decimal`` sums; scopes,
refusals and limits as the other exports'."""

from __future__ import annotations

import datetime as dt
import io
from collections import defaultdict
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pytest
from api.conftest import serve
from ledger_rows import at, row
from sqlalchemy import Engine
from typer.testing import CliRunner

from service.auth.tokens import TokenStore
from service.cli import app as cli_app
from service.models import BillingLine, GpuRate

W = {"start": at(0).isoformat(), "end": at(2).isoformat()}
MIG = 1 / 7
CLOUD = {
    "environment": "aws",
    "provider": "aws",
    "account": "111122223333",
    "region": "us-east-1",
    "instance_type": "p5.48xlarge",
    "gpu_model": "H100",
    "rate_source": "billing:cur",
}
#: Per instance: the bill's effective, billed and list rate per GPU-hour, and the row's cost.
BILLS = {
    "i-od": ("4", "4", "4", "4"),  # on demand: billed = effective = list
    "i-sp": ("3", "0", "4", "3"),  # covered by a savings plan: billed 0 (FOCUS), Committed
    "i-disc": ("3", "3.3", "4.5", "2"),  # a discount: billed 2 × 3.3/3, list 2 × 4.5/3
}


def _rate(instance: str, eff: str, billed: str, list_: str) -> GpuRate:
    return GpuRate(
        source_kind="billing", source_ref="cur", precedence=10, environment="aws", instance_id=instance,
        valid_from=at(0), valid_to=at(1), effective_per_gpu_hour=Decimal(eff),
        billed_per_gpu_hour=Decimal(billed), list_per_gpu_hour=Decimal(list_), currency="USD",
    )  # fmt: skip


@pytest.fixture
def ledger(put) -> None:  # type: ignore[no-untyped-def]
    rows: list[Any] = []
    for h in range(2):
        rows.append(row(h, "GPU-a", "job-a", project="alpha", team="ml", region="site-1", busy_s=1800.0,
                        idle_s=900.0, cost="2", idle_cost="0.5"))  # fmt: skip
        # A label on time nobody held (a stale namespace) is nobody's, as in every answer.
        rows.append(row(h, "GPU-free", region="site-1", idle_s=3600.0, cost="1.000000001",
                        idle_cost="1.000000001", namespace="stale"))  # fmt: skip
    rows.append(row(0, "MIG-m", "job-m", project="alpha", team="ml", region="site-1", gpu_fraction=MIG,
                    mig_profile="1g.18gb", cost="0.285714286", idle_cost="0"))  # fmt: skip
    rows.append(row(0, "GPU-e", "job-e", project="beta", team="web", region="site-eu", currency="EUR",
                    rate_source="tco:site-eu", cost="0.333333333", idle_cost="0"))  # fmt: skip
    rows.append(row(0, "GPU-u", "job-u", project="alpha", team="ml", currency=None, rate_source=None))
    for instance, (eff, billed, list_, cost) in BILLS.items():
        project, team = ("beta", "web") if instance == "i-sp" else ("alpha", "ml")
        rows.append(row(0, f"{instance}/gpu0", f"pod-{instance}", project=project, team=team,
                        instance_id=instance, cost=cost, idle_cost="0", **CLOUD))  # fmt: skip
        rows.append(_rate(instance, eff, billed, list_))
    rows.append(
        BillingLine(
            source="cur",
            source_file="cur.csv",
            line_no=1,
            line_key="k1",
            provider="aws",
            billing_account="999988887777",
            account="111122223333",
            charge_start=at(0),
            charge_end=at(1),
            charge_category="Usage",
            billed_cost=Decimal("4"),
            effective_cost=Decimal("4"),
            currency="USD",
            resource_id="i-od",
        )  # fmt: skip
    )
    put(rows)


@pytest.fixture
def app(engine: Engine, ledger: None) -> Iterator[tuple[str, dict[str, dict[str, str]]]]:
    store = TokenStore(engine)
    scopes = {
        "all": ["read"],
        "alpha": ["read:project:alpha"],
        "web": ["read:team:web"],
        "metrics": ["metrics"],
    }
    headers = {
        name: {"Authorization": f"Bearer {store.create(f'focus-{name}', s)[0]}"} for name, s in scopes.items()
    }
    for base in serve(engine, auth={}):
        yield base, headers


def get(base: str, path: str, params: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    r = httpx.get(f"{base}{path}", params=params, headers=headers, timeout=60)
    assert "Traceback" not in r.text
    return r


def csv_frame(r: httpx.Response) -> pl.DataFrame:
    assert r.status_code == 200, r.text
    return pl.read_csv(io.BytesIO(r.content), infer_schema=False)


def by_resource(frame: pl.DataFrame) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (x["ResourceName"] or x["ResourceId"], x["ChargePeriodStart"]): x for x in frame.iter_rows(named=True)
    }


def test_hand_computed_rows(app: tuple[str, dict[str, dict[str, str]]]) -> None:
    base, headers = app
    r = get(base, "/export/focus.csv", {**W, "focusVersion": "1.2"}, headers["all"])
    assert r.headers["content-disposition"] == 'attachment; filename="focus.csv"'
    frame = csv_frame(r)
    rows = by_resource(frame)
    h0, h1 = "2025-01-06T00:00:00Z", "2025-01-06T01:00:00Z"
    # GPU-u has no price: no row (a FOCUS cost may be neither null nor a placeholder 0).
    assert sorted(rows) == sorted(
        [("GPU-a", h0), ("GPU-a", h1), ("GPU-free", h0), ("GPU-free", h1), ("MIG-m", h0), ("GPU-e", h0),
         ("i-od/gpu0", h0), ("i-sp/gpu0", h0), ("i-disc/gpu0", h0)]
    )  # fmt: skip
    a = rows[("GPU-a", h1)]
    assert (a["ChargePeriodStart"], a["ChargePeriodEnd"]) == (h1, "2025-01-06T02:00:00Z")
    assert (a["BillingPeriodStart"], a["BillingPeriodEnd"]) == (
        "2025-01-01T00:00:00Z",
        "2025-02-01T00:00:00Z",
    )
    # On-prem: the site is provider, publisher, invoice issuer and billing account; TCO is every cost.
    assert {a[k] for k in ("ProviderName", "PublisherName", "InvoiceIssuerName", "BillingAccountId")} == {
        "site-1"
    }
    assert {a[k] for k in ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost")} == {"2.000000000"}
    assert (a["ResourceId"], a["ResourceName"], a["ResourceType"]) == ("GPU-a", None, "GPU")
    assert (a["PricingQuantity"], a["PricingUnit"], a["ListUnitPrice"]) == (
        "1.000000000",
        "GPU-Hours",
        "2.000000000",
    )
    assert (a["ChargeCategory"], a["ChargeClass"], a["ChargeFrequency"]) == ("Usage", None, "Usage-Based")
    assert (a["ServiceCategory"], a["ServiceSubcategory"], a["PricingCategory"]) == (
        "Compute",
        "Other (Compute)",
        "Standard",
    )
    assert a["Tags"] == '{"project":"alpha","team":"ml","workload":"job-a"}'
    assert (a["x_GpuHours"], a["x_EffectiveGpuHours"], a["x_IdleGpuHours"], a["x_IdleCost"]) == (
        "1.0",
        "0.5",
        "0.25",
        "0.500000000",
    )
    assert a["x_UtilizationMetric"] == "SM_ACTIVE"
    free = rows[("GPU-free", h0)]
    assert free["Tags"] is None and free["x_Namespace"] is None and free["EffectiveCost"] == "1.000000001"
    mig = rows[("MIG-m", h0)]
    # 1/7 GPU-hour at 2/GPU-hour: the quantity rounds to 1e-9 and price × quantity gives the cost back.
    assert (mig["PricingQuantity"], mig["ListUnitPrice"], mig["ResourceType"]) == (
        "0.142857143",
        "2.000000000",
        "GPU MIG Instance",
    )
    eur = rows[("GPU-e", h0)]
    assert (eur["BillingCurrency"], eur["ProviderName"], eur["EffectiveCost"]) == (
        "EUR",
        "site-eu",
        "0.333333333",
    )
    # Cloud: the bill's provider name, billing account and sub account, the instance as resource.
    od, sp, disc = rows[("i-od/gpu0", h0)], rows[("i-sp/gpu0", h0)], rows[("i-disc/gpu0", h0)]
    assert (od["ProviderName"], od["BillingAccountId"], od["SubAccountId"], od["ResourceId"]) == (
        "AWS",
        "999988887777",
        "111122223333",
        "i-od",
    )
    assert (od["ServiceName"], od["ServiceSubcategory"], od["RegionId"]) == (
        "Amazon Elastic Compute Cloud",
        "Virtual Machines",
        "us-east-1",
    )
    assert [od[k] for k in ("EffectiveCost", "BilledCost", "ListCost")] == ["4.000000000"] * 3
    assert [sp[k] for k in ("EffectiveCost", "BilledCost", "ListCost", "PricingCategory")] == [
        "3.000000000",
        "0.000000000",
        "4.000000000",
        "Committed",
    ]
    assert [disc[k] for k in ("EffectiveCost", "BilledCost", "ListCost", "PricingCategory")] == [
        "2.000000000",
        "2.200000000",
        "3.000000000",
        "Standard",
    ]


def gql_cost_by_currency(base: str, headers: dict[str, str]) -> dict[str, Decimal]:
    query = "query($w: TimeWindow!) { cost(window: $w) { cost { amount currency } } }"
    r = httpx.post(
        f"{base}/graphql", json={"query": query, "variables": {"w": W}}, headers=headers, timeout=60
    )
    body = r.json()
    assert "errors" not in body, body
    totals: dict[str, Decimal] = defaultdict(Decimal)
    for x in body["data"]["cost"]:
        totals[x["cost"]["currency"]] += Decimal(x["cost"]["amount"])
    return dict(totals)


def focus_totals(frame: pl.DataFrame) -> dict[str, Decimal]:
    totals: dict[str, Decimal] = defaultdict(Decimal)
    for currency, amount in frame.select("BillingCurrency", "EffectiveCost").iter_rows():
        totals[currency] += Decimal(amount)
    return dict(totals)


@pytest.mark.parametrize("version", ["1.0", "1.2"])
def test_totals_equal_graphql_cost(app: tuple[str, dict[str, dict[str, str]]], version: str) -> None:
    base, headers = app
    for who in ("all", "alpha", "web"):
        frame = csv_frame(get(base, "/export/focus.csv", {**W, "focusVersion": version}, headers[who]))
        graphql = gql_cost_by_currency(base, headers[who])
        graphql = {c: v for c, v in graphql.items() if c != "XXX" or v != 0}  # unpriced time costs 0
        assert focus_totals(frame) == graphql, who
    # By hand: USD 2×2 + 2×1.000000001 + 0.285714286 + 4 + 3 + 2; EUR 0.333333333.
    frame = csv_frame(get(base, "/export/focus.csv", {**W, "focusVersion": version}, headers["all"]))
    assert focus_totals(frame) == {"USD": Decimal("15.285714288"), "EUR": Decimal("0.333333333")}


def test_parquet_is_typed_and_equals_csv(app: tuple[str, dict[str, dict[str, str]]]) -> None:
    base, headers = app
    r = get(base, "/export/focus.parquet", W, headers["all"])
    assert r.status_code == 200 and r.headers["content-type"] == "application/vnd.apache.parquet"
    frame = pl.read_parquet(io.BytesIO(r.content))
    for money in ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost", "ListUnitPrice", "x_IdleCost"):
        assert frame.schema[money] == pl.Decimal(38, 9), money
    for instant in ("ChargePeriodStart", "ChargePeriodEnd", "BillingPeriodStart", "BillingPeriodEnd"):
        assert frame.schema[instant] == pl.Datetime("us", "UTC"), instant
    assert frame.schema["x_GpuHours"] == pl.Float64
    csv = csv_frame(get(base, "/export/focus.csv", W, headers["all"]))
    assert frame.columns == csv.columns
    assert [str(v) for v in frame["EffectiveCost"]] == csv["EffectiveCost"].to_list()
    assert frame["ChargePeriodStart"].min() == at(0) and frame.height == csv.height


def test_a_scoped_token_sees_only_its_rows(app: tuple[str, dict[str, dict[str, str]]]) -> None:
    base, headers = app
    alpha = csv_frame(get(base, "/export/focus.csv", W, headers["alpha"]))
    assert set(alpha["x_Project"]) == {"alpha"}
    assert sorted(alpha["ResourceName"].fill_null(alpha["ResourceId"])) == [
        "GPU-a", "GPU-a", "MIG-m", "i-disc/gpu0", "i-od/gpu0"
    ]  # fmt: skip
    web = csv_frame(get(base, "/export/focus.csv", W, headers["web"]))
    assert set(web["x_Team"]) == {"web"} and web.height == 2
    # A filter narrows within the scope, never beyond it.
    only = csv_frame(get(base, "/export/focus.csv", {**W, "project": "beta"}, headers["alpha"]))
    assert only.height == 0 and only.columns == alpha.columns


@pytest.mark.parametrize(
    ("params", "status", "code", "parameter"),
    [
        ({**W, "focusVersion": "2.0"}, 400, "INVALID_ARGUMENT", "focusVersion"),
        ({**W, "focusVersion": ""}, 400, "INVALID_ARGUMENT", "focusVersion"),
        (
            [*W.items(), ("focusVersion", "1.0"), ("focusVersion", "1.2")],
            400,
            "INVALID_ARGUMENT",
            "focusVersion",
        ),
        ({**W, "groupBy": "PROJECT"}, 400, "INVALID_ARGUMENT", "groupBy"),
        ({**W, "granularity": "DAY"}, 400, "INVALID_ARGUMENT", "granularity"),
        ({**W, "fields": "AvailabilityZone"}, 400, "INVALID_ARGUMENT", "fields"),
        ({**W, "fields": "DROP TABLE ledger_hour"}, 400, "INVALID_ARGUMENT", "fields"),
        ({"start": "2025-01-06T00:30:00Z", "end": W["end"]}, 400, "WINDOW_NOT_ALIGNED", "start"),
        ({"start": W["end"], "end": W["start"]}, 400, "INVALID_WINDOW", "end"),
        ({"start": W["start"], "end": "2027-01-06T00:00:00Z"}, 400, "WINDOW_TOO_LARGE", "end"),
        ({"start": "yesterday", "end": W["end"]}, 400, "INVALID_ARGUMENT", "start"),
        ({"end": W["end"]}, 400, "INVALID_ARGUMENT", "start"),
        ({"start": "2025-01-06T00:00:00", "end": W["end"]}, 400, "INVALID_WINDOW", "start"),
    ],
)
def test_refusals_name_the_parameter(
    app: tuple[str, dict[str, dict[str, str]]], params: Any, status: int, code: str, parameter: str
) -> None:
    base, headers = app
    r = get(base, "/export/focus.csv", params, headers["all"])
    assert (r.status_code, r.json()["code"], r.json()["parameter"]) == (status, code, parameter), r.text


def test_auth_formats_and_fields(app: tuple[str, dict[str, dict[str, str]]]) -> None:
    base, headers = app
    assert get(base, "/export/focus.csv", W).status_code == 401
    assert get(base, "/export/focus.csv", W, headers["metrics"]).status_code == 403
    r = get(base, "/export/focus.arrow", W, headers["all"])
    assert (r.status_code, r.json()["parameter"]) == (404, "format")
    r = get(base, "/export/focus.csv", {**W, "fields": "x_DeviceId,EffectiveCost"}, headers["all"])
    assert csv_frame(r).columns == ["x_DeviceId", "EffectiveCost"]


def test_the_row_cap_is_413(engine: Engine, ledger: None) -> None:
    for base in serve(engine, export_max_rows=8):
        r = get(base, "/export/focus.parquet", W)
        assert (r.status_code, r.json()["code"]) == (413, "RESULT_TOO_LARGE")


def run_cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli_app, ["export", "focus", *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def cli_env(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for var in list(os.environ):
        if var.startswith("GPU_LEDGER_"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("GPU_LEDGER_DATABASE_URL", engine.url.render_as_string(hide_password=False))


def test_the_command_writes_the_endpoints_file(
    engine: Engine, ledger: None, cli_env: None, tmp_path: Path
) -> None:
    w = ["--start", W["start"], "--end", W["end"]]
    cases = (("1.0", "csv"), ("1.2", "parquet"))
    served = {}
    for base in serve(engine):
        for version, fmt in cases:
            r = get(base, f"/export/focus.{fmt}", {**W, "focusVersion": version})
            assert r.status_code == 200
            served[version] = r.content
    for version, fmt in cases:
        out = tmp_path / f"focus-{version}.{fmt}"
        code, stdout, stderr = run_cli(*w, "--focus-version", version, "--format", fmt, "--output", str(out))
        assert code == 0, stderr
        assert stdout.startswith("focus: 9 rows")
        assert out.read_bytes() == served[version]
    code, _, stderr = run_cli(*w, "--focus-version", "1.1", "-o", str(tmp_path / "x.csv"))
    assert code == 2 and "--focus-version: focusVersion '1.1' is not one of 1.0, 1.2" in stderr
    assert not (tmp_path / "x.csv").exists()
    code, _, stderr = run_cli(*w, "-o", str(tmp_path / "x.arrow"))
    assert code == 2 and "--format 'arrow': use one of parquet, csv" in stderr
    code, _, stderr = run_cli(
        "--start", "2025-01-06T00:00:01Z", "--end", W["end"], "-o", str(tmp_path / "x.csv")
    )
    assert code == 2 and "error: --start: window start" in stderr and "not a whole UTC hour" in stderr
    code, _, stderr = run_cli(*w, "--group-by", "PROJECT", "-o", str(tmp_path / "x.csv"))
    assert code == 2 and "--group-by:" in stderr


def test_window_edges_are_charge_periods(app: tuple[str, dict[str, dict[str, str]]]) -> None:
    base, headers = app
    frame = csv_frame(get(base, "/export/focus.csv", {"start": at(1).isoformat(), "end": at(2).isoformat()},
                          headers["all"]))  # fmt: skip
    assert set(frame["ChargePeriodStart"]) == {at(1).strftime("%Y-%m-%dT%H:%M:%SZ")}
    assert sorted(frame["ResourceId"]) == ["GPU-a", "GPU-free"]
    assert dt.datetime.fromisoformat(frame["ChargePeriodEnd"][0]) == at(2)
