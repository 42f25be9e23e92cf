"""Bad billing files, through ``gpu-ledger ingest``: the exact outcome of each.

Every case is a small file made here from the header and first rows of a real fixture export
(tests/fixtures), with one fault. Each asserts the exit status, the summary counts (read, accepted,
refused), every rejection row (file, line, field, reason) and that nothing else was written (the
``billing_line`` rows and their lines). Line numbers are physical lines, the header being line 1.
A migrated database is made once and copied per case, so the corpus stays fast.
"""

# ruff: noqa: E501  (the case table keeps each expected message on one line, as it is printed)
from __future__ import annotations

import csv
import gzip
import io
import json
import os
import shutil
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from service.cli import DEGRADED_EXIT, app
from service.db import make_engine, migrate

FIXTURES = Path(__file__).parents[1] / "fixtures"
WINDOW = ["--start", "2025-09-01T00:00:00Z", "--end", "2025-10-01T00:00:00Z"]
END_INSIDE = "the file ends inside a quoted field opened on this line (truncated, or an unbalanced quote)"
GZIP_CUT = (
    "truncated or corrupt gzip stream (Compressed file ended before the end-of-stream marker was reached)"
)
GLOBAL_NAME = (
    'missing column "resource_global_name": a resource-level export names each resource by it (the header is'
    " line 1)"
)
BAD_PERIOD = (
    "not a billing period: it must lie in 2000-01-01..2100-01-01, end after it starts and last 31 days at"
    " most: '2025-09-01T00:00:00Z'"
)
MISQUOTED = "a quote inside a field that is not quoted as RFC 4180 writes it (an unbalanced quote?)"


def table(name: str, rows: int = 3) -> tuple[list[str], list[dict[str, str]]]:
    """The header and first ``rows`` records of a fixture CSV (a byte-order mark dropped)."""
    with (FIXTURES / name).open(encoding="utf-8-sig", newline="") as handle:
        records = list(csv.reader(handle))
    header = records[0]
    return header, [dict(zip(header, r, strict=True)) for r in records[1 : rows + 1]]


def render(header: list[str], rows: list[dict[str, str]], *, crlf: bool = False) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n" if crlf else "\n")
    writer.writerow(header)
    writer.writerows([[r.get(c, "") for c in header] for r in rows])
    return out.getvalue().encode()


CUR2, LEGACY = "aws/cur2_2025-09_daily.csv", "aws/cur_legacy_2025-09_daily.csv"
AZURE, FOCUS = "azure/ea_amortized_cost_2025-09.csv", "focus/focus_1.1_multicloud_2025-09.csv"
GCP_CSV, GCP_JSONL = (
    "gcp/billing_export_resource_v1_2025-09_flat.csv",
    "gcp/billing_export_resource_v1_2025-09.jsonl",
)


def cur2(edit: Callable[[list[dict[str, str]]], None] | None = None, **options: bool) -> bytes:
    header, rows = table(CUR2)
    if edit:
        edit(rows)
    return render(header, rows, **options)


def with_field(source: str, line: int, column: str, value: str) -> bytes:
    """The fixture's first 3 records with ``column`` of the record on ``line`` set to ``value``."""
    header, rows = table(source)
    rows[line - 2][column] = value
    return render(header, rows)


def without(source: str, column: str) -> bytes:
    header, rows = table(source)
    return render([c for c in header if c != column], rows)


def jsonl(edit: Callable[[list[dict[str, object]]], None] | None = None, rows: int = 3) -> bytes:
    records = [json.loads(line) for line in (FIXTURES / GCP_JSONL).read_text().splitlines()[:rows]]
    if edit:
        edit(records)
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def replace(data: bytes, old: bytes, new: bytes, count: int = 1) -> bytes:
    assert data.count(old) >= count, old
    return data.replace(old, new, count)


def on_line(data: bytes, line: int, edit: Callable[[bytes], bytes]) -> bytes:
    """``data`` with physical line ``line`` (1-based) replaced by ``edit(line)``."""
    lines = data.split(b"\n")
    lines[line - 1] = edit(lines[line - 1])
    return b"\n".join(lines)


