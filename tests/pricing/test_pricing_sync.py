"""sync_rate_cards / sync_fx_rates / PriceBook.load against an in-memory SQLite database."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal

import polars as pl
import pytest
from sqlmodel import Session, SQLModel, create_engine, select

from service.analytics.fx import FxTable, day_index_of
from service.models import FxRate, GpuRate
from service.pricing import (
    FxRateConfig,
    PriceBook,
    PricingConfigError,
    RateCardConfig,
    price_rows,
    sync_fx_rates,
    sync_rate_cards,
)
from service.timeutil import hour_start

H = 490_000
T0 = hour_start(H)


@pytest.fixture
def session() -> Iterator[Session]:
    engine = create_engine("sqlite://")
    SQLModel.metadata.create_all(engine)
    with Session(engine) as s:
        yield s
    engine.dispose()


def rc(name: str, rate: str, frm: dt.datetime, to: dt.datetime | None = None, **kw: str) -> RateCardConfig:
    return RateCardConfig(
        name=name, environment="aws", rate_per_gpu_hour=Decimal(rate), currency="usd", valid_from=frm,
        valid_to=to, **kw,
    )  # fmt: skip


def test_sync_rate_cards_replaces_cards_and_keeps_billing_rates(session: Session) -> None:
    session.add(
        GpuRate(
            source_kind="billing",
            source_ref="cur:1",
            precedence=10,
            environment="aws",
            instance_id="i-9",
            valid_from=T0,
            valid_to=T0 + dt.timedelta(hours=1),
            effective_per_gpu_hour=Decimal("4.123456789"),
            currency="USD",
        )
    )
    sync_rate_cards(session, [rc("old", "1", T0)])
    assert (
        sync_rate_cards(session, [rc("a", "2.5", T0, gpu_model="H100"), rc("b", "3", T0, instance_type="p5")])
        == 2
    )
    session.commit()
    rows = session.exec(select(GpuRate).order_by(GpuRate.source_ref)).all()  # type: ignore[arg-type]
    assert [(r.source_kind, r.source_ref, r.precedence) for r in rows] == [
        ("rate_card", "a", 20), ("rate_card", "b", 20), ("billing", "cur:1", 10),
    ]  # fmt: skip
    assert (
        rows[0].currency == "USD"
        and rows[0].valid_from == T0
        and rows[0].effective_per_gpu_hour == Decimal("2.5")
    )

    book = PriceBook.load(session, [])
    assert book.rates.height == 3
    assert sorted(book.rates["rate_nanos"].to_list()) == [2_500_000_000, 3_000_000_000, 4_123_456_789]
    # window filter: the billing rate ends at T0+1h
    later = PriceBook.load(session, [], start=T0 + dt.timedelta(hours=2), end=T0 + dt.timedelta(hours=3))
    assert sorted(later.rates["source"].to_list()) == ["rate_card:a", "rate_card:b"]

    one = {"hour_index": H, "environment": "aws", "region": None, "cluster": None, "instance_id": "i-9",
           "instance_type": "p5", "gpu_model": "H100", "gpu_fraction": 1.0, "tdp_w": None,
           "present_s": 3600.0, "idle_s": 0.0, "energy_j": None}  # fmt: skip
    rows_df = pl.DataFrame([one], schema_overrides={c: pl.Utf8 for c in ("region", "cluster")})
    assert price_rows(rows_df, book)["rate_source"].to_list() == ["billing:cur:1"]


def test_overlapping_cards_of_one_scope_are_refused(session: Session) -> None:
    with pytest.raises(PricingConfigError, match="rate cards 'a' and 'b' cover the same scope"):
        sync_rate_cards(session, [rc("a", "1", T0), rc("b", "2", T0 + dt.timedelta(days=30))])
    # back to back is fine
    end = T0 + dt.timedelta(days=30)
    assert sync_rate_cards(session, [rc("a", "1", T0, end), rc("b", "2", end)]) == 2


def test_sync_fx_rates_upserts(session: Session) -> None:
    day = dt.date(2026, 11, 2)
    sync_fx_rates(session, [FxRateConfig(base="EUR", quote="USD", day=day, rate=Decimal("1.08"))])
    sync_fx_rates(session, [
        FxRateConfig(base="EUR", quote="USD", day=day, rate=Decimal("1.0815")),
        FxRateConfig(base="GBP", quote="USD", day=day, rate=Decimal("1.27")),
    ])  # fmt: skip
    session.commit()
    rows = session.exec(select(FxRate).order_by(FxRate.base)).all()  # type: ignore[arg-type]
    assert [(r.base, r.quote, r.day, r.rate) for r in rows] == [
        ("EUR", "USD", day, Decimal("1.0815")), ("GBP", "USD", day, Decimal("1.27")),
    ]  # fmt: skip
    # The one FxTable reads the synced rates.
    table = FxTable(session.connection(), "USD", {"EUR", "GBP"}, [day_index_of(day)])
    assert (table.rate("EUR", day_index_of(day)), table.rate("GBP", day_index_of(day))) == (
        Decimal("1.0815"),
        Decimal("1.27"),
    )


def test_sync_fx_rates_refuses_conflicting_duplicates(session: Session) -> None:
    day = dt.date(2026, 11, 2)
    with pytest.raises(PricingConfigError, match="EUR→USD for 2026-11-02 is given twice"):
        sync_fx_rates(session, [
            FxRateConfig(base="EUR", quote="USD", day=day, rate=Decimal("1.08")),
            FxRateConfig(base="EUR", quote="USD", day=day, rate=Decimal("1.09")),
        ])  # fmt: skip
