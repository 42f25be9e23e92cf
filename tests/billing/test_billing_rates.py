"""reprice(): GPU-hour rates from the bill, exact ledger cost, unmonitored spend (docs/design.md §4)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import polars as pl
import pytest
from billing_rows import (
    DAY3,
    R1,
    add,
    at,
    days,
    empty,
    hours,
    ledger,
    line,
    p5_day,
    present_8,
    rates,
    snapshot,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, delete
from sqlmodel import Session

from connectors.base import DeviceInfo, SampleBatch, Sampling
from service.billing.rates import allocate_nanos, reprice, reprice_after_metrics
from service.db import make_engine
from service.ledger.ingest import ingest_window
from service.models import BillingLine
from service.money import allocate
from service.pricing.apply import PriceBook, price_rows

D = Decimal
MONTH = (dt.datetime(2025, 9, 1, tzinfo=dt.UTC), dt.datetime(2025, 10, 1, tzinfo=dt.UTC))


def _total(rows: list) -> Decimal:
    return sum((r.cost for r in rows), D(0))


def test_daily_line_without_metrics_is_twelve_unmonitored_hours(engine: Engine) -> None:
    add(engine, [p5_day()])
    result = reprice(engine, *MONTH)
    rows = hours(engine)
    assert [r.hour_start for r in rows] == [at(h) for h in range(12)]  # 00:00-12:00, from the day start
    assert {r.device_id for r in rows} == {f"{R1}/unmonitored"}
    assert all(r.cost == D("55.040000000") and r.present_s == 28800.0 and r.observed_s == 0 for r in rows)
    assert all(r.rate_source == "billing:bills" and r.currency == "USD" for r in rows)
    assert {(r.gpu_model, r.instance_type, r.account) for r in rows} == {
        ("NVIDIA H100 80GB", "p5.48xlarge", "111122223333")
    }
    assert _total(rows) == D("660.48")
    [rate] = rates(engine)
    assert (rate.valid_from, rate.valid_to, rate.instance_id, rate.precedence) == (DAY3, at(12), R1, 10)
    assert (rate.effective_per_gpu_hour, rate.billed_per_gpu_hour, rate.list_per_gpu_hour) == (
        D("6.88"), D("6.88"), D("6.88"),
    )  # fmt: skip
    [day] = days(engine)
    assert (day.cost, day.hours, day.present_s, day.provider, day.instance_type) == (
        D("660.48"), 12, 12 * 28800.0, "aws", "p5.48xlarge",
    )  # fmt: skip
    assert (result.resources, result.rates, result.unmonitored_rows) == (1, 1, 12)


def test_gpu_cost_share_charges_that_part_of_the_instance_to_its_gpus(engine: Engine) -> None:
    add(engine, [p5_day()])
    reprice(engine, *MONTH, gpu_cost_share=D("0.75"))
    rows = hours(engine)
    assert all(r.cost == D("41.280000000") for r in rows)  # 55.04 × 0.75 per instance-hour
    assert _total(rows) == D("495.36")  # 660.48 × 0.75
    [rate] = rates(engine)
    assert rate.effective_per_gpu_hour == D("5.16")


def test_metered_hours_take_the_bill_first_the_rest_is_unmonitored(engine: Engine) -> None:
    add(engine, [p5_day(), *present_8(R1, range(2, 5), idle=900.0)])
    reprice(engine, *MONTH)
    rows = hours(engine)
    real = [r for r in rows if not r.device_id.endswith("/unmonitored")]
    gap = [r for r in rows if r.device_id.endswith("/unmonitored")]
    assert len(real) == 24 and all(r.cost == D("6.88") and r.idle_cost == D("1.72") for r in real)
    assert all(r.rate_source == "billing:bills" for r in real)
    # 3 metered hours + the 9 earliest others make the 12 billed hours
    assert [r.hour_index % 24 for r in gap] == [0, 1, 5, 6, 7, 8, 9, 10, 11]
    assert all(r.cost == D("55.04") for r in gap)
    assert _total(rows) == D("660.48")
    assert [(r.valid_from, r.valid_to, r.effective_per_gpu_hour) for r in rates(engine)] == [
        (DAY3, at(12), D("6.88"))
    ]


def test_metered_above_billed_is_capped_at_the_bill(engine: Engine) -> None:
    g5 = "i-05b8e2d7c4a1f9603"
    hourly = line(
        g5,
        at(3),
        at(4),
        "22.688",
        instance_type="g5.12xlarge",
        usage_quantity=D(1),
        gpu_count=4,
        gpu_hours=D(4),
    )
    devices = [ledger(3, f"{g5}/gpu{g}", g5, instance_type="g5.12xlarge") for g in range(6)]
    add(engine, [hourly, *devices])
    reprice(engine, *MONTH)
    rows = hours(engine)
    assert [r.cost for r in rows] == [D("3.781333334")] * 2 + [D("3.781333333")] * 4
    assert _total(rows) == D("22.688")
    [rate] = rates(engine)
    assert rate.effective_per_gpu_hour == D("3.781333333")  # 22.688 / max(B=4, P=6)


def test_gcp_instance_rate_is_every_sku_of_the_resource_plus_credits(engine: Engine) -> None:
    g1 = "4815162342108301234"
    kw = {"provider": "gcp", "account": "proj", "instance_type": "a3-highgpu-8g"}
    lines = [
        line(g1, at(16), at(17), "88.48", is_gpu_sku=True, gpu_hours=D(8), **kw),
        line(g1, at(16), at(17), "6.70176", gpu_count=8, **kw),  # a core row: not GPU-hours
        line(g1, at(16), at(17), "5.273424", **kw),
        line(g1, at(16), at(17), "0.657534247", **kw),
        line(g1, at(16), at(17), "-22.12", charge_category="Credit", list_cost=D(0), **kw),
    ]
    add(engine, lines)
    reprice(engine, *MONTH)
    [row] = hours(engine)
    assert (row.device_id, row.cost, row.present_s, row.provider) == (
        f"{g1}/unmonitored", D("78.992718247"), 28800.0, "gcp",
    )  # fmt: skip
    [rate] = rates(engine)
    assert rate.effective_per_gpu_hour == D("9.874089781")  # 78.992718247 / 8, half-even
    assert rate.list_per_gpu_hour == D("12.639089781")  # 101.112718247 / 8
    assert rate.environment == "gcp"


def test_unused_reservation_is_kept_out_of_gpu_cost(engine: Engine) -> None:
    a1 = "/subscriptions/s/resourcegroups/rg/providers/microsoft.compute/virtualmachines/ndh100-train-01"
    kw = {"provider": "azure", "account": "sub", "instance_type": "Standard_ND96isr_H100_v5"}
    add(
        engine,
        [
            line(a1, DAY3, at(24), "746.88", usage_quantity=D(12), gpu_count=8, gpu_hours=D(96), **kw),
            line(
                None,
                DAY3,
                at(24),
                "746.88",
                charge_type="UnusedReservation",
                pricing_model="commitment",
                **kw,
            ),
            line("vol-1", DAY3, at(24), "4.096", **kw),  # a disk: no GPUs, not in the ledger
        ],
    )
    reprice(engine, *MONTH)
    rows = hours(engine)
    assert {r.instance_id for r in rows} == {a1} and len(rows) == 12
    assert _total(rows) == D("746.88")


def test_reprice_twice_equals_once_and_late_metrics_use_billing_rates(engine: Engine) -> None:
    add(engine, [p5_day()])
    reprice(engine, *MONTH)
    once = snapshot(engine)
    reprice(engine, DAY3, at(1))  # a narrower window widens to the whole daily span
    assert snapshot(engine) == once

    # A metrics ingest of hour 03 prices the real GPU from the billing GpuRate (precedence 10) ...
    with Session(engine) as session:
        book = PriceBook.load(session, start=at(3), end=at(4))
    frame = pl.DataFrame(
        {"hour_index": [ledger(3, "x", R1).hour_index], "environment": ["aws"], "region": [None],
         "cluster": [None], "instance_id": [R1], "instance_type": ["p5.48xlarge"], "gpu_model": ["H100"],
         "gpu_fraction": [1.0], "tdp_w": [None], "present_s": [3600.0], "idle_s": [0.0], "energy_j": [None]},
    )  # fmt: skip
    priced = price_rows(frame, book).row(0, named=True)
    assert (priced["cost_nanos"], priced["rate_source"]) == (6_880_000_000, "billing:bills")
    # ... and reprice after the ingest moves that hour from unmonitored to the devices.
    add(engine, present_8(R1, range(3, 4)))
    reprice(engine, *MONTH)
    rows = hours(engine)
    assert [r.hour_index % 24 for r in rows if r.device_id.endswith("/unmonitored")] == [
        0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11,
    ]  # fmt: skip
    assert _total(rows) == D("660.48")


class _OneGpu:
    """A metrics source: GPU 0 of instance R1, busy at 50 % every minute of hour 03."""

    kind = "metrics"
    sampling = Sampling.every(60.0)

    def collect(self, start: dt.datetime, end: dt.datetime):  # noqa: ANN201
        ts = [int((at(3) + dt.timedelta(minutes=m)).timestamp() * 1000) for m in range(60)]
        ts = [t for t in ts if start.timestamp() * 1000 <= t < end.timestamp() * 1000]
        device = DeviceInfo(f"{R1}/gpu0", "aws", provider="aws", instance_id=R1, instance_type="p5.48xlarge")
        n = len(ts)
        columns = {"device_id": [device.device_id] * n, "ts_ms": ts, "metric": ["gpu_util"] * n,
                   "value": [50.0] * n, "workload_key": [""] * n, "share": [1.0] * n}  # fmt: skip
        if n:
            yield SampleBatch.from_columns(columns, [device])


def test_a_metrics_ingest_moves_billed_hours_from_unmonitored_to_the_gpu(engine: Engine) -> None:
    add(engine, [p5_day()])
    reprice(engine, *MONTH)  # the bill alone: 12 unmonitored hours of 8 GPUs
    ingest_window(engine, "cw", _OneGpu(), at(3), at(4), after_ingest=reprice_after_metrics)
    rows = [r for r in hours(engine) if r.hour_start == at(3)]
    by_device = {r.device_id: r for r in rows}
    # One GPU metered for the hour takes 1/8 of the hour's bill; 7 GPU-hours stay unmonitored.
    assert (
        by_device[f"{R1}/gpu0"].cost == D("6.88") and by_device[f"{R1}/gpu0"].rate_source == "billing:bills"
    )
    assert by_device[f"{R1}/unmonitored"].cost == D("48.16")
    assert by_device[f"{R1}/unmonitored"].present_s == 7 * 3600.0
    assert _total(hours(engine)) == D("660.48")


def test_lines_gone_leave_no_billing_prices(engine: Engine) -> None:
    add(engine, [p5_day(), *present_8(R1, range(2, 5))])
    reprice(engine, *MONTH)
    with Session(engine) as session:
        session.execute(delete(BillingLine))
        session.commit()
    reprice(engine, DAY3, at(24))
    rows = hours(engine)
    assert len(rows) == 24 and all(r.cost is None and r.rate_source is None for r in rows)
    assert rates(engine) == [] and _total([r for r in days(engine) if r.cost is not None]) == 0


def test_integer_allocation_matches_money_allocate() -> None:
    from fractions import Fraction

    for total, weights in (
        (D("22.688"), [1] * 6),
        (D("-1.000000001"), [1, 2, 0]),
        (D("0.000000005"), [3, 3, 1]),
    ):
        nanos = allocate_nanos(int(total.scaleb(9)), [Fraction(w) for w in weights])
        assert [D(n).scaleb(-9) for n in nanos] == allocate(total, weights)


# --- property: conservation and idempotence for random bills and random presence -------------------

_line = st.tuples(
    st.sampled_from(["i-a", "i-b"]),
    st.integers(0, 1),  # day
    st.booleans(),  # daily (True) or one hour (False)
    st.integers(0, 23),  # hour of an hourly line
    st.integers(0, 24 * 8),  # GPU-hours of a daily line (8-GPU instance)
    st.decimals(D("-50"), D("2000"), places=9),
)


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(_line, min_size=1, max_size=5),
    presence=st.lists(
        st.tuples(
            st.sampled_from(["i-a", "i-b"]),
            st.integers(0, 47),
            st.integers(1, 8),
            st.floats(0, 3600).map(lambda s: round(s, 3)),
        ),
        max_size=8,
    ),  # fmt: skip
)
def test_cost_is_conserved_and_reprice_is_idempotent(sqlite_url: str, lines, presence) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine(sqlite_url)
    try:
        empty(engine)
        bill: dict[str, Decimal] = {}
        rows: list = []
        for rid, day, daily, hour, gpu_h, cost in lines:
            start = at(24 * day) if daily else at(24 * day + hour)
            end = start + dt.timedelta(hours=24 if daily else 1)
            gh = D(gpu_h) if daily else D(8)
            rows.append(line(rid, start, end, str(cost), gpu_count=8, gpu_hours=gh, usage_quantity=gh / 8))
            bill[rid] = bill.get(rid, D(0)) + cost
        seen = set()
        for rid, h, gpus, secs in presence:
            for g in range(gpus):
                if (rid, h, g) not in seen:
                    seen.add((rid, h, g))
                    rows.append(ledger(h, f"{rid}/gpu{g}", rid, present=secs))
        add(engine, rows)
        reprice(engine, *MONTH)
        got: dict[str, Decimal] = {}
        for r in hours(engine):
            if r.cost is not None:
                got[r.instance_id] = got.get(r.instance_id, D(0)) + r.cost
        assert {k: v for k, v in got.items() if v} == {k: v for k, v in bill.items() if v}
        once = snapshot(engine)
        reprice(engine, *MONTH)
        assert snapshot(engine) == once
    finally:
        engine.dispose()
