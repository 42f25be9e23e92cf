"""gcp_billing on broken exports: every bad row is refused naming file, line and column, the good
rows still land, and read == accepted + refused; an unreadable file is a BillingFileError and the
other files are still read."""

from __future__ import annotations

import datetime as dt
import gzip
import re
from decimal import Decimal
from pathlib import Path

from connectors.billing import BillingBatch, BillingFileError
from connectors.gcp_billing import GcpBillingConfig, GcpBillingConnector

FIXTURES = Path(__file__).parent.parent / "fixtures" / "gcp"
LINES = (FIXTURES / "billing_export_resource_v1_2025-09.jsonl").read_bytes().splitlines()
FLAT = (FIXTURES / "billing_export_resource_v1_2025-09_flat.csv").read_bytes().splitlines()
SEP = dt.datetime(2025, 9, 1, tzinfo=dt.UTC)
OCT = dt.datetime(2025, 10, 1, tzinfo=dt.UTC)


def read(tmp_path: Path) -> list:
    config = GcpBillingConfig(name="bills", type="gcp_billing", path=str(tmp_path))
    return list(GcpBillingConnector(config).read(SEP, OCT))


def test_bad_jsonl_rows_are_refused_by_line_and_column(tmp_path: Path) -> None:
    rows = list(LINES[:10])
    rows[1] = rows[1].replace(b'"cost":6.70176', b'"cost":"6,70"')  # line 2
    rows[2] = rows[2].replace(b'"amount":', b'"amount":-', 1)  # line 3 (A3 RAM): usage.amount negative
    rows[3] = rows[3].replace(b'"currency":"USD"', b'"currency":"USX"')  # line 4
    rows[4] = rows[4].replace(b"llm-research", b"llm-r\xffsearch")  # line 5: not UTF-8
    rows[5] = rows[5].replace(
        b'"usage_start_time":"2025-09-08 17:00:00 UTC"', b'"usage_start_time":"yesterday"'
    )
    rows.append(LINES[6])  # line 11: line 7 again
    rows.append(LINES[11][:300])  # line 12: a truncated last record
    (tmp_path / "export.jsonl").write_bytes(b"\n".join(rows) + b"\n")
    (batch,) = read(tmp_path)
    refused = {r.line: r for r in batch.refused}
    assert (batch.read, batch.lines.height, len(batch.refused)) == (12, 6, 6)
    assert batch.lines["line_no"].to_list() == [1, 3, 7, 8, 9, 10]
    file = str(tmp_path / "export.jsonl")
    assert {r.file for r in batch.refused} == {file}
    assert (refused[2].column, refused[2].reason) == ("cost", "not a number: '6,70'")
    assert (refused[4].column, refused[4].reason) == ("currency", "unknown currency code: 'USX'")
    assert (refused[5].column, refused[5].reason) == (None, "bytes that are not UTF-8")
    assert refused[6].column == "usage_start_time" and refused[6].reason.startswith("not a timestamp")
    assert (refused[11].column, refused[11].reason) == (None, "duplicated line: the same as line 7")
    assert (
        refused[12].reason.startswith("not JSON (truncated?)") and refused[12].raw == LINES[11][:300].decode()
    )
    # a refused row keeps its cost where it can be read (the run's refused-cost share)
    assert (refused[4].cost, refused[2].cost) == (Decimal("0.657534247"), None)
    # negative usage on a regular row is imported (the money is the bill's) and flagged, naming the
    # field as the export spells it
    (finding,) = batch.findings
    assert (finding.rule, finding.column, finding.count, finding.provider) == (
        "negative_usage",
        "usage.amount",
        1,
        "gcp",
    )
    assert finding.examples == ((3, "-7236160900300800.0"),)  # the value as written
    line3 = batch.lines.row(1, named=True)
    assert (line3["usage_quantity"], line3["list_cost"], line3["gpu_hours"]) == (1872, Decimal("5.273424"), 0)
    # kept: line 1 (H100 GPU), 3 (A3 RAM), 7 (A3 RAM), 8 (local SSD), 9 (GPU), 10 (A3 core)
    assert batch.lines["list_cost"].sum() == Decimal("189.592718247") + Decimal("5.273424")


