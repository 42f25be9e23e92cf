"""Rate cards: operator-configured prices per GPU-hour, stored as ``GpuRate`` rows (docs/design.md §4).

``GpuRate`` holds every per-GPU-hour price the ledger can apply, whatever produced it: rate cards
(``source_kind="rate_card"``, precedence 20) written here, billing-derived rates
(``source_kind="billing"``, precedence 10, usually matched by ``instance_id``) written by the billing
ingestion. Selection (:func:`service.pricing.apply.price_rows`) reads only the generic columns, so a
new kind of rate needs no pricing code.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from decimal import Decimal

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlmodel import Session, col, delete

from service.models import GpuRate
from service.money import quantize, to_nanos
from service.pricing.common import Currency, Environment, PricingConfigError, UtcDatetime
from service.timeutil import EPOCH, as_utc

RATE_CARD_KIND = "rate_card"
RATE_CARD_PRECEDENCE = 20
BILLING_KIND = "billing"
BILLING_PRECEDENCE = 10

MATCHERS = ("instance_id", "instance_type", "gpu_model")
"""``GpuRate`` scope columns, narrowest first; a null matcher matches anything."""

RATE_SCHEMA: dict[str, pl.DataType] = {
    "source": pl.Utf8(),  # "<source_kind>:<source_ref>", becomes the row's rate_source
    "precedence": pl.Int64(),
    "environment": pl.Utf8(),
    "instance_id": pl.Utf8(),
    "instance_type": pl.Utf8(),
    "gpu_model": pl.Utf8(),
    "valid_from_us": pl.Int64(),  # µs since the epoch, inclusive
    "valid_to_us": pl.Int64(),  # µs since the epoch, exclusive; null = open-ended
    "rate_nanos": pl.Int64(),  # effective price per GPU-hour in 1e-9 currency units
    "currency": pl.Utf8(),
}


class RateCardConfig(BaseModel):
    """One ``[[rate_cards]]`` entry: a price per GPU-hour for a scope during [valid_from, valid_to).

    Scope: ``environment`` plus optionally ``instance_type`` and/or ``gpu_model`` (neither =
    every GPU of the environment). A narrower scope beats a wider one; a billing-derived rate beats
    any rate card. ``rate_per_gpu_hour`` is in ``currency`` per physical GPU-hour (a MIG instance
    pays its fraction) and must fit the ledger's 1e-9 quantum.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=200)
    environment: Environment
    gpu_model: str | None = Field(default=None, min_length=1)
    instance_type: str | None = Field(default=None, min_length=1)
    rate_per_gpu_hour: Decimal = Field(ge=0)
    currency: Currency
    valid_from: UtcDatetime
    valid_to: UtcDatetime | None = None

    @model_validator(mode="after")
    def _check(self) -> RateCardConfig:
        if self.valid_to is not None and self.valid_to <= self.valid_from:
            raise ValueError(f"rate card {self.name!r}: valid_to must be after valid_from")
        if quantize(self.rate_per_gpu_hour) != self.rate_per_gpu_hour:
            raise ValueError(f"rate card {self.name!r}: rate_per_gpu_hour has more than 9 decimals")
        return self

    def scope(self) -> tuple[str, str | None, str | None]:
        return (self.environment, self.instance_type, self.gpu_model)

    def to_gpu_rate(self) -> GpuRate:
        return GpuRate(
            source_kind=RATE_CARD_KIND,
            source_ref=self.name,
            precedence=RATE_CARD_PRECEDENCE,
            environment=self.environment,
            instance_type=self.instance_type,
            gpu_model=self.gpu_model,
            valid_from=self.valid_from,
            valid_to=self.valid_to,
            effective_per_gpu_hour=self.rate_per_gpu_hour,
            currency=self.currency,
        )


def _check_no_overlap(cards: Sequence[RateCardConfig]) -> None:
    """Two cards of one scope may not overlap in time: which price applies would be a guess."""
    by_scope: dict[tuple[str, str | None, str | None], list[RateCardConfig]] = {}
    for card in cards:
        by_scope.setdefault(card.scope(), []).append(card)
    for same in by_scope.values():
        same.sort(key=lambda c: c.valid_from)
        for earlier, later in zip(same, same[1:], strict=False):
            if earlier.valid_to is None or earlier.valid_to > later.valid_from:
                raise PricingConfigError(
                    f"rate cards {earlier.name!r} and {later.name!r} cover the same scope "
                    f"{earlier.scope()} from {later.valid_from.isoformat()}; end the first one "
                    "(valid_to) where the second begins"
                )


def sync_rate_cards(session: Session, cards: Sequence[RateCardConfig]) -> int:
    """Replace every ``rate_card`` ``GpuRate`` row by ``cards``; returns how many were written.

    Runs in the caller's transaction (flushes, never commits). Billing-derived rows are untouched.
    Raises :class:`PricingConfigError` when two cards of one scope overlap in time.
    """
    _check_no_overlap(cards)
    session.exec(delete(GpuRate).where(col(GpuRate.source_kind) == RATE_CARD_KIND))
    session.add_all([card.to_gpu_rate() for card in cards])
    session.flush()
    return len(cards)


def to_us(value: dt.datetime) -> int:
    """Microseconds since the epoch (exact integer arithmetic)."""
    return (as_utc(value) - EPOCH) // dt.timedelta(microseconds=1)


def rates_frame(rates: Iterable[GpuRate]) -> pl.DataFrame:
    """``GpuRate`` rows as a frame of :data:`RATE_SCHEMA` (one Python step per rate, not per row)."""
    records = [
        {
            "source": f"{r.source_kind}:{r.source_ref}",
            "precedence": r.precedence,
            "environment": r.environment,
            "instance_id": r.instance_id,
            "instance_type": r.instance_type,
            "gpu_model": r.gpu_model,
            "valid_from_us": to_us(r.valid_from),
            "valid_to_us": None if r.valid_to is None else to_us(r.valid_to),
            "rate_nanos": to_nanos(r.effective_per_gpu_hour),
            "currency": r.currency,
        }
        for r in rates
    ]
    return pl.DataFrame(records, schema=RATE_SCHEMA)
