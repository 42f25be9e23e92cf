"""When a billing import that ran to its end is still not ``OK``: ``DEGRADED`` and why.

A run that refuses too much of its input has imported, but the ledger no longer adds up to the
invoice: it ends ``DEGRADED`` (``connectors.sdk.ConnectorStatus``) with the reason as its error,
when

* the refused rows are more than ``max_refused_rows_pct`` % of the rows read (default 1 %), or
* the refused rows' cost is more than ``max_refused_cost_pct`` % of the cost (default 0.5 %):
  |refused| ÷ (|accepted billed| + |refused|), in magnitudes so that credits do not cancel
  charges, in the export's currencies unconverted (a share, not an amount); a refused row whose
  cost could not be read counts in the rows' share only, or
* a file with rows to import (read − skipped > 0) had none accepted — one provider's or one
  month's rows all lost — whatever the shares.

The thresholds are keys of each billing connector (``connectors.billing.BillingConfig``). What
landed stays landed and the watermark moves (the data of the window is in, as far as it can be):
the status, the error and ``gpu-ledger ingest``'s exit code say that it is not all of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

_HUNDRED = Decimal(100)


@dataclass(frozen=True, slots=True)
class QualityLimits:
    """The shares (in %) above which a run is ``DEGRADED`` (see the module docstring)."""

    max_refused_rows_pct: Decimal = Decimal("1.0")
    max_refused_cost_pct: Decimal = Decimal("0.5")

    @classmethod
    def of(cls, config: object) -> QualityLimits:
        """The limits a connector's config sets (a ``BillingConfig``), defaults for the ones it has not."""
        default = cls()

        def pct(name: str) -> Decimal:
            value = getattr(config, name, None)
            return getattr(default, name) if value is None else Decimal(repr(float(value)))

        return cls(pct("max_refused_rows_pct"), pct("max_refused_cost_pct"))


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a run imported, as the judgement needs it."""

    read: int
    refused: int
    refused_cost: Decimal  # Σ |cost| of refused rows whose cost could be read
    billed_cost: Decimal  # Σ |billed cost| of the accepted lines
    empty_files: Sequence[str] = ()  # files with rows to import and none accepted


class FileCounts(Protocol):
    """What :func:`outcome_of` reads of a file's summary (``service.billing.ingest.FileSummary``)."""

    @property
    def source_file(self) -> str: ...
    @property
    def read(self) -> int: ...
    @property
    def accepted(self) -> int: ...
    @property
    def refused(self) -> int: ...
    @property
    def skipped(self) -> int: ...
    @property
    def refused_magnitude(self) -> Decimal: ...
    @property
    def billed_magnitude(self) -> Decimal: ...


def outcome_of(files: Sequence[FileCounts]) -> Outcome:
    """The run's outcome from its files' summaries (a file's parts — one per period — together)."""
    per_file: dict[str, list[int]] = {}
    for f in files:
        counts = per_file.setdefault(f.source_file, [0, 0])
        counts[0] += f.read - f.skipped
        counts[1] += f.accepted
    return Outcome(
        read=sum(f.read for f in files),
        refused=sum(f.refused for f in files),
        refused_cost=sum((f.refused_magnitude for f in files), Decimal(0)),
        billed_cost=sum((f.billed_magnitude for f in files), Decimal(0)),
        empty_files=[name for name, (rows, accepted) in per_file.items() if rows > 0 and accepted == 0],
    )


def degraded_reason(outcome: Outcome, limits: QualityLimits) -> str | None:
    """Why the run is ``DEGRADED`` (each reason, "; "-joined), or None when it is ``OK``."""
    reasons = []
    if outcome.read and outcome.refused * _HUNDRED > limits.max_refused_rows_pct * outcome.read:
        share = Decimal(outcome.refused) * _HUNDRED / outcome.read
        reasons.append(
            f"refused {outcome.refused} of {outcome.read} rows read ({_pct(share)} > "
            f"max_refused_rows_pct {_pct(limits.max_refused_rows_pct)})"
        )
    whole = outcome.billed_cost + outcome.refused_cost
    if whole and outcome.refused_cost * _HUNDRED > limits.max_refused_cost_pct * whole:
        share = outcome.refused_cost * _HUNDRED / whole
        reasons.append(
            f"refused rows cost {_amount(outcome.refused_cost)} of {_amount(whole)} ({_pct(share)} > "
            f"max_refused_cost_pct {_pct(limits.max_refused_cost_pct)})"
        )
    if outcome.empty_files:
        shown = ", ".join(outcome.empty_files[:3]) + (", …" if len(outcome.empty_files) > 3 else "")
        reasons.append(f"no row accepted from {len(outcome.empty_files)} file(s) that had rows: {shown}")
    if not reasons:
        return None
    return "; ".join(reasons) + " (what was accepted is imported; see the rejections)"


def _pct(value: Decimal) -> str:
    return f"{value.quantize(Decimal('0.01')).normalize():f} %"


def _amount(value: Decimal) -> str:
    return f"{value.normalize():f}"
