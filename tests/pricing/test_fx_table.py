"""The one FxTable (service.analytics.fx) over rates synced from [[fx_rates]]: identity, direct,
inverse (28 significant digits), XXX, conversion of day buckets, and a missing rate that names the
pair and the day."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal

import pytest
from sqlalchemy import Connection
from sqlmodel import Session, SQLModel, create_engine

from service.analytics.errors import MissingFxRate, QueryError
from service.analytics.fx import FxTable, convert_day_buckets, day_index_of
from service.pricing import FxRateConfig, sync_fx_rates

DAY = dt.date(2026, 11, 2)
D = day_index_of(DAY)


@pytest.fixture
def conn() -> Iterator[Connection]:
    engine = create_engine("sqlite://")
    SQLModel.metadata.create_all(engine)
    with Session(engine) as session:
        sync_fx_rates(session, [
            FxRateConfig(base="EUR", quote="USD", day=DAY, rate=Decimal("1.25")),
            FxRateConfig(base="usd", quote="jpy", day=DAY, rate=Decimal(3)),
        ])  # fmt: skip
        session.commit()
    with engine.connect() as c:
        yield c
    engine.dispose()


def test_identity_direct_and_unpriced(conn: Connection) -> None:
    usd = FxTable(conn, "USD", {"EUR", "USD", "XXX"}, [D])
    assert (usd.rate("USD", D), usd.rate("EUR", D), usd.rate("XXX", D)) == (
        Decimal(1),
        Decimal("1.25"),
        Decimal(1),
    )
    [amounts] = convert_day_buckets(usd, [[Decimal("10.000000001")]], ["EUR"], [D])
    assert amounts == [Decimal("12.500000001")]  # 12.50000000125, half-even


def test_inverse(conn: Connection) -> None:
    eur = FxTable(conn, "EUR", {"USD"}, [D])
    assert eur.rate("USD", D) == Decimal("0.8")
    assert convert_day_buckets(eur, [[Decimal(10)]], ["USD"], [D]) == [[Decimal("8.000000000")]]
    usd = FxTable(conn, "USD", {"JPY"}, [D])
    assert usd.rate("JPY", D) == Decimal("0.3333333333333333333333333333")
    assert convert_day_buckets(usd, [[Decimal(1)]], ["JPY"], [D]) == [[Decimal("0.333333333")]]


def test_buckets_of_a_day_add_up_to_their_converted_total(conn: Connection) -> None:
    usd = FxTable(conn, "USD", {"JPY"}, [D])
    [parts] = convert_day_buckets(usd, [[Decimal(1), Decimal(1), Decimal(1)]], ["JPY"] * 3, [D] * 3)
    assert sum(parts) == Decimal("1.000000000")  # not 3 × 0.333333333


def test_missing_rate_names_pair_and_day(conn: Connection) -> None:
    nov3 = D + 1
    with pytest.raises(MissingFxRate) as err:
        FxTable(conn, "USD", {"EUR"}, [nov3]).rate("EUR", nov3)
    assert str(err.value) == "no FX rate EUR/USD (or USD/EUR) for 2026-11-03"
    assert isinstance(err.value, QueryError) and err.value.code == "MISSING_FX_RATE"
    with pytest.raises(MissingFxRate, match=r"GBP/USD .*2026-11-02"):
        FxTable(conn, "USD", {"GBP"}, [D]).rate("GBP", D)
