"""Issue 5 end to end: point the config at billing exports, run ``gpu-ledger ingest``, and ``cost``
and ``reconciliation`` answer with the bill's own numbers (fixtures/README.md).

No metrics are ingested: every billed GPU-hour is unmonitored spend, so the ledger's cost per
provider is the bill's GPU-instance effective cost and reconciliation says NO_METRICS.
"""

from __future__ import annotations

import shutil
from decimal import Decimal
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from service.app import create_app
from service.cli import app
from service.db import make_engine
from service.settings import load_settings

FIXTURES = Path(__file__).parent.parent / "fixtures"
WINDOW = {"start": "2025-09-01T00:00:00Z", "end": "2025-10-01T00:00:00Z"}
AWS, GCP, AZURE = Decimal("32449.3144"), Decimal("1449.603467945205"), Decimal("69196.512")
CASES = [
    ("aws_cur", ["aws/cur2_2025-09_daily.csv"], {"aws": AWS}),
    ("aws_cur", ["aws/cur_legacy_2025-09_daily.csv"], {"aws": AWS}),
    ("gcp_billing", ["gcp/billing_export_resource_v1_2025-09.jsonl"], {"gcp": GCP}),
    ("azure_cost", ["azure/ea_amortized_cost_2025-09.csv"], {"azure": AZURE}),
    ("focus", ["focus/focus_1.1_multicloud_2025-09.csv"], {"aws": AWS, "gcp": GCP, "azure": AZURE}),
]


@pytest.mark.parametrize(("type_name", "files", "expected"), CASES, ids=[f[0] for _, f, _ in CASES])
def test_ingest_billing_then_cost_and_reconciliation(
    tmp_path: Path, type_name: str, files: list[str], expected: dict[str, Decimal]
) -> None:
    exports = tmp_path / "exports"
    exports.mkdir()
    for name in files:
        shutil.copy(FIXTURES / name, exports)
    config = tmp_path / "gpu-ledger.toml"
    config.write_text(
        f'database_url = "sqlite:///{tmp_path / "ledger.db"}"\n'
        f'[[connectors]]\nname = "bills"\ntype = "{type_name}"\npath = "{exports}"\n'
    )
    result = CliRunner().invoke(
        app, ["ingest", "bills", "--start", WINDOW["start"], "--end", WINDOW["end"], "--config", str(config)]
    )
    assert result.exit_code == 0, result.output

    settings = load_settings(config)
    engine = make_engine(settings.database_url)
    query = """query($w: TimeWindow!) {
      cost(window: $w, groupBy: [PROVIDER]) { provider cost { amount currency } }
      reconciliation(window: $w, groupBy: [PROVIDER]) {
        provider status billedGpuHours meteredGpuHours billedCost { amount } ledgerCost { amount } }
    }"""
    try:
        reader = settings.model_copy(update={"auth": settings.auth.with_anonymous_read()})
        with TestClient(create_app(reader, engine)) as client:
            reply = client.post("/graphql", json={"query": query, "variables": {"w": WINDOW}}).json()
    finally:
        engine.dispose()
    assert "errors" not in reply, reply
    cost = {r["provider"]: Decimal(r["cost"]["amount"]) for r in reply["data"]["cost"]}
    assert set(cost) == set(expected)
    for provider, amount in expected.items():
        # Rows are rounded to the ledger's 1e-9 one by one: GCP's 100 float costs add up within 1e-6.
        assert abs(cost[provider] - amount) <= Decimal("1e-6"), (provider, cost[provider], amount)
    gpu_rows = [r for r in reply["data"]["reconciliation"] if r["status"] == "NO_METRICS"]
    assert {r["provider"] for r in gpu_rows} == set(expected)
    for row in gpu_rows:
        assert row["meteredGpuHours"] == 0
        assert Decimal(row["ledgerCost"]["amount"]) == Decimal(row["billedCost"]["amount"])
