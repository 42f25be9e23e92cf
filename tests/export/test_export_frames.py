"""The columnar answers (service.analytics.columnar) equal the row functions exactly, and each
vectorized step equals the scalar step it mirrors."""

from __future__ import annotations

import datetime as dt
import itertools
from decimal import Decimal
from typing import Any

import polars as pl
import pytest
from export.helpers import load_demo_fleet
from sqlalchemy import Engine, Numeric, cast, literal, literal_column, select, type_coerce, union_all

from service.analytics import columnar, cost, effective, frames, idle, usage
from service.analytics.access import ALL
from service.analytics.dims import Dimension as D
from service.analytics.dims import Granularity as G
from service.analytics.dims import IdlePolicy, metric_label
from service.analytics.errors import QueryError
from service.analytics.paging import Page
from service.analytics.query import PERIOD, LedgerQuery
from service.analytics.window import check_window, one_of, period_start
from service.money import Money

UTC = dt.UTC


def keys_of(key: Any) -> list[Any]:
    return [key.period_start, *(v for _, v in key.dims)]


@pytest.mark.slow
def test_frames_equal_the_row_functions_on_the_demo_fleet(engine: Engine) -> None:
    load_demo_fleet(engine)
    start = dt.datetime(2025, 9, 1, 3, tzinfo=UTC)
    window = check_window(start, start + dt.timedelta(hours=26), max_days=400)
    groupings = [
        (G.HOUR, (D.DEVICE,)),
        (G.DAY, (D.PROJECT, D.ENVIRONMENT)),
        (G.TOTAL, ()),
        (G.WEEK, (D.GPU_MODEL,)),
        (G.MONTH, (D.TEAM, D.WORKLOAD)),
    ]
    with engine.connect() as conn:
        for granularity, group_by in groupings:
            q = LedgerQuery(window, granularity, group_by, access=ALL)
            for metric in (None, "gpu_util"):
                rows = [
                    (*keys_of(r.key), r.gpu_hours, r.observed_gpu_hours, r.effective_gpu_hours,
                     r.utilization_pct, r.idle_gpu_hours, r.energy_kwh, r.coverage_pct, r.metric)
                    for r in usage.usage(conn, q, metric)
                ]  # fmt: skip
                assert columnar.usage_frame(conn, q, metric).rows() == rows
            for metric, threshold, streak in (
                (None, 5.0, True),
                (None, 25.0, False),
                ("sm_active", 5.0, True),
            ):
                rows = [
                    (*keys_of(r.key), r.currency, r.idle_gpu_hours, r.idle_cost, r.allocated_idle_gpu_hours,
                     r.allocated_idle_cost, r.unallocated_idle_gpu_hours, r.unallocated_idle_cost,
                     r.longest_idle_streak_hours, r.metric)
                    for r in idle.idle_waste(conn, q, metric, threshold, streak=streak)
                ]  # fmt: skip
                assert columnar.idle_frame(conn, q, metric, threshold, streak=streak).rows() == rows
            for policy, currency in itertools.product(IdlePolicy, (None, "USD")):
                rows = [
                    (*keys_of(r.key), r.currency, r.cost, r.idle_cost, r.shared_idle_cost, r.gpu_hours,
                     r.unpriced_gpu_hours, r.rate_source, r.unallocated)
                    for r in cost.cost(conn, q, policy, currency)
                ]  # fmt: skip
                assert columnar.cost_frame(conn, q, policy, currency).rows() == rows
            total = LedgerQuery(window, G.TOTAL, group_by, access=ALL)
            rows = [
                (*keys_of(r.key), r.currency, r.gpu_hours, r.effective_gpu_hours, r.cost, r.cost_per_gpu_hour,
                 r.cost_per_effective_gpu_hour, r.metric)
                for r in effective.effective_cost(conn, total)
            ]  # fmt: skip
            assert columnar.effective_frame(conn, total).rows() == rows


def test_a_frame_is_capped_like_an_answer(engine: Engine, put) -> None:  # type: ignore[no-untyped-def]
    from ledger_rows import at, row

    put([row(h, f"GPU-{d}") for h in range(2) for d in "ab"])
    q = LedgerQuery(check_window(at(0), at(2), max_days=1), G.HOUR, (D.DEVICE,), access=ALL)
    with engine.connect() as conn:
        assert columnar.usage_frame(conn, q, page=Page(field="usage", max_rows=4)).height == 4
        with pytest.raises(QueryError) as caught:
            columnar.usage_frame(conn, q, page=Page(field="usage", max_rows=3))
    assert caught.value.code == "RESULT_TOO_LARGE"


def test_money_is_read_as_exact_decimal_reads_it(engine: Engine) -> None:
    """Half-even to 1e-9: NUMERIC text on PostgreSQL, nanos (integers, or floats from a share) on SQLite."""
    if engine.dialect.name == "postgresql":
        values = ["0.0000000025", "0.0000000035", "-0.0000000025", "12.3456789014999", "1e3", "0"]
        exprs = [type_coerce(cast(literal_column(f"'{v}'"), Numeric), Money) for v in values]
    else:  # nanos as SQLite sums them: integers, or floats where a cost was shared by a ratio
        values = ["2.5", "3.5", "-2.5", "-3.5", "12345678901234567", "1.4999999", "0"]
        exprs = [type_coerce(literal_column(v), Money) for v in values]
    selects = [select(e.label("amount"), literal(i).label("i")) for i, e in enumerate(exprs)]
    parts = union_all(*selects).subquery()
    query = select(parts.c.amount).order_by(parts.c.i)
    with engine.connect() as conn:
        expected = [r[0] for r in conn.execute(query)]  # through Money.process_result_value
        got = frames.read_frame(conn, query)
    assert got.schema["amount"] == pl.Decimal(38, 9)
    assert got["amount"].to_list() == expected
    assert all(isinstance(v, Decimal) for v in expected)


def test_vectorized_steps_equal_their_scalar_steps() -> None:
    keys = [-13, -1, 0, 1, 6, 7, 11, 12, 671, 2_000, 20_000, None]
    frame = pl.DataFrame({PERIOD: keys}, schema={PERIOD: pl.Int64})
    for granularity in G:
        got = frame.with_columns(frames.period_start(granularity))[frames.PERIOD_START].to_list()
        assert got == [period_start(granularity, k) for k in keys], granularity
    texts = [None, "gpu_util", "sm_active"]
    pairs = [
        (lo, hi) for lo in texts for hi in texts if (lo is None) == (hi is None) and (lo or "") <= (hi or "")
    ]
    lo_hi = pl.DataFrame(
        {"lo": [p[0] for p in pairs], "hi": [p[1] for p in pairs]}, schema={"lo": pl.String, "hi": pl.String}
    )
    for metric in (None, "mem_bw"):
        got = lo_hi.with_columns(frames.metric_label(metric, "lo", "hi").alias("m"))["m"].to_list()
        assert got == [metric_label(metric, lo, hi) for lo, hi in pairs]
    got = lo_hi.select(frames.one_of("lo", "hi").alias("r"))["r"].to_list()
    assert got == [one_of(lo, hi) for lo, hi in pairs]
    parts = pl.DataFrame({"part": [1.0, 0.1, 2.0, 0.0, 5.0, 0.7], "whole": [3.0, 0.3, 0.0, 0.0, -1.0, 0.7]})
    got = parts.select(columnar.pct_column("part", "whole").alias("p"))["p"].to_list()
    assert got == [usage.pct(p, w) for p, w in parts.rows()]
    assert got[:2] == [33.33333333333333, 33.333333333333336]  # the very doubles, not "close"
