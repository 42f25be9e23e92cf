"""One row dated far from its bill cannot make re-pricing explode (issue 9): a GCP export whose
first row starts in 2015 or on 0001-01-01, or ends in 9999, imports the other 99 rows and writes
the same 28 ledger hours as the clean export (before: 87,884 rows for a 2015 start; 136 s and
9.5 GB for 0001-01-01)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from service.cli import app
from service.db import make_engine

EXPORT = Path(__file__).parents[1] / "fixtures" / "gcp" / "billing_export_resource_v1_2025-09.jsonl"
WINDOW = ["--start", "2025-09-01T00:00:00Z", "--end", "2025-10-01T00:00:00Z"]


@pytest.mark.parametrize(
    ("field", "value", "refused"),
    [
        (None, None, None),
        ("usage_start_time", "2015-09-08 16:00:00 UTC", "starts before its invoice month by more than 1 day"),
        ("usage_start_time", "0001-01-01 00:00:00 UTC", "outside 2000-01-01..2100-01-01: not a billing date"),
        ("usage_end_time", "9999-12-31 00:00:00 UTC", "outside 2000-01-01..2100-01-01: not a billing date"),
    ],
    ids=["clean", "start-2015", "start-0001", "end-9999"],
)
def test_a_far_dated_row_is_refused_and_the_ledger_is_what_the_clean_bill_gives(
    tmp_path: Path, field: str | None, value: str | None, refused: str | None
) -> None:
    records = [json.loads(line) for line in EXPORT.read_text().splitlines()]
    if field is not None:
        records[0][field] = value
    (tmp_path / "g.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    config = tmp_path / "c.toml"
    config.write_text(
        f'database_url = "sqlite:///{tmp_path / "l.db"}"\n[[connectors]]\nname = "g"\ntype = "gcp_billing"\n'
        f'path = "{tmp_path / "g.jsonl"}"\n'
    )
    runner = CliRunner(env={k: v for k, v in os.environ.items() if not k.startswith("GPU_LEDGER_")})
    result = runner.invoke(app, ["ingest", "g", *WINDOW, "--config", str(config)])
    # The refused row's cost is above max_refused_cost_pct (0.5 %) of the bill: DEGRADED, exit 3.
    assert result.exit_code == (0 if refused is None else 3), result.stdout
    counts = "read=100 accepted=100 refused=0" if refused is None else "read=100 accepted=99 refused=1"
    assert counts in result.stdout.splitlines()[0]
    engine = make_engine(f"sqlite:///{tmp_path / 'l.db'}")
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM ledger_hour")).scalar_one() == 28
            span = conn.execute(text("SELECT min(hour_start), max(hour_start) FROM ledger_hour")).one()
            rejections = list(conn.execute(text("SELECT line, field, reason FROM rejection")))
    finally:
        engine.dispose()
    assert str(span[0]).startswith("2025-09") and str(span[1]).startswith("2025-09")
    if refused is None:
        assert rejections == []
    else:
        assert [tuple(r) for r in rejections] == [(1, field, f"{refused}: {value!r}")]
