"""A test double for a billing source: ``BillingBatch`` objects from in-test data or small CSVs.

Not a parser of any real export: each CSV in ``path`` already holds normalized columns (a subset
of ``BILLING_SCHEMA`` as text); ``*.unreadable`` files raise :class:`BillingFileError` from the
iterator, which then goes on with the next file (as a real source's per-file iterator does).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from decimal import Decimal
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import ClassVar, Literal

import polars as pl

from connectors.base import ConnectorConfig
from connectors.billing import (
    BILLING_SCHEMA,
    MONEY,
    UTC_TIME,
    BillingBatch,
    BillingConfig,
    BillingFileError,
    RefusedRow,
    conform,
)
from connectors.registry import ENTRY_POINT_GROUP, Registry

SEP = dt.datetime(2025, 9, 1, tzinfo=dt.UTC)
OCT = dt.datetime(2025, 10, 1, tzinfo=dt.UTC)


def lines(source_file: str, rows: Sequence[dict[str, object]]) -> pl.DataFrame:
    """Normalized lines from dicts of text/Decimal/datetime values; line_no = 2, 3, … (header 1)."""
    frame = pl.DataFrame([{k: (str(v) if isinstance(v, Decimal) else v) for k, v in r.items()} for r in rows])
    casts = []
    for column in frame.columns:
        target = BILLING_SCHEMA[column]
        if target == MONEY:
            casts.append(pl.col(column).cast(pl.String).cast(MONEY))
        elif target == UTC_TIME and frame[column].dtype == pl.String:
            casts.append(pl.col(column).str.to_datetime(time_zone="UTC", time_unit="us"))
    frame = frame.with_columns(casts) if casts else frame
    return conform(
        frame.with_columns(
            pl.lit(source_file).alias("source_file"),
            pl.int_range(2, frame.height + 2, dtype=pl.Int64).alias("line_no"),
        )
    )


def usage(key: str, **overrides: object) -> dict[str, object]:
    """One AWS usage line: a day of p5.48xlarge at 55.04 $/h unless overridden."""
    row: dict[str, object] = {
        "line_key": key,
        "provider": "aws",
        "billing_account": "111122223333",
        "account": "111122223333",
        "charge_start": dt.datetime(2025, 9, 1, tzinfo=dt.UTC),
        "charge_end": dt.datetime(2025, 9, 2, tzinfo=dt.UTC),
        "charge_category": "Usage",
        "charge_type": "Usage",
        "pricing_model": "on_demand",
        "resource_id": "i-0d1e4c9a2f7b3e801",
        "service": "AmazonEC2",
        "instance_type": "p5.48xlarge",
        "region": "us-east-1",
        "usage_quantity": "24",
        "usage_unit": "Hrs",
        "billed_cost": "1320.96",
        "effective_cost": "1320.96",
        "list_cost": "1320.96",
        "currency": "USD",
    }
    row.update(overrides)
    return row


def batch(
    source_file: str,
    rows: Sequence[dict[str, object]],
    *,
    refused: Sequence[RefusedRow] = (),
    skipped: int = 0,
    period: bool = True,
    assembly_id: str | None = None,
) -> BillingBatch:
    frame = lines(source_file, rows)
    return BillingBatch(
        lines=frame,
        source_file=source_file,
        refused=list(refused),
        read=frame.height + len(refused) + skipped,
        skipped=skipped,
        skipped_reasons={"redundant summary row": skipped} if skipped else {},
        period_start=SEP if period else None,
        period_end=OCT if period else None,
        assembly_id=assembly_id,
    )


class FakeBillingConfig(BillingConfig):
    period: bool = True  # the files name their billing period (September 2025)


class _Files:
    """An iterator over files that can go on after one of them raised (unlike a generator)."""

    def __init__(self, items: Sequence[BillingBatch | BillingFileError]):
        self._items = list(items)

    def __iter__(self) -> _Files:
        return self

    def __next__(self) -> BillingBatch:
        if not self._items:
            raise StopIteration
        item = self._items.pop(0)
        if isinstance(item, BillingFileError):
            raise item
        return item


class FakeBillingSource:
    """``read`` gives the injected ``batches`` (each call a fresh pass), else the files in ``path``."""

    kind: ClassVar[Literal["billing"]] = "billing"
    config_model: ClassVar[type[ConnectorConfig]] = FakeBillingConfig

    def __init__(
        self, config: FakeBillingConfig, *, batches: Sequence[BillingBatch | BillingFileError] | None = None
    ):
        self.config = config
        self.batches = batches
        self.reads: list[tuple[dt.datetime, dt.datetime]] = []

    def read(self, start: dt.datetime, end: dt.datetime) -> Iterator[BillingBatch]:
        self.reads.append((start, end))
        if self.batches is not None:
            return _Files(self.batches)
        return _Files([self._file(p) for p in sorted(Path(str(self.config.path)).iterdir())])

    def _file(self, path: Path) -> BillingBatch | BillingFileError:
        if path.suffix == ".unreadable":
            return BillingFileError(str(path), "truncated: no header", line=1)
        rows = pl.read_csv(path, infer_schema=False).to_dicts()
        return batch(str(path), rows, period=self.config.period)


def fake_billing_registry() -> Registry:
    return Registry(
        [EntryPoint(name="fakebills", value="billing_fakes:FakeBillingSource", group=ENTRY_POINT_GROUP)],
        disabled=(),
    )
