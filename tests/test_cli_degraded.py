"""``gpu-ledger ingest`` of a billing connector: findings and refused cost in the summary, the largest
findings listed, exit 3 for a DEGRADED run unless ``--allow-degraded``; ``gpu-ledger connectors``
shows the last run's findings and why it is DEGRADED."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from billing.billing_fakes import FakeBillingSource
from typer.testing import CliRunner

import connectors.registry
from connectors.billing import BillingBatch, BillingFileError
from connectors.registry import ENTRY_POINT_GROUP, Registry
from connectors.sdk.billing import Finding
from service.cli import DEGRADED_EXIT, app

HEADER = "line_key,provider,charge_start,charge_end,charge_category,instance_type,usage_quantity,usage_unit,"
HEADER += "billed_cost,effective_cost,currency\n"
DAY = "2025-09-01T00:00:00Z,2025-09-02T00:00:00Z"
WINDOW = ["--start", "2025-09-01T00:00:00Z", "--end", "2025-10-01T00:00:00Z"]
FREQ = "not one of One-Time, Recurring, Usage-Based"


class FindingsSource(FakeBillingSource):
    """The fake CSV source; ``findings.json`` beside the files adds findings to them (by file name)."""

    def read(self, start: dt.datetime, end: dt.datetime) -> Iterator[BillingBatch | BillingFileError]:  # type: ignore[override]
        folder = Path(str(self.config.path))
        sidecar = folder / "findings.json"
        found = json.loads(sidecar.read_text()) if sidecar.exists() else []
        for path in sorted(folder.glob("*.csv")):
            item = self._file(path)
            if isinstance(item, BillingBatch):
                item.findings = [
                    Finding(str(path), f["rule"], f["column"], f["reason"], f["count"],
                            tuple((n, f["value"]) for n in f["lines"]))
                    for f in found if f["file"] == path.name
                ]  # fmt: skip
            yield item


@pytest.fixture
def exports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in list(os.environ):
        if var.startswith("GPU_LEDGER_"):
            monkeypatch.delenv(var)
    registry = Registry(
        [EntryPoint(name="qualitybills", value=f"{__name__}:FindingsSource", group=ENTRY_POINT_GROUP)],
        disabled=(),
    )
    monkeypatch.setattr(connectors.registry, "_default", registry)
    folder = tmp_path / "exports"
    folder.mkdir()
    (tmp_path / "c.toml").write_text(
        f'database_url = "sqlite:///{tmp_path / "l.db"}"\n[[connectors]]\nname = "bills"\n'
        f'type = "qualitybills"\npath = "{folder}"\n'
    )
    return folder


def ingest(folder: Path, *extra: str) -> tuple[int, str]:
    config = folder.parent / "c.toml"
    result = CliRunner().invoke(app, ["ingest", "bills", *WINDOW, *extra, "--config", str(config)])
    assert "Traceback" not in result.output
    return result.exit_code, result.stdout


def rows(*lines: str) -> str:
    return HEADER + "".join(line + "\n" for line in lines)


def line(key: str, billed: str = "10", currency: str = "USD") -> str:
    return f"{key},aws,{DAY},Usage,p5.48xlarge,24,Hrs,{billed},{billed},{currency}"


def finding(
    file: str, rule: str, column: str, count: int, *lines: int, value: str = "x"
) -> dict[str, object]:
    return {"file": file, "rule": rule, "column": column, "reason": FREQ, "count": count,
            "lines": list(lines), "value": value}  # fmt: skip


def test_findings_and_refused_cost_are_in_the_summary_and_the_largest_listed(exports: Path) -> None:
    (exports / "1.csv").write_text(rows(*(line(f"k{i}") for i in range(200))))
    sidecar = [finding("1.csv", "unknown_value", "ChargeFrequency", 7, 2, 3, 4, 5, 6)]
    sidecar += [finding("1.csv", f"rule_{n}", "Col", n, 9) for n in range(1, 6)]
    (exports / "findings.json").write_text(json.dumps(sidecar))
    code, out = ingest(exports)
    assert code == 0, out
    first, per_file, *rest = out.splitlines()
    assert first == (
        "bills: status=OK files=1 failed=0 read=200 accepted=200 refused=0 skipped=0 replaced=0 "
        "findings=22 refused_cost=0"
    )
    assert (
        per_file
        == f"  {exports / '1.csv'}: read=200 accepted=200 refused=0 skipped=0 findings=22 refused_cost=0"
    )
    path = exports / "1.csv"
    assert rest[:6] == [
        "  findings (rows imported although they break a rule; all in table data_quality_finding, query "
        "dataQuality), the largest 5:",
        f'    {path}, column "ChargeFrequency": {FREQ} — 7 row(s) (line 2, 3, 4, 5, 6, …) [unknown_value]',
        f'    {path}, column "Col": {FREQ} — 5 row(s) (line 9, …) [rule_5]',
        f'    {path}, column "Col": {FREQ} — 4 row(s) (line 9, …) [rule_4]',
        f'    {path}, column "Col": {FREQ} — 3 row(s) (line 9, …) [rule_3]',
        f'    {path}, column "Col": {FREQ} — 2 row(s) (line 9, …) [rule_2]',
    ]
    assert "[rule_1]" not in out


def test_a_degraded_import_exits_3_unless_allowed(exports: Path) -> None:
    # 1 of 3 rows refused (its currency is no ISO code): 33 % of the rows, 10 of 30 of the cost.
    (exports / "1.csv").write_text(rows(line("a"), line("b"), line("c", "10.50", "XYZ")))
    code, out = ingest(exports)
    assert code == DEGRADED_EXIT == 3, out
    first, reason = out.splitlines()[:2]
    assert first.startswith("bills: status=DEGRADED files=1 failed=0 read=3 accepted=2 refused=1 skipped=0")
    assert first.endswith(" findings=0 refused_cost=10.5")
    assert reason == (
        "  DEGRADED: refused 1 of 3 rows read (33.33 % > max_refused_rows_pct 1 %); refused rows cost 10.5 "
        "of 30.5 (34.43 % > max_refused_cost_pct 0.5 %) (what was accepted is imported; see the rejections)"
    )
    code, out = ingest(exports, "--allow-degraded")
    assert code == 0 and out.startswith("bills: status=DEGRADED "), out
    # The connector's own thresholds, from its [[connectors]] table.
    config = exports.parent / "c.toml"
    config.write_text(config.read_text() + "max_refused_rows_pct = 34\nmax_refused_cost_pct = 35\n")
    code, out = ingest(exports)
    assert code == 0 and out.startswith("bills: status=OK "), out
    config.write_text(config.read_text().replace("max_refused_cost_pct = 35", "max_refused_cost_pct = 34.4"))
    assert ingest(exports)[0] == 3  # 10.5 of 30.5 = 34.43 %


def test_a_file_whose_rows_are_all_refused_is_degraded(exports: Path) -> None:
    (exports / "1.csv").write_text(rows(*(line(f"k{i}") for i in range(1000))))
    (exports / "2.csv").write_text(rows(line("z", currency="EURO")))  # 1 of 1001 rows: 0.1 %
    code, out = ingest(exports)
    assert code == 3, out
    assert out.splitlines()[1] == (
        f"  DEGRADED: no row accepted from 1 file(s) that had rows: {exports / '2.csv'} (what was accepted "
        "is imported; see the rejections)"
    )


def test_connectors_shows_the_last_runs_findings_and_why_degraded(exports: Path) -> None:
    (exports / "1.csv").write_text(rows(line("a"), line("b", currency="XYZ")))
    (exports / "findings.json").write_text(json.dumps([finding("1.csv", "negative_usage", "Qty", 4, 2)]))
    assert ingest(exports)[0] == 3
    config = exports.parent / "c.toml"
    result = CliRunner().invoke(app, ["connectors", "--config", str(config)])
    assert result.exit_code == 0, result.output
    header, row = result.stdout.splitlines()[:2]
    assert header.split() == [
        "name",
        "type",
        "enabled",
        "status",
        "watermark",
        "findings",
        "last",
        "error",
        "notice",
    ]
    assert row.split()[:6] == ["bills", "qualitybills", "yes", "DEGRADED", "2025-10-01T00:00:00+00:00", "4"]
    assert "refused 1 of 2 rows read (50 % > max_refused_rows_pct 1 %)" in result.stdout
