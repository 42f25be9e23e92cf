"""The billing contract, run the same way on every registered billing connector (issue 10, point 5).

Each entry point of the ``gpu_ledger.connectors`` group whose class is ``kind = "billing"`` has a
case below: the real connector over its recorded fixture export (tests/fixtures), read for
September 2025. Every case then runs the same checks:

- the fixture imports with exact counts (``read == accepted``, nothing refused or skipped);
- a window the export has nothing for yields nothing;
- reading one window twice gives the same lines (the ingestor re-reads windows);
- a truncated gzip export, read in small chunks, is refused before any batch of it, naming it, and
  the next file of the directory is still read whole;
- an export without a required column fails as a file, naming that column;
- errors are classified: a file's problem is a ``BillingFileError`` naming the file, a missing
  source a ``ConfigurationError`` or ``BillingFileError`` naming the path, never anything else;
- ``repr`` of the config and the connector never shows a secret key's value.

A registered billing entry point without a case fails ``test_every_billing_entry_point_has_a_case``.
File errors are collected whether a connector yields them (the driver's way) or raises them from
``next()`` and goes on (the older iterators): the ingestor accepts both.
"""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from connectors.registry import default_registry
from connectors.sdk import BillingBatch, BillingFileError, ConfigurationError

FIXTURES = Path(__file__).parents[1] / "fixtures"
SEPT = (dt.datetime(2025, 9, 1, tzinfo=dt.UTC), dt.datetime(2025, 10, 1, tzinfo=dt.UTC))
NOTHING = (dt.datetime(2024, 1, 1, tzinfo=dt.UTC), dt.datetime(2024, 2, 1, tzinfo=dt.UTC))
SECRET = "s3cr3t-Value-never-shown"


def _csv_without(data: bytes, column: str) -> bytes:
    rows = list(csv.reader(io.StringIO(data.decode("utf-8-sig"), newline="")))
    at = rows[0].index(column)
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([r[:at] + r[at + 1 :] for r in rows])
    return out.getvalue().encode()


def _jsonl_without(data: bytes, column: str) -> bytes:
    records = [json.loads(line) for line in data.splitlines() if line.strip()]
    return b"".join(json.dumps({k: v for k, v in r.items() if k != column}).encode() + b"\n" for r in records)


@dataclass(frozen=True)
class Case:
    type: str
    fixture: str  # under tests/fixtures
    suffix: str  # the export's file name ending
    rows: int  # records of the fixture (all accepted for September 2025)
    required: str  # a required column
    without: Callable[[bytes, str], bytes]  # the fixture without a column
    missing_path: type[Exception]  # how a path that does not exist is reported
    secrets: dict[str, Any] = field(default_factory=dict)  # config keys holding SECRET


CASES: dict[str, Case] = {
    c.type: c
    for c in (
        Case(
            "aws_cur",
            "aws/cur2_2025-09_daily.csv",
            ".csv",
            137,
            "identity_line_item_id",
            _csv_without,
            ConfigurationError,
            {"aws_access_key_id": "AKIAEXAMPLE", "aws_secret_access_key": SECRET},
        ),
        Case(
            "gcp_billing",
            "gcp/billing_export_resource_v1_2025-09.jsonl",
            ".jsonl",
            100,
            "cost",
            _jsonl_without,
            BillingFileError,
        ),
        Case(
            "azure_cost",
            "azure/ea_amortized_cost_2025-09.csv",
            ".csv",
            74,
            "Quantity",
            _csv_without,
            BillingFileError,
            {"blob_container_url": "https://acct.blob.core.windows.net/exports", "sas_token": SECRET},
        ),
        Case(
            "focus",
            "focus/focus_1.1_multicloud_2025-09.csv",
            ".csv",
            194,
            "BilledCost",
            _csv_without,
            BillingFileError,
        ),
    )
}


def billing_types() -> list[str]:
    registry = default_registry()
    return sorted(t for t in registry.known_types() if registry.connector_class(t).kind == "billing")


def connector(case: Case, path: Path, *, block_bytes: int | None = None, **keys: Any) -> Any:
    cls = default_registry().connector_class(case.type)
    config = cls.config_model(name="bills", type=case.type, path=str(path), **keys)
    return cls(config) if block_bytes is None else cls(config, block_bytes=block_bytes)


def collect(source: Any, window: tuple[dt.datetime, dt.datetime]) -> list[BillingBatch | BillingFileError]:
    """Every item of a read, a file error raised by ``next()`` (the iterator going on) included."""
    items: list[BillingBatch | BillingFileError] = []
    batches: Iterator[Any] = iter(source.read(*window))
    while True:
        try:
            items.append(next(batches))
        except StopIteration:
            return items
        except BillingFileError as error:
            items.append(error)


