"""Money: exact decimals in code and in both databases; allocation that never loses a nano."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import Column, Engine, Integer, MetaData, Table, func, insert, select
from sqlalchemy.exc import StatementError

from service.dbtypes import UTCDateTime
from service.money import Money, allocate, quantize

AMOUNTS = [Decimal("0.000000001"), Decimal("4.1"), Decimal("6.88"), Decimal("123456789.123456789")]


def test_allocate_by_weights_is_exact() -> None:
    assert allocate(Decimal("10"), [1, 1, 1]) == [
        Decimal("3.333333334"),
        Decimal("3.333333333"),
        Decimal("3.333333333"),
    ]
    assert allocate(Decimal("1"), [Decimal("0"), Decimal("0")]) == [Decimal("0.5"), Decimal("0.5")]
    assert allocate(Decimal("0.5"), [3, 1]) == [Decimal("0.375"), Decimal("0.125")]
    assert allocate(Decimal("1"), []) == []


@given(
    total=st.decimals(min_value=-(10**6), max_value=10**6, places=9, allow_nan=False, allow_infinity=False),
    weights=st.lists(
        st.decimals(min_value=0, max_value=10**6, places=4, allow_nan=False, allow_infinity=False),
        min_size=1,
        max_size=20,
    ),
)
def test_allocate_parts_add_up_to_the_nano(total: Decimal, weights: list[Decimal]) -> None:
    parts = allocate(total, weights)
    assert sum(parts, Decimal(0)) == quantize(total)
    assert all(p == quantize(p) for p in parts)


def test_money_and_utc_round_trip_exactly(engine: Engine) -> None:
    meta = MetaData()
    table = Table(
        "money_probe",
        meta,
        Column("id", Integer, primary_key=True),
        Column("amount", Money()),
        Column("at", UTCDateTime()),
    )
    meta.create_all(engine)
    try:
        moment = dt.datetime(2026, 11, 30, 23, 59, 59, tzinfo=dt.timezone(dt.timedelta(hours=2)))
        with engine.begin() as conn:
            conn.execute(insert(table), [{"amount": a, "at": moment} for a in AMOUNTS])
            back = conn.execute(select(table.c.amount, table.c.at).order_by(table.c.id)).all()
            total = conn.execute(select(func.sum(table.c.amount))).scalar()
        assert [r.amount for r in back] == AMOUNTS
        assert total == sum(AMOUNTS, Decimal(0))
        assert all(r.at == moment and r.at.tzinfo is dt.UTC for r in back)
        with pytest.raises(StatementError, match="naive datetime"), engine.begin() as conn:
            conn.execute(insert(table), [{"amount": Decimal(1), "at": dt.datetime(2026, 1, 1)}])  # noqa: DTZ001
    finally:
        meta.drop_all(engine)
