"""After `gpu-ledger prune`, `gpu-ledger export` and `GET /export/...` refuse a device-level answer
over pruned hours (HOURS_PRUNED, naming the boundary) as GraphQL does, instead of writing a file of
the hours that are left; what the group rollups answer exactly is still written
(tests/pruned_ledger.py: 2025-01-31 20:00 – 2025-02-01 04:00, January pruned).
"""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl
import pytest
from api.conftest import serve
from export.helpers import export
from pruned_ledger import write_pruned
from sqlalchemy import Engine
from typer.testing import CliRunner

from service.cli import app

MID_DAY = ["--start", "2025-01-31T20:00:00Z", "--end", "2025-02-01T04:00:00Z"]
FROM_BOUNDARY = ["--start", "2025-02-01T00:00:00Z", "--end", "2025-02-01T04:00:00Z"]


@pytest.fixture
def pruned(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in list(os.environ):
        if var.startswith("GPU_LEDGER_"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("GPU_LEDGER_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    write_pruned(engine)


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["export", *args])
    return result.exit_code, result.stdout, result.stderr


def _costs(path: Path, key: str) -> list[tuple[str, str, str]]:
    frame = pl.read_csv(path, infer_schema=False)
    return sorted((r[key] or "", r["currency"], r["cost"]) for r in frame.iter_rows(named=True))


def test_the_cli_refuses_a_device_answer_over_pruned_hours(pruned: None, tmp_path: Path) -> None:
    out = tmp_path / "by_device.csv"
    code, stdout, stderr = run("cost", *MID_DAY, "--group-by", "DEVICE", "-o", str(out))
    assert code == 1, (stdout, stderr)
    assert (
        "HOURS_PRUNED" in stderr
        and "2025-01-31T20:00Z" in stderr
        and "before 2025-02-01 were pruned" in stderr
    )
    assert "Traceback" not in stderr + stdout
    assert not out.exists() and list(tmp_path.iterdir()) == []  # no file of the hours left
    # HOUR × DEVICE (the day segments' path) too
    code, _, stderr = run("usage", *MID_DAY, "--granularity", "HOUR", "--group-by", "DEVICE", "-o", str(out))
    assert code == 1 and "HOURS_PRUNED" in stderr


def test_the_cli_still_writes_what_the_rollups_answer(pruned: None, tmp_path: Path) -> None:
    by_project = tmp_path / "by_project.csv"
    code, _, stderr = run("cost", *MID_DAY, "--group-by", "PROJECT", "-o", str(by_project))
    assert code == 0, stderr
    assert _costs(by_project, "project") == [("", "EUR", "20.000000000"), ("alpha", "USD", "8.000000008")]
    by_device = tmp_path / "by_device.csv"
    code, _, stderr = run("cost", *FROM_BOUNDARY, "--group-by", "DEVICE", "-o", str(by_device))
    assert code == 0, stderr
    assert _costs(by_device, "device") == [("GPU-a", "USD", "4.000000004"), ("GPU-b", "EUR", "10.000000000")]


def test_the_http_export_says_hours_pruned(engine: Engine, pruned: None) -> None:
    window = [("start", "2025-01-31T20:00:00Z"), ("end", "2025-02-01T04:00:00Z")]
    for base in serve(engine):
        refused = export(base, "cost", "csv", [*window, ("groupBy", "DEVICE")])
        assert refused.status_code == 400, refused.text
        body = refused.json()
        assert body["code"] == "HOURS_PRUNED" and "before 2025-02-01 were pruned" in body["error"]
        answered = export(base, "cost", "csv", [*window, ("groupBy", "PROJECT")])
        assert answered.status_code == 200, answered.text


def test_break_even_refuses_too(engine: Engine, pruned: None, tmp_path: Path) -> None:
    """`gpu-ledger break-even` reads device-level hours (per owned GPU) as the export does."""
    config = tmp_path / "ledger.toml"
    config.write_text(
        f'database_url = "{engine.url.render_as_string(hide_password=False)}"\n'
        '[[sites]]\nname = "dc9"\nmatch_region = "dc9"\ncurrency = "USD"\n'
        'capex_per_gpu = { H200 = "43800" }\n'
        'amortization_years = "5"\nprice_per_kwh = "0.10"\npue = "1.5"\nopex_per_gpu_hour = "0.5"\n'
    )
    result = CliRunner().invoke(app, ["break-even", *MID_DAY, "--config", str(config)])
    assert result.exit_code == 1, result.output
    assert "HOURS_PRUNED" in result.output and "before 2025-02-01 were pruned" in result.output
    assert "Traceback" not in result.output