def only_batches(items: list[BillingBatch | BillingFileError]) -> list[BillingBatch]:
    assert all(isinstance(i, BillingBatch) for i in items), [str(i) for i in items]
    return [i for i in items if isinstance(i, BillingBatch)]


def lines_of(batches: list[BillingBatch]) -> pl.DataFrame:
    return pl.concat([b.lines for b in batches]).sort("line_no")


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> Case:
    return CASES[request.param]


def test_every_billing_entry_point_has_a_case() -> None:
    assert billing_types() == sorted(CASES)


def test_the_fixture_imports_with_exact_counts(case: Case) -> None:
    batches = only_batches(collect(connector(case, FIXTURES / case.fixture), SEPT))
    assert sum(b.read for b in batches) == case.rows
    assert sum(b.lines.height for b in batches) == case.rows
    assert [r for b in batches for r in b.refused] == [] and sum(b.skipped for b in batches) == 0
    lines = lines_of(batches)
    assert lines["line_key"].n_unique() == case.rows and lines["line_key"].null_count() == 0
    assert set(lines["source_file"]) == {str(FIXTURES / case.fixture)}


def test_a_window_without_charges_yields_nothing(case: Case) -> None:
    assert collect(connector(case, FIXTURES / case.fixture), NOTHING) == []


def test_reading_a_window_twice_gives_the_same_lines(case: Case) -> None:
    source = connector(case, FIXTURES / case.fixture)
    first, again = (lines_of(only_batches(collect(source, SEPT))) for _ in range(2))
    assert first.height == case.rows and first.equals(again)


def test_a_truncated_gzip_is_refused_before_any_batch_and_the_next_file_is_read(
    case: Case, tmp_path: Path
) -> None:
    data = (FIXTURES / case.fixture).read_bytes()
    whole = gzip.compress(data)
    cut = tmp_path / f"a{case.suffix}.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    good = tmp_path / f"b{case.suffix}"
    good.write_bytes(data)
    # in chunks of 7 records read 64 bytes at a time: its first chunks are readable, but a file is
    # imported whole or not at all
    items = collect(connector(case, tmp_path, chunk_rows=7, block_bytes=64), SEPT)
    assert isinstance(items[0], BillingFileError), items[0]
    assert items[0].row.file == str(cut) and "truncated or corrupt gzip stream" in items[0].row.reason
    batches = only_batches(items[1:])
    assert {b.source_file for b in batches} == {str(good)}
    assert sum(b.lines.height for b in batches) == case.rows


def test_a_missing_required_column_fails_the_file_naming_it(case: Case, tmp_path: Path) -> None:
    broken = tmp_path / f"a{case.suffix}"
    broken.write_bytes(case.without((FIXTURES / case.fixture).read_bytes(), case.required))
    (tmp_path / f"b{case.suffix}").write_bytes((FIXTURES / case.fixture).read_bytes())
    items = collect(connector(case, tmp_path), SEPT)
    assert isinstance(items[0], BillingFileError), items[0]
    assert items[0].row.file == str(broken) and items[0].row.column == case.required
    assert f'missing column "{case.required}"' in items[0].row.reason
    assert sum(b.lines.height for b in only_batches(items[1:])) == case.rows


def test_errors_are_classified(case: Case, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-export"
    with pytest.raises(Exception) as raised:  # noqa: PT011 - the class is the case's, checked below
        items = collect(connector(case, missing), SEPT)
        assert len(items) == 1  # a yielded error is raised here to be checked the same way
        raise items[0]
    assert type(raised.value) is case.missing_path
    assert str(missing) in str(raised.value)


def test_secrets_are_never_in_reprs(case: Case) -> None:
    cls = default_registry().connector_class(case.type)
    secret_keys = {n for n, f in cls.config_model.model_fields.items() if "SecretStr" in str(f.annotation)}
    assert secret_keys >= {k for k, v in case.secrets.items() if v == SECRET}
    if not case.secrets:
        assert secret_keys == set()  # a new secret key needs a case value
        return
    keys = {k: v for k, v in case.secrets.items()}
    if "blob_container_url" not in keys:
        keys["path"] = str(FIXTURES / case.fixture)
    config = cls.config_model(name="bills", type=case.type, **keys)
    source = cls(config)
    for text in (repr(config), str(config), repr(source), str(config.model_dump())):
        assert SECRET not in text