def truncated_inside_quote(data: bytes) -> bytes:
    """``data`` cut 10 bytes into the last quoted field that opens on its last line."""
    return data[: data.rindex(b',"') + 12]


def zipped(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


@dataclass(frozen=True)
class Case:
    id: str
    type: str
    name: str  # the file's name; ``path`` is that file
    data: Callable[[], bytes]
    exit_code: int
    counts: tuple[int, int, int]  # read, accepted, refused (of the files that were read)
    rejections: list[tuple[int | None, str | None, str]]  # line, field, reason (exact)
    lines: list[int] = field(default_factory=list)  # billing_line.line_no, sorted
    failed: str | None = None  # the FAILED line's message, after the file name
    summary: str | None = None  # more text the summary line holds


def rows_of(source: str, edit: Callable[[list[dict[str, str]]], None]) -> Callable[[], bytes]:
    def build() -> bytes:
        header, rows = table(source)
        edit(rows)
        return render(header, rows)

    return build


def _set(line: int, **values: str) -> Callable[[list[dict[str, str]]], None]:
    def edit(rows: list[dict[str, str]]) -> None:
        rows[line - 2].update(values)

    return edit


QUOTED_NOTE = 'Nvidia H100\nnode 1, rack "B"'
CASES = [
    # --- CUR 2.0 / legacy CSV ------------------------------------------------------------------
    Case("cur2-quoted-newline-ok", "aws_cur", "cur.csv",
         rows_of(CUR2, _set(2, line_item_line_item_description=QUOTED_NOTE)), 0, (3, 3, 0), [], [2, 4, 5]),
    Case("cur2-unbalanced-quote", "aws_cur", "cur.csv",
         lambda: replace(cur2(), b",Anniversary,", b',"Anniversary,', 1), 0, (3, 2, 1),
         [(2, None, END_INSIDE)], [3, 4]),
    Case("cur2-truncated-inside-quote", "aws_cur", "cur.csv",
         lambda: truncated_inside_quote(cur2()), 0, (3, 2, 1),
         [(4, None, END_INSIDE)], [2, 3]),
    Case("cur2-long-row", "aws_cur", "cur.csv", lambda: on_line(cur2(), 3, lambda b: b + b",extra"), 0,
         (3, 2, 1), [(3, None, "the record has 61 fields, more than the header's 60")], [2, 4]),
    Case("cur2-one-field-short", "aws_cur", "cur.csv", lambda: on_line(cur2(), 4, lambda b: b[: b.rindex(b',"')]),
         0, (3, 3, 0), [], [2, 3, 4]),
    Case("cur2-short-row", "aws_cur", "cur.csv",
         lambda: on_line(cur2(), 4, lambda b: b[: b.rindex(b",", 0, b.rindex(b',"'))]),
         0, (3, 2, 1),
         [(4, "resource_tags", "the record has fewer fields than the header (truncated?): no value from"
           " 'resource_tags' on")], [2, 3]),
    Case("cur2-misquoted-field", "aws_cur", "cur.csv",
         lambda: replace(cur2(), b",Anniversary,", b',"Anniver"sary,', 1), 0, (3, 2, 1),
         [(2, None, MISQUOTED)], [3, 4]),
    Case("cur2-missing-resource-id", "aws_cur", "cur.csv", lambda: without(CUR2, "line_item_resource_id"), 1,
         (0, 0, 0), [(1, "line_item_resource_id", 'missing column "line_item_resource_id" (the header is line 1)')],
         failed='line 1, column "line_item_resource_id": missing column "line_item_resource_id" (the header is line 1)'),
    Case("cur-legacy-missing-resource-id", "aws_cur", "cur.csv", lambda: without(LEGACY, "lineItem/ResourceId"), 1,
         (0, 0, 0), [(1, "lineItem/ResourceId", 'missing column "lineItem/ResourceId" (the header is line 1)')],
         failed='line 1, column "lineItem/ResourceId": missing column "lineItem/ResourceId" (the header is line 1)'),
    Case("cur2-non-numeric-cost", "aws_cur", "cur.csv",
         lambda: with_field(CUR2, 3, "line_item_unblended_cost", "12O.5"), 0, (3, 2, 1),
         [(3, "line_item_unblended_cost", "not a number: '12O.5'")], [2, 4]),
    Case("cur2-nan-cost", "aws_cur", "cur.csv",
         lambda: with_field(CUR2, 2, "line_item_unblended_cost", "NaN"), 0, (3, 2, 1),
         [(2, "line_item_unblended_cost", "not a number: 'NaN'")], [3, 4]),
    # a negative usage quantity is imported and counted as a finding (issue 11): its money stands
    Case("cur2-negative-usage", "aws_cur", "cur.csv",
         lambda: with_field(CUR2, 2, "line_item_usage_amount", "-24"), 0, (3, 3, 0), [], [2, 3, 4],
         summary="findings=1"),
    Case("cur2-unknown-currency", "aws_cur", "cur.csv",
         lambda: with_field(CUR2, 4, "line_item_currency_code", "XYZ"), 0, (3, 2, 1),
         [(4, "line_item_currency_code", "unknown currency code: 'XYZ'")], [2, 3]),
    Case("cur2-year-9999", "aws_cur", "cur.csv",
         lambda: with_field(CUR2, 3, "line_item_usage_end_date", "9999-12-31T00:00:00Z"), 0, (3, 2, 1),
         [(3, "line_item_usage_end_date", "outside 2000-01-01..2100-01-01: not a billing date: '9999-12-31T00:00:00Z'")],
         [2, 4]),
    Case("cur2-year-0001", "aws_cur", "cur.csv",
         lambda: with_field(CUR2, 2, "line_item_usage_start_date", "0001-01-01T00:00:00Z"), 0, (3, 2, 1),
         [(2, "line_item_usage_start_date", "outside 2000-01-01..2100-01-01: not a billing date: '0001-01-01T00:00:00Z'")],
         [3, 4]),
    Case("cur2-date-outside-period", "aws_cur", "cur.csv",
         lambda: with_field(CUR2, 2, "line_item_usage_start_date", "2025-08-15T00:00:00Z"), 0, (3, 2, 1),
         [(2, "line_item_usage_start_date",
           "starts before the file's billing period 2025-09-01..2025-10-01 by more than 1 day: '2025-08-15T00:00:00Z'")],
         [3, 4]),
    Case("cur2-bad-billing-period", "aws_cur", "cur.csv",
         lambda: with_field(CUR2, 3, "bill_billing_period_start_date", "yesterday"), 0, (3, 2, 1),
         [(3, "bill_billing_period_start_date",
           "not a timestamp: 'yesterday'")], [2, 4]),
    Case("cur2-duplicate-line-id", "aws_cur", "cur.csv",
         rows_of(CUR2, lambda rows: rows.append(dict(rows[0]))), 0, (4, 3, 1),
         [(5, "identity_line_item_id", "repeated line item id and usage start:"
           " '718049f58adbc9a968b634db631aa4d758c7e11429f615b59392:2025-09-01T00:00:00Z'")], [2, 3, 4]),
    Case("cur-legacy-quoted-newline-ok", "aws_cur", "cur.csv",
         rows_of(LEGACY, _set(3, **{"lineItem/LineItemDescription": "a\nb\nc"})), 0, (3, 3, 0), [], [2, 3, 6]),
    Case("cur2-bom", "aws_cur", "cur.csv", lambda: b"\xef\xbb\xbf" + cur2(), 0, (3, 3, 0), [], [2, 3, 4]),
    Case("cur2-not-utf8", "aws_cur", "cur.csv",
         lambda: replace(with_field(CUR2, 3, "line_item_line_item_description", "MARK"), b"MARK", b"x\xff\xfey"),
         0, (3, 2, 1), [(3, "line_item_line_item_description", "bytes that are not UTF-8")], [2, 4]),
    Case("cur2-crlf", "aws_cur", "cur.csv", lambda: cur2(crlf=True), 0, (3, 3, 0), [], [2, 3, 4]),
    Case("cur2-empty-file", "aws_cur", "cur.csv", lambda: b"", 1, (0, 0, 0),
         [(1, None, "the file is empty")], failed="line 1: the file is empty"),
    Case("cur2-header-only", "aws_cur", "cur.csv", lambda: cur2().split(b"\n", 1)[0] + b"\n", 0, (0, 0, 0), []),
    Case("cur2-gzip-truncated", "aws_cur", "cur.csv.gz", lambda: gzip.compress(cur2())[:-40], 1, (0, 0, 0),
         [(None, None, GZIP_CUT)], failed=GZIP_CUT),
    Case("cur2-zip-without-csv", "aws_cur", "cur.zip",
         lambda: zipped({"readme.txt": b"hi", "notes.md": b"x"}), 1, (0, 0, 0),
         [(None, None, "a ZIP archive is read when it holds one export file (CSV, JSON Lines or Parquet); this one"
           " holds 0 among its 2 members (readme.txt, notes.md)")],
         failed="a ZIP archive is read when it holds one export file (CSV, JSON Lines or Parquet); this one"
         " holds 0 among its 2 members (readme.txt, notes.md)"),
    Case("cur2-explicit-zip", "aws_cur", "cur.zip", lambda: zipped({"cur.csv": cur2()}), 0, (3, 3, 0), [],
         [2, 3, 4]),
    Case("cur2-unknown-extension", "aws_cur", "cur.txt", lambda: cur2(), 1, (0, 0, 0),
         [(None, None, "not a CUR export file by its name: expected .csv, .parquet (optionally .gz), or a .zip of one")],
         failed="not a CUR export file by its name: expected .csv, .parquet (optionally .gz), or a .zip of one"),
    # --- GCP JSON Lines / CSV ------------------------------------------------------------------
    Case("gcp-jsonl-start-0001", "gcp_billing", "gcp.jsonl",
         lambda: jsonl(lambda r: r[1].update(usage_start_time="0001-01-01 00:00:00 UTC")), 0, (3, 2, 1),
         [(2, "usage_start_time", "outside 2000-01-01..2100-01-01: not a billing date: '0001-01-01 00:00:00 UTC'")],
         [1, 3]),
    Case("gcp-jsonl-start-2015", "gcp_billing", "gcp.jsonl",
         lambda: jsonl(lambda r: r[0].update(usage_start_time="2015-09-08 16:00:00 UTC")), 0, (3, 2, 1),
         [(1, "usage_start_time", "starts before its invoice month by more than 1 day: '2015-09-08 16:00:00 UTC'")],
         [2, 3]),
    Case("gcp-jsonl-bad-invoice-month", "gcp_billing", "gcp.jsonl",
         lambda: jsonl(lambda r: r[2].update(invoice={"month": "yesterday"})), 0, (3, 2, 1),
         [(3, "invoice.month", "not an invoice month (YYYYMM): 'yesterday'")], [1, 2]),
    Case("gcp-jsonl-truncated-line", "gcp_billing", "gcp.jsonl", lambda: jsonl()[:-200], 0, (3, 2, 1),
         [(3, None, "not JSON (truncated?): Unterminated string starting at at column 1639")], [1, 2]),
    Case("gcp-csv-missing-global-name", "gcp_billing", "gcp.csv", lambda: without(GCP_CSV, "resource_global_name"),
         1, (0, 0, 0), [(1, "resource_global_name", GLOBAL_NAME)], failed=f'line 1, column "resource_global_name": {GLOBAL_NAME}'),
    Case("gcp-jsonl-resource-without-global-name", "gcp_billing", "gcp.jsonl",
         lambda: jsonl(lambda rs: [r["resource"].pop("global_name") for r in rs]), 1, (0, 0, 0),
         [(1, "resource.global_name", GLOBAL_NAME.replace("resource_global_name", "resource.global_name"))],
         failed=f'line 1, column "resource.global_name": {GLOBAL_NAME.replace("resource_global_name", "resource.global_name")}'),
    Case("gcp-csv-unknown-extension", "gcp_billing", "gcp.tsv", lambda: render(*table(GCP_CSV)), 1, (0, 0, 0),
         [(None, None, "not a GCP billing export file by its name: expected .csv, .json, .jsonl, .ndjson, .parquet"
           " (optionally .gz), or a .zip of one")],
         failed="not a GCP billing export file by its name: expected .csv, .json, .jsonl, .ndjson, .parquet"
         " (optionally .gz), or a .zip of one"),
    Case("gcp-csv-zip", "gcp_billing", "gcp.zip", lambda: zipped({"export.csv": render(*table(GCP_CSV))}), 0,
         (3, 3, 0), [], [2, 3, 4]),
    Case("gcp-csv-quoted-newline-ok", "gcp_billing", "gcp.csv",
         rows_of(GCP_CSV, _set(2, labels_json='[{"key": "note", "value": "two\\nlines"}]', sku_description="x\ny")),
         0, (3, 3, 0), [], [2, 4, 5]),
    # --- Azure CSV -------------------------------------------------------------------------------
    Case("azure-missing-resource-id", "azure_cost", "cost.csv", lambda: without(AZURE, "ResourceId"), 1, (0, 0, 0),
         [(1, "ResourceId", 'missing column "ResourceId" (the header is line 1)')],
         failed='line 1, column "ResourceId": missing column "ResourceId" (the header is line 1)'),
    Case("azure-unbalanced-quote", "azure_cost", "cost.csv",
         lambda: replace(render(*table(AZURE)), b",rg-ml-serve,", b',rg-"ml-serve,'), 0, (3, 2, 1),
         [(3, None, END_INSIDE)], [2, 4]),
    Case("azure-date-9999", "azure_cost", "cost.csv", lambda: with_field(AZURE, 4, "Date", "12/31/9999"), 0,
         (3, 2, 1), [(4, "Date", "outside 2000-01-01..2100-01-01: not a billing date: '12/31/9999'")], [2, 3]),
    Case("azure-date-outside-period", "azure_cost", "cost.csv", lambda: with_field(AZURE, 3, "Date", "01/15/2015"),
         0, (3, 2, 1), [(3, "Date", "starts before the row's billing period by more than 1 day: '01/15/2015'")],
         [2, 4]),
    Case("azure-gzip-crlf", "azure_cost", "cost.csv.gz", lambda: gzip.compress(render(*table(AZURE), crlf=True)),
         0, (3, 3, 0), [], [2, 3, 4]),
    Case("azure-negative-quantity", "azure_cost", "cost.csv", lambda: with_field(AZURE, 2, "Quantity", "-24"), 0,
         (3, 3, 0), [], [2, 3, 4], summary="findings=1"),
    Case("azure-mixed-currencies-no-fx", "azure_cost", "cost.csv",
         lambda: with_field(AZURE, 4, "BillingCurrencyCode", "EUR"), 0, (3, 3, 0), [], [2, 3, 4],
         summary="currencies=USD,EUR (no FX rate for EUR→USD: add [[fx_rates]])"),
    Case("azure-explicit-zip", "azure_cost", "cost.zip", lambda: zipped({"export/cost.csv": render(*table(AZURE))}),
         0, (3, 3, 0), [], [2, 3, 4]),
    # --- FOCUS CSV -------------------------------------------------------------------------------
    # a cloud FOCUS export without ResourceId: booked, each cloud row flagged missing_column
    Case("focus-missing-resource-id", "focus", "focus.csv", lambda: without(FOCUS, "ResourceId"), 0, (3, 3, 0),
         [], [2, 3, 4], summary="findings=3"),
    Case("focus-charge-outside-period", "focus", "focus.csv",
         lambda: with_field(FOCUS, 3, "ChargePeriodEnd", "2025-11-02T00:00:00Z"), 0, (3, 2, 1),
         [(3, "ChargePeriodEnd", "ends after its billing period by more than 1 day: '2025-11-02T00:00:00Z'")], [2, 4]),
    Case("focus-billing-period-yesterday", "focus", "focus.csv",
         lambda: with_field(FOCUS, 2, "BillingPeriodStart", "yesterday"), 0, (3, 2, 1),
         [(2, "BillingPeriodStart", "not a timestamp: 'yesterday'")], [3, 4]),
    Case("focus-billing-period-9999", "focus", "focus.csv",
         lambda: with_field(FOCUS, 4, "BillingPeriodEnd", "9999-01-01T00:00:00Z"), 0, (3, 2, 1),
         [(4, "BillingPeriodStart", BAD_PERIOD)], [2, 3]),
    Case("focus-long-row", "focus", "focus.csv", lambda: on_line(render(*table(FOCUS)), 2, lambda b: b + b",x"), 0,
         (3, 2, 1), [(2, None, "the record has 59 fields, more than the header's 58")], [3, 4]),
    Case("focus-unknown-extension", "focus", "focus.xlsx", lambda: render(*table(FOCUS)), 1, (0, 0, 0),
         [(None, None, "not a FOCUS export file by its name: expected .csv, .csv.gz, .parquet (optionally .gz), or a .zip of one")],
         failed="not a FOCUS export file by its name: expected .csv, .csv.gz, .parquet (optionally .gz), or a .zip of one"),
    Case("focus-quoted-newline-ok", "focus", "focus.csv",
         rows_of(FOCUS, _set(3, ChargeDescription="two\nlines, \"quoted\"")), 0, (3, 3, 0), [], [2, 3, 5]),
]  # fmt: skip


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("corpus") / "template.db"
    engine = make_engine(f"sqlite:///{db}")
    try:
        migrate(engine)
    finally:
        engine.dispose()
    return db


def run(case: Case, tmp_path: Path, template: Path) -> tuple[object, list[tuple[object, ...]], list[int]]:
    db = tmp_path / "ledger.db"
    shutil.copy(template, db)
    path = tmp_path / case.name
    path.write_bytes(case.data())
    config = tmp_path / "gpu-ledger.toml"
    config.write_text(
        f'database_url = "sqlite:///{db}"\n[[connectors]]\nname = "bills"\ntype = "{case.type}"\npath = "{path}"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_LEDGER_")}
    result = CliRunner(env=env).invoke(app, ["ingest", "bills", *WINDOW, "--config", str(config)])
    engine = make_engine(f"sqlite:///{db}")
    try:
        with engine.connect() as conn:
            rejections = list(
                conn.execute(text("SELECT file, line, field, reason FROM rejection ORDER BY line, id"))
            )
            lines = [r[0] for r in conn.execute(text("SELECT line_no FROM billing_line ORDER BY line_no"))]
    finally:
        engine.dispose()
    return result, [tuple(r) for r in rejections], lines


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_billing_file(case: Case, tmp_path: Path, template: Path) -> None:
    result, rejections, lines = run(case, tmp_path, template)
    out = result.stdout  # type: ignore[attr-defined]
    path = str(tmp_path / case.name)
    read, accepted, refused = case.counts
    # A run that read every file but refused more than 1 % of its rows (max_refused_rows_pct) or all
    # of a file's is DEGRADED: exit 3 (service.billing.health).
    degraded = not case.failed and (refused * 100 > read or (refused > 0 and accepted == 0))
    assert result.exit_code == (DEGRADED_EXIT if degraded else case.exit_code), out  # type: ignore[attr-defined]
    files = 1
    status = "PARSE_ERROR" if case.failed else "DEGRADED" if degraded else "OK"
    head = f"bills: status={status} files={files} failed={int(bool(case.failed))} "
    head += f"read={read} accepted={accepted} refused={refused}"
    assert head in out, out
    if case.failed:
        assert f"FAILED {path}, {case.failed}" in out or f"FAILED {path}: {case.failed}" in out, out
    if case.summary:
        assert case.summary in out.splitlines()[0], out
    assert rejections == [(path, line, column, reason) for line, column, reason in case.rejections]
    assert lines == case.lines
