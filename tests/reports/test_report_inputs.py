"""Report periods (months and ISO weeks) and the CLI's refusals: one line naming the option, exit 2,
never a traceback."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from service.cli import app
from service.reports.period import PeriodError, month_of, parse_period, week_of

UTC = dt.UTC


def test_months_and_weeks() -> None:
    nov = parse_period("2026-11")
    assert (nov.kind, nov.start, nov.end, nov.days) == (
        "month", dt.datetime(2026, 11, 1, tzinfo=UTC), dt.datetime(2026, 12, 1, tzinfo=UTC), 30,
    )  # fmt: skip
    assert parse_period("2026-12").end == dt.datetime(2027, 1, 1, tzinfo=UTC)
    assert parse_period("2026-01").previous().label == "2025-12"
    w47 = parse_period("2026-w47")
    assert (w47.label, w47.start, w47.end) == (
        "2026-W47", dt.datetime(2026, 11, 16, tzinfo=UTC), dt.datetime(2026, 11, 23, tzinfo=UTC),
    )  # fmt: skip
    # ISO week 1 of 2021 starts on 4 January; 2020 has 53 weeks, 2021 has 52.
    assert parse_period("2021-W01").start == dt.datetime(2021, 1, 4, tzinfo=UTC)
    assert parse_period("2021-W01").previous().label == "2020-W53"
    with pytest.raises(PeriodError, match="W01 to W52"):
        parse_period("2021-W53")


@pytest.mark.parametrize(
    "text", ["2026-13", "9999-99", "2026-00", "2026-1", "26-11", "2026-W00", "2026-W54", "1969-12",
             "2026-11-01", "", "x" * 10_240, "2026-11 x", "２０２６-11"],
)  # fmt: skip
def test_bad_periods(text: str) -> None:
    with pytest.raises(PeriodError) as caught:
        parse_period(text)
    assert len(str(caught.value)) < 200  # never echoes a 10 KB argument


@given(st.dates(min_value=dt.date(1970, 1, 5), max_value=dt.date(9998, 12, 24)))
def test_periods_tile_time(day: dt.date) -> None:
    """Every day lies in exactly one month and one ISO week; each period parses from its label,
    and the next period starts where it ends."""
    for period in (month_of(day), week_of(day)):
        assert period.start.date() <= day < period.end.date()
        assert parse_period(period.label) == period
        assert period.next().start == period.end
        assert period.next().previous() == period


def _run(tmp_path: Path, *args: str) -> tuple[int, str]:
    config = tmp_path / "ledger.toml"
    config.write_text(f'database_url = "sqlite:///{tmp_path / "none.db"}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_LEDGER_")}
    result = CliRunner(env=env).invoke(app, ["report", *args, "--config", str(config)])
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--period", "2026-13", "--format", "csv"], "--period"),
        (["--period", "9999-99", "--format", "csv"], "--period"),
        (["--period", "2026-11", "--format", "pdf"], "--format"),
        (["--period", "2026-11"], "--format"),
        (["--period", "2026-11", "--format", "csv", "--project", "p" * 10_240], "--project"),
        (["--period", "2026-11", "--format", "csv", "--project", ""], "--project"),
        (["--period", "2026-11", "--format", "csv", "--team", "a\x1b[31mb"], "--team"),
        (["--period", "2026-11", "--format", "csv", "--project", "a", "--team", "b"], "--project"),
        (["--period", "2026-11", "--format", "csv", "--currency", "E" * 5000], "--currency"),
    ],
)
def test_cli_refusals_name_the_option(tmp_path: Path, args: list[str], option: str) -> None:
    code, output = _run(tmp_path, *args)
    assert code == 2, output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gpu-ledger: error: {option}"), output
    assert len(lines[0]) < 300 and "Traceback" not in output
    assert not (tmp_path / "none.db").exists()  # refused before touching the database


def test_cli_unknown_currency_on_a_database(tmp_path: Path, engine_url_sqlite: str) -> None:
    config = tmp_path / "ledger.toml"
    config.write_text(f'database_url = "{engine_url_sqlite}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_LEDGER_")}
    args = ["report", "--period", "2026-11", "--format", "csv", "--currency", "ZZZ", "--config", str(config)]
    result = CliRunner(env=env).invoke(app, args)
    assert result.exit_code == 2
    assert (
        result.output.strip()
        == "gpu-ledger: error: --currency: currency ZZZ appears in no FX rate and no ledger row"
    )


@pytest.fixture
def engine_url_sqlite(sqlite_url: str) -> str:
    return sqlite_url
