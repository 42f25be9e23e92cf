"""The column-wise reprice() equals the per-resource-hour loop it replaced, to the nano.

The loop is kept verbatim in ``reprice_reference.py``. Each case builds the same rows twice, re-prices
once with each implementation from the same empty ledger, and compares every ledger hour, day
rollup, GPU rate and device (without surrogate ids) and the counts reprice returns.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
import reprice_reference
from billing_rows import R1, add, at, empty, ledger, line, p5_day, present_8, scenario, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine

from service.billing import rates
from service.db import make_engine
from service.pricing.common import PricingError

D = Decimal
MONTH = (dt.datetime(2025, 9, 1, tzinfo=dt.UTC), dt.datetime(2025, 10, 1, tzinfo=dt.UTC))
Rows = Callable[[], list[Any]]


def _run(engine: Engine, rows: Rows, fn: Callable[..., Any], **kw: Any) -> tuple[Any, ...]:
    empty(engine)
    add(engine, rows())
    try:
        result = fn(engine, *MONTH, **kw)
    except PricingError as error:
        return ("error", str(error), snapshot(engine))
    counts = (
        result.start,
        result.end,
        result.resources,
        result.rates,
        result.device_rows,
        result.unmonitored_rows,
    )
    return counts, snapshot(engine)


def assert_same(engine: Engine, rows: Rows, twice: bool = False, **kw: Any) -> tuple[Any, ...]:
    old = _run(engine, rows, reprice_reference.reprice, **kw)
    new = _run(engine, rows, rates.reprice, **kw)
    assert new == old
    if twice:  # the second run re-prices rows the first one priced (orphans, unmonitored rows)
        rates.reprice(engine, *MONTH, **kw)
        assert snapshot(engine) == new[-1]
    return new


def _mig(h: int, instance: str, k: int, present: float, idle: float) -> Any:
    return ledger(h, f"{instance}/mig{k}", instance, present=present, idle=idle, gpu_fraction=k / 7)


CASES: dict[str, Rows] = {
    "scenario": scenario,
    "daily-metered-idle": lambda: [p5_day(), *present_8(R1, range(2, 5), idle=900.0)],
    "hourly-capped": lambda: [
        line(
            "i-g5",
            at(3),
            at(4),
            "22.688",
            instance_type="g5.12xlarge",
            usage_quantity=D(1),
            gpu_count=4,
            gpu_hours=D(4),
        ),
        *[
            ledger(
                3, f"i-g5/gpu{g}", "i-g5", instance_type="g5.12xlarge", present=3600.0 - 7 * g, idle=11.0 * g
            )
            for g in range(6)
        ],
    ],  # fmt: skip
    # Azure-like: more GPU-hours than the instance's GPUs × hours (spread evenly), a fee without
    # GPU-hours (spread over the hours of presence), a credit, a list cost missing on one line
    "even-fee-credit": lambda: [
        line(
            "i-az",
            at(0),
            at(24),
            "1000.000000001",
            gpu_count=1,
            gpu_hours=D("49.9"),
            usage_quantity=D("49.9"),
        ),
        line("i-az", at(0), at(24), "3.333333333", gpu_count=1, gpu_hours=D(0), list_cost=None),
        line("i-az", at(0), at(24), "-7.77", gpu_count=1, gpu_hours=D(0)),
        *[ledger(h, "i-az/gpu0", "i-az", present=1800.0 + h) for h in (4, 9, 13)],
    ],  # fmt: skip
    # MIG slices (k/7 of a GPU), partly idle, and a 3-day span (72 hours) over two months' edge
    "mig-and-long-span": lambda: [
        line(
            "i-mig",
            at(0),
            at(72),
            "999.123456789",
            gpu_count=8,
            gpu_hours=D("100.5"),
            instance_type="p5.48xlarge",
            usage_quantity=D("12.5625"),
        ),
        *[_mig(h, "i-mig", k, 3600.0 - 100 * k, 60.0 * k) for h in (1, 2, 30, 71) for k in (1, 2, 3)],
    ],  # fmt: skip
    # GCP-like: GPU SKU rows plus core/RAM rows of the same resource, hourly, with partial presence
    "gpu-sku": lambda: [
        line("gcp-1", at(5), at(6), "29.387", is_gpu_sku=True, gpu_count=8, gpu_hours=D(8), provider="gcp"),
        line("gcp-1", at(5), at(6), "4.123456789", is_gpu_sku=False, gpu_hours=D(96), provider="gcp"),
        line("gcp-1", at(5), at(6), "-1.000000001", is_gpu_sku=False, provider="gcp", list_cost=None),
        *[ledger(5, f"gcp-1/gpu{g}", "gcp-1", provider="gcp", present=1234.567891) for g in range(3)],
    ],  # fmt: skip
    # ties in the largest remainder: 10 nanos over 3 equal device rows and an equal gap
    "ties": lambda: [
        line("i-t", at(7), at(8), "0.00000001", gpu_count=4, gpu_hours=D(4)),
        *[ledger(7, f"i-t/gpu{g}", "i-t") for g in range(3)],
    ],
    "two-currencies": lambda: [
        line("i-c", at(1), at(2), "5", gpu_count=1, gpu_hours=D(1)),
        line("i-c", at(1), at(2), "6", gpu_count=1, gpu_hours=D(1), currency="EUR"),
    ],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_vectorized_reprice_equals_the_loop(engine: Engine, case: str) -> None:
    got = assert_same(engine, CASES[case], twice=case != "two-currencies")
    if case == "two-currencies":
        assert got[0] == "error" and "'i-c' are in EUR and USD for the same hour" in got[1]
    else:
        assert got[0][2] >= 1  # something was priced: the case is not vacuous


@pytest.mark.parametrize("share", ["0.75", "0.333333333333333333", "0"])
def test_gpu_cost_share_equals_the_loop(engine: Engine, share: str) -> None:
    assert_same(engine, CASES["mig-and-long-span"], gpu_cost_share=D(share))
    assert_same(engine, scenario, gpu_cost_share=D(share))


def test_repricing_after_the_lines_changed_equals_the_loop(engine: Engine) -> None:
    """Rows an earlier run priced from the bill, whose lines then changed: the orphan path."""

    def rows() -> list[Any]:
        return [p5_day(), *present_8(R1, range(0, 3))]

    for fn in (reprice_reference.reprice, rates.reprice):
        empty(engine)
        add(engine, rows())
        fn(engine, *MONTH)
        with engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM billing_line")
        fn(engine, *MONTH)
        if fn is reprice_reference.reprice:
            old = snapshot(engine)
    assert snapshot(engine) == old


_line = st.tuples(
    st.sampled_from(["i-a", "i-b", "i-c"]),
    st.integers(0, 2),  # first day
    st.sampled_from([1, 1, 24, 48, 5]),  # hours the line spans
    st.integers(0, 23),  # first hour
    st.decimals(D("0"), D("500"), places=9) | st.just(D(0)),  # GPU-hours
    st.decimals(D("-50"), D("2000"), places=9),
    st.sampled_from([8, 4, 1, None]),
    st.booleans(),  # list cost given
)
_presence = st.tuples(
    st.sampled_from(["i-a", "i-b", "i-c"]),
    st.integers(0, 71),
    st.integers(1, 8),
    st.floats(0, 3600).map(lambda s: round(s, 3)),
    st.floats(0, 3600).map(lambda s: round(s, 3)),
    st.sampled_from([1.0, 1 / 7, 3 / 7, 0.5]),
)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(_line, min_size=1, max_size=6),
    presence=st.lists(_presence, max_size=10),
    share=st.sampled_from([D(1), D("0.75"), D("0.123456789")]),
)
def test_generated_bills_equal_the_loop(
    sqlite_url: str, lines: list[Any], presence: list[Any], share: D
) -> None:
    def rows() -> list[Any]:
        out: list[Any] = []
        for rid, day, span, hour, gpu_h, cost, gpus, listed in lines:
            start = at(24 * day + hour)
            extra = {} if listed else {"list_cost": None}
            out.append(line(rid, start, start + dt.timedelta(hours=span), str(cost), gpu_count=gpus,
                            gpu_hours=gpu_h, usage_quantity=gpu_h, **extra))  # fmt: skip
        seen = set()
        for rid, h, gpus, secs, idle, frac in presence:
            for g in range(gpus):
                if (rid, h, g) not in seen:
                    seen.add((rid, h, g))
                    out.append(ledger(h, f"{rid}/gpu{g}", rid, present=secs, idle=idle, gpu_fraction=frac))
        return out

    engine = make_engine(sqlite_url)
    try:
        assert_same(engine, rows, gpu_cost_share=share)
    finally:
        engine.dispose()


def test_a_narrower_window_cuts_the_rates_crossing_it_as_the_loop_did(engine: Engine) -> None:
    """A run of equal rates over hours 3-6 from a month's re-pricing, then hour 4 alone re-priced:
    the run is cut at the window's edges (3-4 and 5-6 kept) around the new rate."""

    def rows() -> list[Any]:
        return [line("i-r", at(h), at(h + 1), "8", gpu_count=8, gpu_hours=D(8)) for h in range(3, 6)]

    snapshots = []
    for fn in (reprice_reference.reprice, rates.reprice):
        empty(engine)
        add(engine, rows())
        fn(engine, *MONTH)
        fn(engine, at(4), at(5))
        snapshots.append(snapshot(engine))
    assert snapshots[1] == snapshots[0]
    windows = sorted((r["valid_from"], r["valid_to"]) for r in snapshots[1][2])
    assert windows == [(at(3), at(4)), (at(4), at(5)), (at(5), at(6))]