def test_a_missing_field_refuses_the_file_and_the_next_file_is_still_read(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_bytes(b"\n".join(line.replace(b'"cost":', b'"kost":') for line in LINES[:4]))
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(b"\n".join(LINES[:4]))[:-20])  # truncated gzip
    (tmp_path / "c.jsonl").write_bytes(b"\n".join(LINES[:4]))
    batches = GcpBillingConnector(GcpBillingConfig(name="b", type="gcp_billing", path=str(tmp_path))).read(
        SEP, OCT
    )
    # Each unreadable file is yielded as its error (the SDK's one way) and the next file follows.
    missing, truncated, good = next(batches), next(batches), next(batches)
    assert isinstance(missing, BillingFileError)
    assert re.search(r'a\.jsonl, line 1, column "cost": missing column "cost"', str(missing))
    assert isinstance(truncated, BillingFileError)
    assert re.search(r"b\.jsonl\.gz: truncated or corrupt gzip stream", str(truncated))
    assert isinstance(good, BillingBatch)
    assert (good.source_file.endswith("c.jsonl"), good.read, good.lines.height) == (True, 4, 4)
    assert list(batches) == []


def test_bad_flat_csv_rows(tmp_path: Path) -> None:
    rows = list(FLAT[:10])  # the header, then G1's hours 16:00 (lines 2-5) and 17:00 (6-9), 18:00 (10)
    rows[2] = rows[2].replace(b",6.70176,USD,", b",,USD,")  # line 3: empty cost
    rows[3] = rows[3].replace(b"a3-train-01", b"a3-tr\xe9in-01", 1)  # line 4: Latin-1 byte
    rows[4] = rows[4].replace(b",0.0,[],", b',-1,"[{""amount"": ""x"", ""type"": ""PROMOTION""}]",')  # line 5
    rows[6] = rows[6].replace(b'"[{""key""', b'"{""key""', 1)  # line 7: labels not a list
    rows[7] = rows[7].replace(b",0.0,[],", b',0.0,"[{oops",')  # line 8
    rows[9] = rows[9][:120]  # line 10: truncated
    (tmp_path / "flat.csv").write_bytes(b"\n".join(rows) + b"\n")
    (batch,) = read(tmp_path)
    refused = {r.line: (r.column, r.reason) for r in batch.refused}
    assert (batch.read, batch.lines.height, len(batch.refused)) == (9, 4, 5)
    assert batch.lines["line_no"].to_list() == [2, 6, 7, 9]
    assert batch.lines["effective_cost"].sum() == Decimal("66.36") * 2 + Decimal("0.657534247") + Decimal(
        "6.70176"
    )
    assert refused[3] == ("cost", "empty where a number is required: ''")
    assert refused[4] == ("resource_name", "bytes that are not UTF-8")
    assert refused[5] == (
        "credits_json",
        """a credit amount that is not a number: '[{"amount": "x", "type": "PROMOTION"}]\'""",
    )
    assert refused[8] == ("credits_json", "credits are not a list of {name, amount, type} (JSON): '[{oops'")
    # the truncated record is refused (billing_io names it "fewer fields" where Polars reports the
    # missing fields as null; Polars 2.1 gives '' and the first empty required field is named)
    assert 10 in refused
    # labels that are not a list are dropped, the row imported and the finding names the file's column
    (finding,) = batch.findings
    assert (finding.rule, finding.column, finding.count) == ("unreadable_json", "labels_json", 1)
    assert finding.examples[0][0] == 7 and finding.examples[0][1].startswith('{"key":"team"')
    line7 = batch.lines.filter(batch.lines["line_no"] == 7).row(0, named=True)
    assert (line7["tags"], line7["instance_type"], line7["effective_cost"]) == (
        None,
        "a3-highgpu-8g",
        Decimal("6.70176"),
    )


def test_flat_csv_without_a_cost_column_is_refused_whole(tmp_path: Path) -> None:
    rows = [FLAT[0].replace(b",cost,", b",price,"), *FLAT[1:3]]
    (tmp_path / "flat.csv").write_bytes(b"\n".join(rows))
    [error] = read(tmp_path)
    assert isinstance(error, BillingFileError)
    assert re.search(r'flat\.csv, line 1, column "cost": missing column "cost"', str(error))
