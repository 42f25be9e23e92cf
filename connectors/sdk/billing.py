"""The billing half of the connector contract (``aws_cur``, ``gcp_billing``, ``azure_cost``, ``focus``).

A billing connector reads a source's export files for a period and yields :class:`BillingBatch`
objects: normalized lines as one Polars frame (``BILLING_SCHEMA``), the rows it refused with
their reasons, and the counts that must add up (``read == accepted + rejected + skipped``). It
keeps no state: the billing ingestor (``service.billing``) replaces the period's lines in one
transaction, quarantines the refused rows, derives GPU-hour rates and re-prices the ledger.

Money columns are ``Decimal(38, 9)``, parsed from the export's text (never through a float), so
totals are exact to 1e-9 — the ledger's money quantum. Times are UTC.

Why Polars (issue 5 asks to choose): the ledger already computes in Polars, its CSV/NDJSON/
Parquet readers are streaming and columnar (``scan_*`` keeps a month of a large organisation's
CUR in bounded memory), it has an exact Decimal type, and expressions give the per-row
validation that names the bad column without a Python loop. DuckDB would add a second engine
for the same work; PyArrow alone has no expression language for the normalizations.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import ClassVar, Literal, Protocol, runtime_checkable

import polars as pl
from pydantic import Field

from connectors.sdk.config import ConnectorConfig

MONEY = pl.Decimal(38, 9)
UTC_TIME = pl.Datetime("us", "UTC")


class ChargeCategory(StrEnum):
    """FOCUS ``ChargeCategory``: what kind of charge a line is."""

    USAGE = "Usage"
    PURCHASE = "Purchase"
    TAX = "Tax"
    CREDIT = "Credit"
    ADJUSTMENT = "Adjustment"


class PricingModel(StrEnum):
    """How a usage line was priced (FOCUS ``PricingCategory`` in words a FinOps team uses)."""

    ON_DEMAND = "on_demand"  # FOCUS Standard
    COMMITMENT = "commitment"  # RI, Savings Plan, CUD, Azure reservation/savings plan: Committed
    SPOT = "spot"  # FOCUS Dynamic
    OTHER = "other"


#: Columns (and dtypes) of ``BillingBatch.lines``. Null where the source has no such field.
BILLING_SCHEMA: dict[str, pl.DataType] = {
    "source_file": pl.String(),  # path or s3:// / https:// URL of the export file
    "line_no": pl.Int64(),  # 1-based physical line (CSV: the header is line 1) or record number
    "line_key": pl.String(),  # the source's line id, else a hash of the raw line: unique per source
    "provider": pl.String(),  # aws | gcp | azure (FOCUS ProviderName mapped to these)
    "billing_account": pl.String(),  # payer account / billing account / billing profile
    "account": pl.String(),  # usage account / project id / subscription id
    "charge_start": UTC_TIME,  # inclusive
    "charge_end": UTC_TIME,  # exclusive
    "charge_category": pl.String(),  # a ChargeCategory value
    "charge_type": pl.String(),  # the source's own type: SavingsPlanCoveredUsage, UnusedReservation…
    "pricing_model": pl.String(),  # a PricingModel value; null for non-usage lines
    "commitment_id": pl.String(),  # SP/RI/reservation/CUD id where the line names one
    "resource_id": pl.String(),  # joins DeviceInfo.instance_id: i-…, GCE numeric id, Azure id lower-cased
    "resource_name": pl.String(),
    "service": pl.String(),  # AmazonEC2, Compute Engine, Virtual Machines…
    "sku": pl.String(),  # SKU id / meter id
    "sku_description": pl.String(),  # e.g. "Nvidia H100 80GB GPU running in Americas"
    "instance_type": pl.String(),  # p5.48xlarge, a3-highgpu-8g, Standard_ND96isr_H100_v5
    "region": pl.String(),
    "usage_quantity": MONEY,  # in usage_unit; instance-hours for VM lines
    "usage_unit": pl.String(),
    "gpu_count": pl.Int32(),  # GPUs per instance (instance catalog), null when not a GPU line
    "gpu_hours": MONEY,  # GPU-hours this line bills (0 for non-usage lines of GPU resources)
    "is_gpu_sku": pl.Boolean(),  # the line itself is the GPU part (GCP GPU SKU rows); else null
    "billed_cost": MONEY,  # invoice basis (FOCUS BilledCost)
    "effective_cost": MONEY,  # amortized, after discounts and credits (FOCUS EffectiveCost)
    "list_cost": MONEY,  # public on-demand equivalent (FOCUS ListCost)
    "currency": pl.String(),  # ISO 4217
    "tags": pl.String(),  # JSON object text
}


@dataclass(frozen=True, slots=True)
class RefusedRow:
    """A source row that was not accepted, with where it is and why (quarantined by the ingestor)."""

    file: str
    line: int | None
    column: str | None
    reason: str
    raw: str | None = None
    cost: Decimal | None = None  # the row's cost when it could be read (a run's refused-cost share)

    def message(self) -> str:
        where = f"{self.file}, line {self.line}" if self.line is not None else self.file
        column = f', column "{self.column}"' if self.column else ""
        return f"{where}{column}: {self.reason}"


#: How many example rows a :class:`Finding` keeps (its count is the whole of them).
FINDING_EXAMPLES = 5


@dataclass(frozen=True, slots=True)
class Finding:
    """A data-quality finding: rows that were *imported* although they break a rule (an unknown
    enum value, a negative usage quantity, GPU-hours beyond the instance's GPUs × hours…).

    Findings are counted, not listed: one per (file, rule, column) of a batch, with the number of
    rows and the first few as examples (line, value as written). A row is refused only when its
    money cannot be booked (see docs/billing.md, "Refuse or flag"); everything else is a finding.
    """

    file: str
    rule: str  # a stable identifier: unknown_value, negative_usage, gpu_hours_over_capacity…
    column: str | None  # the column as the file spells it
    reason: str  # for a person: "not one of One-Time, Recurring, Usage-Based"
    count: int
    examples: tuple[tuple[int | None, str | None], ...] = ()  # (line, value) of the first rows
    provider: str | None = None  # the rows' provider, where the file holds several (FOCUS)

    def message(self) -> str:
        column = f', column "{self.column}"' if self.column else ""
        lines = ", ".join(str(line) for line, _ in self.examples if line is not None)
        where = f" (line {lines}{', …' if self.count > len(self.examples) else ''})" if lines else ""
        return f"{self.file}{column}: {self.reason} — {self.count} row(s){where} [{self.rule}]"


def merge_findings(findings: list[Finding]) -> list[Finding]:
    """``findings`` with those of one (file, rule, column, reason) added up (examples: the first)."""
    merged: dict[tuple[str, str, str | None, str, str | None], Finding] = {}
    for f in findings:
        key = (f.file, f.rule, f.column, f.reason, f.provider)
        held = merged.get(key)
        if held is None:
            merged[key] = f
            continue
        examples = (*held.examples, *f.examples)[:FINDING_EXAMPLES]
        merged[key] = Finding(f.file, f.rule, f.column, f.reason, held.count + f.count, examples, f.provider)
    return list(merged.values())


@dataclass(slots=True)
class BillingBatch:
    """Normalized lines of one export file (or part of one) and what was refused or skipped.

    ``read`` counts source rows; ``skipped`` those dropped by a documented rule (counted per
    reason in ``skipped_reasons``): ``read == lines.height + len(refused) + skipped``.
    ``findings``: rules the accepted lines break (counted per rule and column; they are imported).

    What a re-import replaces: when the file names the billing period it covers
    (``period_start``/``period_end``: a CUR billing period, an Azure export's month), the ingestor
    replaces *all* of the source's lines charged in that period — so a newer AWS assembly, whose
    files have other names, supersedes the old one, and a re-import is exact; several files of one
    period (a CUR split in parts) are replaced together in one transaction. Without a period, the
    lines of ``source_file`` are replaced.
    """

    lines: pl.DataFrame
    source_file: str = ""
    refused: list[RefusedRow] = field(default_factory=list)
    read: int = 0
    skipped: int = 0
    skipped_reasons: dict[str, int] = field(default_factory=dict)
    period_start: dt.datetime | None = None
    period_end: dt.datetime | None = None
    assembly_id: str | None = None
    findings: list[Finding] = field(default_factory=list)
    #: the file's spelling of the usage-quantity column (named by findings the ingestor adds)
    quantity_column: str | None = None

    def __post_init__(self) -> None:
        accounted = self.lines.height + len(self.refused) + self.skipped
        if accounted != self.read:
            raise ValueError(
                f"billing batch counts do not add up: read {self.read} != accepted {self.lines.height}"
                f" + refused {len(self.refused)} + skipped {self.skipped}"
            )


class BillingFileError(Exception):
    """A whole file cannot be read (truncated, not UTF-8, a required column missing): the message
    names the file, and the line and column where known. The ingestor records it and goes on
    with the other files."""

    def __init__(self, file: str, reason: str, *, line: int | None = None, column: str | None = None):
        self.row = RefusedRow(file, line, column, reason)
        super().__init__(self.row.message())


class BillingConfig(ConnectorConfig):
    """Keys every billing connector has: where the export files are, and when a run that
    imported is still not ``OK``.

    ``path``: a local directory (read recursively) or file; ``s3://bucket/prefix``, Azure Blob
    and BigQuery sources are keys of the connectors that support them.
    """

    path: str | None = None
    max_refused_rows_pct: float = Field(1.0, ge=0, le=100)
    """A run that refuses more than this percentage of the rows it read (refused ÷ read, skipped
    rows counted in read) ends ``DEGRADED``, not ``OK``: its lines are imported and the watermark
    moves, but the status, ``last_error`` and ``gpu-ledger ingest``'s exit code (3, unless
    ``--allow-degraded``) say so. 100 turns the check off."""
    max_refused_cost_pct: float = Field(0.5, ge=0, le=100)
    """A run whose refused rows carry more than this percentage of the cost ends ``DEGRADED``:
    |refused cost| ÷ (|accepted billed cost| + |refused cost|), amounts as the export wrote them
    (magnitudes, so a credit does not cancel a charge; currencies not converted — a share, not
    an amount). Only refused rows whose cost could be read count. 100 turns the check off.
    A file with rows to import (read − skipped > 0) and none accepted makes a run ``DEGRADED``
    whatever the thresholds."""


@runtime_checkable
class BillingSource(Protocol):
    """A billing connector: ``read(start, end)`` yields the batches of every export file whose
    billing period overlaps ``[start, end)``; lines keep their own charge periods (the ingestor
    replaces exactly the periods the files cover)."""

    kind: ClassVar[Literal["billing"]]
    config_model: ClassVar[type[ConnectorConfig]]

    def read(self, start: dt.datetime, end: dt.datetime) -> Iterator[BillingBatch | BillingFileError]:
        """One item per export file (or chunk of one). A file that cannot be read at all is
        *yielded* as its :class:`BillingFileError`, not raised: raising would end the generator
        and the files after it would not be read."""
        ...


def empty_lines() -> pl.DataFrame:
    return pl.DataFrame(schema=BILLING_SCHEMA)


def conform(lines: pl.DataFrame) -> pl.DataFrame:
    """``lines`` with exactly ``BILLING_SCHEMA``'s columns, in order (missing ones null)."""
    return lines.select(
        [
            (pl.col(c) if c in lines.columns else pl.lit(None)).cast(t).alias(c)
            for c, t in BILLING_SCHEMA.items()
        ]
    )
