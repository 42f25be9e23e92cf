"""price_rows: rate selection, TCO, MIG, mid-hour changes, unpriced rows — exact hand-computed values."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import polars as pl
import pytest

from service.models import GpuRate
from service.money import from_nanos
from service.pricing import (
    PriceBook,
    PricingConfigError,
    PricingError,
    RateCardConfig,
    SiteConfig,
    price_rows,
)
from service.timeutil import hour_start

H = 490_000  # 2025-11-24T16:00Z
T0 = hour_start(H)
DAY = dt.timedelta(days=1)


def row(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "hour_index": H, "environment": "aws", "region": None, "cluster": None, "instance_id": "i-1",
        "instance_type": "p5.48xlarge", "gpu_model": "H100", "gpu_fraction": 1.0, "tdp_w": 700.0,
        "present_s": 3600.0, "idle_s": 0.0, "energy_j": None,
    }  # fmt: skip
    return base | kw


def frame(*rows: dict[str, Any]) -> pl.DataFrame:
    schema = {
        c: pl.Utf8 for c in ("environment", "region", "cluster", "instance_id", "instance_type", "gpu_model")
    }
    schema |= {c: pl.Float64 for c in ("gpu_fraction", "tdp_w", "present_s", "idle_s", "energy_j")}
    return pl.DataFrame(list(rows), schema={"hour_index": pl.Int64, **schema})


def card(
    name: str, rate: str, frm: dt.datetime = T0 - DAY, to: dt.datetime | None = None, **kw: Any
) -> GpuRate:
    return RateCardConfig(
        name=name, environment=kw.pop("environment", "aws"), rate_per_gpu_hour=Decimal(rate),
        currency=kw.pop("currency", "USD"), valid_from=frm, valid_to=to, **kw,
    ).to_gpu_rate()  # fmt: skip


def billing(ref: str, rate: str, instance_id: str = "i-1", **kw: Any) -> GpuRate:
    return GpuRate(
        source_kind="billing", source_ref=ref, precedence=10, environment=kw.pop("environment", "aws"),
        instance_id=instance_id, valid_from=kw.pop("valid_from", T0), valid_to=kw.pop("valid_to", T0 + DAY),
        effective_per_gpu_hour=Decimal(rate), currency=kw.pop("currency", "USD"), **kw,
    )  # fmt: skip


def money(out: pl.DataFrame, col: str = "cost_nanos") -> list[Decimal | None]:
    return [None if v is None else from_nanos(v) for v in out[col]]


DC1 = SiteConfig(
    name="dc1", match_region="fra", currency="EUR", capex_per_gpu={"H100": Decimal(35000)},
    price_per_kwh=Decimal("0.12"), pue=Decimal("1.3"), opex_per_gpu_hour=Decimal("0.25"),
)  # fmt: skip


def onprem(**kw: Any) -> dict[str, Any]:
    return row(
        **({"environment": "onprem", "region": "fra", "instance_id": None, "instance_type": None} | kw)
    )


# --- on-prem TCO -------------------------------------------------------------------------------
# capex 35,000 € / (4 y × 8,760 h/y = 35,040 h) = 0.998858447488584474885844…  €/GPU-h (= 875/876)
# + opex 0.25                                    = 1.248858447488584474885844…  €/GPU-h


def test_tco_measured_energy() -> None:
    # energy 2,520,000 J = 0.7 kWh × 0.12 €/kWh × PUE 1.3 = 0.1092 €
    # total 1.248858447488584… + 0.1092 = 1.358058447488584… → 1.358058447 (half-even at 1e-9)
    out = price_rows(frame(onprem(energy_j=2_520_000.0)), PriceBook.from_rates([], [DC1]))
    assert money(out) == [Decimal("1.358058447")]
    assert money(out, "energy_cost_nanos") == [Decimal("0.1092")]
    assert money(out, "idle_cost_nanos") == [Decimal(0)]
    assert out["currency"].to_list() == ["EUR"]
    assert out["rate_source"].to_list() == ["tco:dc1"]
    assert out["energy_estimated"].to_list() == [False]


def test_tco_tdp_estimate_is_flagged_and_idle_share() -> None:
    # no energy measured: 700 W × 0.5 assumed load × 3600 s = 1,260,000 J = 0.35 kWh
    # × 0.12 × 1.3 = 0.0546 €; total 1.248858447488584… + 0.0546 = 1.303458447488584… → 1.303458447
    # idle 900 of 3600 s: 1.303458447488584… / 4 = 0.325864611872146… → 0.325864612
    out = price_rows(frame(onprem(idle_s=900.0)), PriceBook.from_rates([], [DC1]))
    assert money(out) == [Decimal("1.303458447")]
    assert money(out, "energy_cost_nanos") == [Decimal("0.0546")]
    assert money(out, "idle_cost_nanos") == [Decimal("0.325864612")]
    assert out["energy_estimated"].to_list() == [True]


def test_tco_capex_accrues_for_idle_and_half_hour_presence() -> None:
    # present 1800 s, all idle, 0 J measured: 1.248858447488584… / 2 = 0.624429223744292… → 0.624429224
    out = price_rows(
        frame(onprem(present_s=1800.0, idle_s=1800.0, energy_j=0.0)), PriceBook.from_rates([], [DC1])
    )
    assert money(out) == [Decimal("0.624429224")]
    assert money(out, "idle_cost_nanos") == [Decimal("0.624429224")]
    assert money(out, "energy_cost_nanos") == [Decimal(0)]


def test_tco_without_energy_or_tdp_prices_capex_only() -> None:
    out = price_rows(frame(onprem(tdp_w=None)), PriceBook.from_rates([], [DC1]))
    assert money(out) == [Decimal("1.248858447")]
    assert money(out, "energy_cost_nanos") == [None]
    assert out["energy_estimated"].to_list() == [False]


def test_tco_missing_capex_names_site_and_model() -> None:
    with pytest.raises(PricingConfigError, match=r"site 'dc1' has no capex for GPU model 'A100'"):
        price_rows(frame(onprem(gpu_model="A100")), PriceBook.from_rates([], [DC1]))
    with_default = DC1.model_copy(update={"default_capex_per_gpu": Decimal(17520)})
    # 17,520 / 35,040 = 0.5 + 0.25 opex, no energy: 0.75
    out = price_rows(frame(onprem(gpu_model="A100", tdp_w=None)), PriceBook.from_rates([], [with_default]))
    assert money(out) == [Decimal("0.75")]


def test_site_by_cluster_beats_site_by_region() -> None:
    lab = SiteConfig(name="lab", match_cluster="k8s-lab", currency="EUR", default_capex_per_gpu=Decimal(0),
                     price_per_kwh=Decimal(0), opex_per_gpu_hour=Decimal("0.1"))  # fmt: skip
    rows = frame(onprem(cluster="k8s-lab"), onprem(cluster="k8s-prod", tdp_w=None))
    out = price_rows(rows, PriceBook.from_rates([], [DC1, lab]))
    assert out["rate_source"].to_list() == ["tco:lab", "tco:dc1"]
    assert money(out) == [Decimal("0.1"), Decimal("1.248858447")]


def test_onprem_rate_card_beats_tco() -> None:
    book = PriceBook.from_rates([card("onprem-flat", "1.50", environment="onprem")], [DC1])
    out = price_rows(frame(onprem(energy_j=2_520_000.0)), book)
    assert money(out) == [Decimal("1.5")]
    assert out["rate_source"].to_list() == ["rate_card:onprem-flat"]
    assert money(out, "energy_cost_nanos") == [None]


# --- rate cards and billing rates ---------------------------------------------------------------


def test_mig_fraction() -> None:
    # 2.10 $/GPU-h × 3/7 = 0.90; × 1/7 = 0.30; full GPU with 1800 s idle: idle 1.05
    book = PriceBook.from_rates([card("h100", "2.10", gpu_model="H100")])
    out = price_rows(frame(row(gpu_fraction=3 / 7), row(gpu_fraction=1 / 7), row(idle_s=1800.0)), book)
    assert money(out) == [Decimal("0.9"), Decimal("0.3"), Decimal("2.1")]
    assert money(out, "idle_cost_nanos") == [Decimal(0), Decimal(0), Decimal("1.05")]
    assert out["currency"].to_list() == ["USD"] * 3
    assert money(out, "energy_cost_nanos") == [None] * 3


def test_rate_card_change_mid_hour_is_time_weighted() -> None:
    # 2.00 until :30, 3.00 from :30: hour H is (2.00 × 1800 + 3.00 × 1800) / 3600 = 2.50; H+1 is 3.00
    half = T0 + dt.timedelta(minutes=30)
    book = PriceBook.from_rates([card("old", "2.00", to=half, gpu_model="H100"),
                                 card("new", "3.00", frm=half, gpu_model="H100")])  # fmt: skip
    out = price_rows(frame(row(), row(hour_index=H + 1), row(hour_index=H - 1, present_s=900.0)), book)
    assert money(out) == [Decimal("2.5"), Decimal("3"), Decimal("0.5")]
    assert out["rate_source"].to_list() == ["rate_card:old+rate_card:new", "rate_card:new", "rate_card:old"]


def test_rate_change_at_20_minutes_rounds_once() -> None:
    # (2 × 1200 + 3 × 2400) / 3600 = 2.6666…; × 3600/3600 → 2.666666667; × 1/7 → 0.380952380952… → 0.380952381
    at20 = T0 + dt.timedelta(minutes=20)
    book = PriceBook.from_rates([card("old", "2", to=at20), card("new", "3", frm=at20)])
    out = price_rows(frame(row(), row(gpu_fraction=1 / 7)), book)
    assert money(out) == [Decimal("2.666666667"), Decimal("0.380952381")]


def test_rate_covering_part_of_the_hour_prices_the_whole_presence() -> None:
    # The only rate begins at :30: the hour's rate is its mean over the part it covers (4.00).
    book = PriceBook.from_rates([card("late", "4", frm=T0 + dt.timedelta(minutes=30))])
    assert money(price_rows(frame(row()), book)) == [Decimal("4")]


def test_billing_rate_beats_rate_card_and_instance_type_beats_gpu_model() -> None:
    rates = [
        card("env-wide", "1.00"),
        card("h100", "2.00", gpu_model="H100"),
        card("p5", "3.00", instance_type="p5.48xlarge"),
        billing("cur:line-7", "4.00", instance_id="i-1"),
    ]
    rows = frame(
        row(),  # billing (precedence 10) wins
        row(instance_id="i-2"),  # instance type card beats gpu model card
        row(instance_id="i-3", instance_type="p4d.24xlarge"),  # gpu model card
        row(instance_id="i-4", instance_type="g6.xlarge", gpu_model="L4"),  # environment-wide
        row(hour_index=H - 1),  # billing rate not valid yet: p5 card
    )
    out = price_rows(rows, PriceBook.from_rates(rates))
    assert money(out) == [Decimal(4), Decimal(3), Decimal(2), Decimal(1), Decimal(3)]
    assert out["rate_source"].to_list() == [
        "billing:cur:line-7", "rate_card:p5", "rate_card:h100", "rate_card:env-wide", "rate_card:p5",
    ]  # fmt: skip


def test_precedence_outranks_narrowness() -> None:
    # an environment-wide billing rate (10) still beats an instance-type rate card (20)
    book = PriceBook.from_rates(
        [card("p5", "3.00", instance_type="p5.48xlarge"), billing("acct", "5", instance_id=None)]
    )
    assert money(price_rows(frame(row()), book)) == [Decimal(5)]


def test_all_matchers_of_a_rate_must_match() -> None:
    both = card("p5-h100", "7", instance_type="p5.48xlarge", gpu_model="H100")
    out = price_rows(frame(row(), row(gpu_model="H200")), PriceBook.from_rates([both]))
    assert money(out) == [Decimal(7), None]


def test_mixed_currencies_in_one_hour_is_a_configuration_error() -> None:
    half = T0 + dt.timedelta(minutes=30)
    book = PriceBook.from_rates([card("usd", "2", to=half), card("eur", "2", frm=half, currency="EUR")])
    with pytest.raises(
        PricingConfigError, match=r"different currencies \(USD, EUR\).*rate_card:usd\+rate_card:eur"
    ):
        price_rows(frame(row()), book)


def test_unpriced_rows() -> None:
    book = PriceBook.from_rates([card("aws-only", "2")], [DC1])
    rows = frame(
        row(environment="gcp"),
        onprem(region="nyc"),  # on-prem, no site
        row(hour_index=H - 48),  # before the card's validity
    )
    out = price_rows(rows, book)
    for col in ("cost_nanos", "idle_cost_nanos", "energy_cost_nanos", "currency", "rate_source"):
        assert out[col].to_list() == [None, None, None], col
    assert out["energy_estimated"].to_list() == [False, False, False]


def test_keeps_order_and_extra_columns_and_zero_presence() -> None:
    rows = frame(
        row(instance_id="b"), row(instance_id="a", present_s=0.0), row(instance_id="c", environment="gcp")
    )
    rows = rows.with_columns(workload_key=pl.Series(["w1", "w2", "w3"]))
    out = price_rows(rows, PriceBook.from_rates([card("all", "2")]))
    assert out.columns[: len(rows.columns)] == rows.columns
    assert out["workload_key"].to_list() == ["w1", "w2", "w3"]
    assert out["cost_nanos"].to_list() == [2_000_000_000, 0, None]
    assert out["idle_cost_nanos"].to_list() == [0, 0, None]
    assert out.schema["cost_nanos"] == pl.Int64 and out.schema["energy_estimated"] == pl.Boolean


def test_empty_frame() -> None:
    out = price_rows(frame(), PriceBook.from_rates([card("all", "2")], [DC1]))
    assert out.height == 0 and "cost_nanos" in out.columns


def test_too_precise_config_raises_instead_of_overflowing() -> None:
    # 128-bit integers hold every realistic configuration; 20-digit decimals everywhere do not fit.
    wild = DC1.model_copy(
        update={
            "capex_per_gpu": {"H100": Decimal("35000.123456789123456789")},
            "amortization_years": Decimal("3.123456789123"),
            "hours_per_year": Decimal("8760.123456789"),
            "assumed_load": Decimal("0.123456789"),
        }
    )
    with pytest.raises(PricingError, match="exceed exact 128-bit arithmetic"):
        price_rows(frame(onprem()), PriceBook.from_rates([], [wild]))