@pytest.mark.parametrize("dialect", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_rate_no_money_column_holds_is_refused(dialect: str, request: pytest.FixtureRequest) -> None:
    """1e-9 GPU-hours, never metered, billed $17.179869184 is $17,179,869,184 per GPU-hour: above
    the 2^63 − 1 nanos SQLite's integers hold. Both re-pricers refuse it the same way (hypothesis
    found the overflow the loop crashed on), and the ledger is left as it was."""
    url = request.getfixturevalue("sqlite_url" if dialect == "sqlite" else "pg_url")
    engine = make_engine(url)

    def rows() -> list[Any]:
        start = at(0)
        return [
            line(
                "i-a",
                start,
                start + dt.timedelta(hours=1),
                "17.179869184",
                gpu_count=8,
                gpu_hours=D("1E-9"),
                usage_quantity=D("1E-9"),
            ),  # fmt: skip
        ]  # no metered hour: the bill's own GPU-hours are the denominator

    try:
        result = assert_same(engine, rows)
        assert result[0] == "error"
        assert result[1] == (
            "i-a: the bill's rate per GPU-hour from 2025-09-03T00:00Z exceeds 9223372036.854775807"
            " (its GPU-hours are too small for its cost); not re-priced"
        )
    finally:
        engine.dispose()
