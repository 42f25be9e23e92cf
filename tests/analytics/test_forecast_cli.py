"""``gpu-ledger forecast`` (the flat table) and ``gpu-ledger export demand-capacity`` on a real database.

The ledger: 14 days (D0 = Monday) of one project holding one GPU 10 hours a day, 10 USD a day,
and the GPU free the other 14 hours.
"""

from __future__ import annotations

import io
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from ledger_rows import at, row
from sqlalchemy import Engine
from typer.testing import CliRunner

from service.analytics.forecast_frame import level_name
from service.cli import app

DAYS = 14
START, END = at(0).isoformat(), at(24 * DAYS).isoformat()


@pytest.fixture
def ledger(put, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    rows = []
    for day in range(DAYS):
        for hour in range(24):
            held = hour < 10
            rows.append(
                row(day * 24 + hour, "GPU-a", "job" if held else "", project="p" if held else None, cost="1")
            )
    put(rows)
    monkeypatch.setenv("GPU_LEDGER_DATABASE_URL", str(engine.url.render_as_string(hide_password=False)))


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_forecast_csv_to_stdout(ledger: None) -> None:
    code, out, err = run(
        "forecast", "--start", START, "--end", END, "--horizon-days", "3", "--group-by", "PROJECT"
    )
    assert code == 0, err
    frame = pl.read_csv(io.StringIO(out), infer_schema=False)
    bounds = ["lower_80", "upper_80", "lower_95", "upper_95"]
    assert frame.columns == ["day", "project", "measure", "currency", "model", "value", *bounds]
    p = frame.filter(pl.col("project") == "p")
    assert p["measure"].to_list() == ["gpu_hours"] * 3 + ["effective_gpu_hours"] * 3 + ["cost"] * 3
    cost = p.filter(pl.col("measure") == "cost")
    # 10 GPU-hours and 10 USD every day: a constant, forecast as that constant to the nano.
    assert cost["value"].to_list() == ["10.000000000"] * 3 and cost["currency"].to_list() == ["USD"] * 3
    assert cost["model"].to_list() == ["CONSTANT"] * 3
    assert frame["day"].str.starts_with(at(24 * DAYS).date().isoformat()).any()
    pool = frame.filter(pl.col("project").is_null() & (pl.col("measure") == "gpu_hours"))
    assert [Decimal(v) for v in pool["value"]] == [Decimal(14)] * 3


def test_forecast_parquet_and_levels(ledger: None, tmp_path: Path) -> None:
    out = tmp_path / "f.parquet"
    code, _, err = run(
        "forecast", "--start", START, "--end", END, "--level", "97.5", "--format", "parquet", "-o", str(out)
    )
    assert code == 0, err
    frame = pl.read_parquet(out)
    assert f"upper_{level_name(97.5)}" in frame.columns and frame.schema["value"] == pl.Decimal(38, 9)
    assert frame.height == 3 * 28  # one group, three measures (hours, effective, USD cost), 28 days


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--horizon-days", "0"), "horizonDays must be between 1 and 92"),
        (("--horizon-days", "1000000000"), "horizonDays"),
        (("--group-by", "NOPE"), "groupBy"),
        (("--currency", "ZZZ"), "UNKNOWN_CURRENCY"),
        (("--level", "100"), "strictly between 0 and 100"),
        (("--filter", "project"), "KEY=VALUE"),
        (("--format", "xlsx"), "--format"),
    ],
)
def test_forecast_refusals_exit_2_with_one_line(ledger: None, args: tuple[str, ...], message: str) -> None:
    code, _, err = run("forecast", "--start", START, "--end", END, *args)
    assert code == 2 and message in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1


def test_forecast_window_not_midnight(ledger: None) -> None:
    code, _, err = run("forecast", "--start", at(1).isoformat(), "--end", END)
    assert code == 2 and "UTC midnight" in err, err


def test_export_demand_capacity(ledger: None, tmp_path: Path) -> None:
    out = tmp_path / "cap.csv"
    code, _, err = run(
        "export", "demand-capacity", "--start", START, "--end", END, "--granularity", "DAY", "-o", str(out)
    )
    assert code == 0, err
    frame = pl.read_csv(out)
    assert frame.columns[:3] == ["period_start", "environment", "gpu_model"]
    assert frame.height == DAYS
    assert frame["installed_gpu_hours"].to_list() == [24.0] * DAYS
    assert frame["allocated_gpu_hours"].to_list() == [10.0] * DAYS
    assert frame["saturated_hours"].to_list() == [10] * DAYS  # one GPU, held 10 hours a day
