"""Issue 11's "done when", end to end on the FinOps Foundation's FOCUS 1.0 sample
(tests/fixtures/public/focus, CC BY 4.0): ``gpu-ledger ingest`` imports it OK with its findings
counted, ``dataQuality`` lists them; the same file with every cost unreadable ends DEGRADED, exit 3."""

from __future__ import annotations

import csv
import gzip
import io
import os
import re
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient
from typer.testing import CliRunner

from service.app import create_app
from service.cli import app
from service.db import make_engine
from service.settings import load_settings

SAMPLE = Path(__file__).parents[1] / "fixtures" / "public" / "focus" / "focus_sample.csv.gz"
WINDOW = ["--start", "2024-09-01T00:00:00Z", "--end", "2024-10-01T00:00:00Z"]
QUERY = """query($w: TimeWindow!, $p: String) { dataQuality(window: $w, provider: $p) {
  rule column provider reason rows files examples { file line value } } }"""
W = {"start": "2024-09-01T00:00:00Z", "end": "2024-10-01T00:00:00Z"}


def _config(tmp_path: Path, path: Path) -> Path:
    config = tmp_path / "c.toml"
    config.write_text(
        f'database_url = "sqlite:///{tmp_path / "l.db"}"\n'
        f'[[connectors]]\nname = "focus"\ntype = "focus"\npath = "{path}"\n'
    )
    return config


def _ingest(config: Path) -> tuple[int, str]:
    runner = CliRunner(env={k: v for k, v in os.environ.items() if not k.startswith("GPU_LEDGER_")})
    result = runner.invoke(app, ["ingest", "focus", *WINDOW, "--config", str(config)])
    return result.exit_code, result.stdout


def _ask(config: Path, variables: dict[str, Any]) -> Any:
    settings = load_settings(config)
    reader = settings.model_copy(update={"auth": settings.auth.with_anonymous_read()})
    engine = make_engine(settings.database_url)
    try:
        with TestClient(create_app(reader, engine)) as client:
            reply = client.post("/graphql", json={"query": QUERY, "variables": variables}).json()
    finally:
        engine.dispose()
    assert "errors" not in reply, reply
    return reply["data"]["dataQuality"]


def test_the_focus_sample_imports_ok_and_its_findings_are_listed(tmp_path: Path) -> None:
    config = _config(tmp_path, SAMPLE)
    code, out = _ingest(config)
    assert code == 0, out
    assert out.startswith("focus: status=OK files=1 failed=0 read=1000 accepted=1000 refused=0 "), out
    found = re.search(r" findings=(\d+) refused_cost=0$", out.splitlines()[0])
    assert found is not None, out
    rules = _ask(config, {"w": W})
    assert sum(r["rows"] for r in rules) == int(found.group(1))
    # The 12 Azure rows with a negative ConsumedQuantity the issue found refused are imported, flagged.
    negative = [r for r in rules if r["rule"] == "negative_usage"]
    assert [(r["column"], r["provider"], r["rows"], r["files"]) for r in negative] == [
        ("ConsumedQuantity", "azure", 12, 1)
    ]
    assert [(e["line"], e["value"]) for e in negative[0]["examples"]] == [
        (956, "-0.001389000000000"), (961, "-0.000100000000000"), (963, "-0.001528156921268"),
        (964, "-0.000190000000000"), (965, "-1.000000000000000"),
    ]  # fmt: skip
    assert {e["file"] for e in negative[0]["examples"]} == {str(SAMPLE)}
    assert [r["rows"] for r in _ask(config, {"w": W, "p": "Azure"}) if r["rule"] == "negative_usage"] == [12]


def test_the_sample_with_every_cost_unreadable_is_degraded_and_exits_3(tmp_path: Path) -> None:
    with gzip.open(SAMPLE, "rt", encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle))[:21]
    column = rows[0].index("BilledCost")
    for row in rows[1:]:
        row[column] = "n/a"
    out_csv = io.StringIO()
    csv.writer(out_csv, lineterminator="\n").writerows(rows)
    path = tmp_path / "focus_unreadable.csv"
    path.write_text(out_csv.getvalue())
    code, out = _ingest(_config(tmp_path, path))
    assert code == 3, out
    first, reason = out.splitlines()[:2]
    assert first.startswith("focus: status=DEGRADED files=1 failed=0 read=20 accepted=0 refused=20 "), out
    assert reason.startswith("  DEGRADED: refused 20 of 20 rows read (100 % > max_refused_rows_pct 1 %); "), (
        out
    )
    assert f"no row accepted from 1 file(s) that had rows: {path}" in reason
