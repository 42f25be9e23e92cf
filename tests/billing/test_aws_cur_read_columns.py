"""``aws_cur`` parses a CSV chunk with only the columns its mapping reads (28 of a CUR 2.0 file's 60),
and a chunk whole again where the outcome needs the others: a refused row's raw text is its whole
record, and a row without a line item id is keyed by every field of it. Either way the batches are
those of reading every column of every chunk."""

from __future__ import annotations

import csv
import datetime as dt
import io
from pathlib import Path
from unittest import mock

import polars as pl
from polars.testing import assert_frame_equal

from connectors import aws_cur
from connectors.aws_cur import AwsCurConfig, AwsCurConnector
from connectors.billing import BillingBatch, BillingFileError
from connectors.billing_io import RecordChunk

CUR2 = Path(__file__).parents[1] / "fixtures" / "aws" / "cur2_2025-09_daily.csv"
SEP, OCT = dt.datetime(2025, 9, 1, tzinfo=dt.UTC), dt.datetime(2025, 10, 1, tzinfo=dt.UTC)


def bill(tmp_path: Path, edits: dict[int, dict[str, str]]) -> Path:
    """The fixture with ``edits`` (0-based record → column → value) written as a CSV."""
    rows = list(csv.reader(io.StringIO(CUR2.read_text())))
    header, body = rows[0], rows[1:]
    for i, values in edits.items():
        for column, value in values.items():
            body[i][header.index(column)] = value
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([header, *body])
    path = tmp_path / "bill.csv"
    path.write_text(out.getvalue())
    return path


def read(path: Path, *, every_column: bool) -> tuple[list[BillingBatch], list[list[str] | None]]:
    """The batches, and the columns each chunk parse asked for (None: all of them)."""
    asked: list[list[str] | None] = []
    parse = RecordChunk.parse

    def spy(self: RecordChunk, wanted: list[str] | None = None) -> object:
        asked.append(wanted)
        return parse(self, wanted)

    config = AwsCurConfig(name="bills", path=str(path), chunk_rows=10)
    with mock.patch.object(RecordChunk, "parse", spy), AwsCurConnector(config) as connector:
        if every_column:
            with mock.patch.object(aws_cur._Layout, "read_columns", lambda self: None):
                items = list(connector.read(SEP, OCT))
        else:
            items = list(connector.read(SEP, OCT))
    assert not [i for i in items if isinstance(i, BillingFileError)]
    return [b for b in items if isinstance(b, BillingBatch)], asked


def assert_same(fast: list[BillingBatch], whole: list[BillingBatch]) -> None:
    assert len(fast) == len(whole)
    for a, b in zip(fast, whole, strict=True):
        assert_frame_equal(a.lines, b.lines)
        assert a.refused == b.refused
        assert a.findings == b.findings
        assert a.read == b.read


def test_later_chunks_parse_only_the_mapped_columns(tmp_path: Path) -> None:
    fast, asked = read(bill(tmp_path, {}), every_column=False)
    whole, _ = read(bill(tmp_path, {}), every_column=True)
    assert_same(fast, whole)
    assert asked[0] is None  # the first chunk: the header is not known yet
    header = next(csv.reader(io.StringIO(CUR2.read_text())))
    assert len(header) > 40
    mapped = asked[1]
    assert mapped is not None and len(mapped) == len(set(mapped)) < len(header) / 2
    assert "bill_invoice_id" not in mapped and "line_item_unblended_cost" in mapped
    assert all(a == mapped for a in asked[1:])  # a clean chunk is never parsed twice
    assert len(asked) == len(fast) == 14  # 137 records, 10 a chunk


def test_a_refused_row_in_a_later_chunk_keeps_its_whole_record(tmp_path: Path) -> None:
    path = bill(tmp_path, {54: {"line_item_unblended_cost": "not money"}})  # line 56, the 6th chunk
    fast, asked = read(path, every_column=False)
    whole, _ = read(path, every_column=True)
    assert_same(fast, whole)
    (refused,) = [r for b in fast for r in b.refused]
    assert (refused.line, refused.column) == (56, "line_item_unblended_cost")
    # the record as read (cut at 2,000 characters): a column the mapping does not read is in it
    assert refused.raw.startswith('{"identity_line_item_id": ') and '"bill_invoice_id": "' in refused.raw
    assert asked[5] is not None and asked[6] is None  # that chunk parsed again, whole
    assert sum(a is None for a in asked) == 2


def test_a_row_without_a_line_id_in_a_later_chunk_is_keyed_by_every_field(tmp_path: Path) -> None:
    path = bill(tmp_path, {70: {"identity_line_item_id": ""}})  # line 72, the 8th chunk
    fast, _ = read(path, every_column=False)
    whole, _ = read(path, every_column=True)
    assert_same(fast, whole)
    keyed = pl.concat([b.lines for b in fast]).filter(pl.col("line_no") == 72)["line_key"].item()
    assert keyed.startswith("sha1:")
    # changing a column the mapping does not read changes that key: it is made of the whole record
    other = bill(tmp_path, {70: {"identity_line_item_id": "", "bill_invoice_id": "another"}})
    again = pl.concat([b.lines for b in read(other, every_column=False)[0]])
    assert again.filter(pl.col("line_no") == 72)["line_key"].item() != keyed
