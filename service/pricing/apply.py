"""Pricing ledger rows (docs/design.md §4): one vectorized pass of joins and integer arithmetic.

**Which price.** For each row, the ``GpuRate`` rows of its environment whose non-null matchers
(``instance_id``, ``instance_type``, ``gpu_model``) all equal the row's and whose validity
[valid_from, valid_to) overlaps the row's hour are candidates. The best wins: lowest
``precedence``, then the narrowest match (instance id > instance type > GPU model > environment).
Several winners in one hour (a price change mid-hour) give the hour their time-weighted mean over
the part of the hour they cover; winners in different currencies are a configuration error. Where
no ``GpuRate`` applies, an ``onprem`` row of a configured site is priced by the TCO model
(:mod:`service.pricing.tco`). Anything else stays unpriced (null cost, currency and source).

**How much.** ``cost = hour_rate × present_s/3600 × gpu_fraction`` (+ energy for TCO),
``idle_cost = cost × idle_s/present_s`` (0 when present_s is 0), ``energy_cost`` = the energy part.

**Exactness and rounding.** Every rate is an exact fraction built once per distinct rate, in
Python (``Decimal`` → ``Fraction``): a ``GpuRate`` is its 1e-9-quantized amount (a mid-hour mean is
Σ rate_nanos × overlap_µs / Σ overlap_µs); a TCO rate is ``capex/(years × hours_per_year) + opex``
per GPU-hour and ``price_per_kwh × pue`` per kWh, unrounded. Row inputs are read at fixed
resolutions: ``present_s`` and ``idle_s`` in whole microseconds, ``energy_j`` in whole millijoules,
``tdp_w`` in whole milliwatts (each rounded half-even from the float; ``idle_s`` capped to
``present_s``), ``gpu_fraction`` as the nearest fraction with denominator ≤ 1000 (so MIG's k/7 is
exactly k/7). Each row's amount is then
one exact fraction of 128-bit integers, divided and rounded half-even to 1e-9 **once**:
``cost_nanos``, ``idle_cost_nanos`` and ``energy_cost_nanos`` are each rounded from their own exact
value (so cost − energy_cost may differ from the rounded capex part by 1e-9). An input that could
overflow 128 bits raises :class:`PricingError` instead of wrapping.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

import polars as pl
from polars.expr.whenthen import ChainedThen, Then
from sqlalchemy import or_
from sqlmodel import Session, select
from sqlmodel import col as sql_col

from service.models import GpuRate
from service.pricing.common import PricingConfigError, PricingError
from service.pricing.rates import MATCHERS, RATE_SCHEMA, rates_frame
from service.pricing.tco import SiteConfig, check_sites, match_site
from service.timeutil import hour_start

Q = 3_600_000_000
"""µs per hour, and also mJ per kWh: the one divisor of every amount."""
_MW_US_PER_MJ = 1_000_000  # mW × µs = 1e-6 mJ
_LIMIT = 2**126
_FRACTION_DENOMINATOR = 1000

INPUT_COLUMNS = (
    "hour_index", "environment", "region", "cluster", "instance_id", "instance_type", "gpu_model",
    "gpu_fraction", "tdp_w", "present_s", "idle_s", "energy_j",
)  # fmt: skip
OUTPUT_SCHEMA: dict[str, pl.DataType] = {
    "cost_nanos": pl.Int64(),
    "idle_cost_nanos": pl.Int64(),
    "energy_cost_nanos": pl.Int64(),
    "currency": pl.Utf8(),
    "rate_source": pl.Utf8(),
    "energy_estimated": pl.Boolean(),
}
KEY = ["environment", "instance_id", "instance_type", "gpu_model", "hour_index"]
UNPRICED, RATE, TCO_MEASURED, TCO_ESTIMATED, TCO_NO_ENERGY = range(5)
_I128 = pl.Int128()


@dataclass(frozen=True)
class PriceBook:
    """Everything prices come from: ``GpuRate`` rows as a :data:`RATE_SCHEMA` frame, and sites."""

    rates: pl.DataFrame
    sites: tuple[SiteConfig, ...] = ()

    def __post_init__(self) -> None:
        if dict(self.rates.schema) != RATE_SCHEMA:
            raise ValueError(f"rates frame must have schema {RATE_SCHEMA}, got {dict(self.rates.schema)}")
        check_sites(self.sites)

    @classmethod
    def load(
        cls,
        session: Session,
        sites: Sequence[SiteConfig] = (),
        *,
        start: dt.datetime | None = None,
        end: dt.datetime | None = None,
    ) -> PriceBook:
        """Read ``GpuRate`` rows (those overlapping [start, end) when given) and keep ``sites``."""
        stmt = select(GpuRate)
        if end is not None:
            stmt = stmt.where(sql_col(GpuRate.valid_from) < end)
        if start is not None:
            stmt = stmt.where(or_(sql_col(GpuRate.valid_to).is_(None), sql_col(GpuRate.valid_to) > start))
        return cls.from_rates(session.exec(stmt).all(), sites)

    @classmethod
    def from_rates(cls, rates: Sequence[GpuRate], sites: Sequence[SiteConfig] = ()) -> PriceBook:
        return cls(rates_frame(rates), tuple(sites))


def _hourly_rates(keys: pl.DataFrame, rates: pl.DataFrame) -> pl.DataFrame:
    """Per distinct (environment, matchers, hour): the winning rate as Σ nanos×µs / Σ µs."""
    lo, hi = keys["hour_index"].min(), keys["hour_index"].max()
    far = pl.lit(2**62, dtype=pl.Int64)
    hour = pl.col("hour_index")
    expanded = (
        rates.rename({m: f"_r_{m}" for m in MATCHERS})
        .with_columns(
            _level=pl.when(pl.col("_r_instance_id").is_not_null())
            .then(0)
            .when(pl.col("_r_instance_type").is_not_null())
            .then(1)
            .when(pl.col("_r_gpu_model").is_not_null())
            .then(2)
            .otherwise(3),
            _jk=pl.coalesce(*(pl.col(f"_r_{m}") for m in MATCHERS), pl.lit("")),
            _h0=pl.max_horizontal(pl.col("valid_from_us") // Q, pl.lit(lo)),
            _h1=pl.min_horizontal(((pl.col("valid_to_us") - 1) // Q).fill_null(hi), pl.lit(hi)),
        )
        .filter(pl.col("_h0") <= pl.col("_h1"))
        .with_columns(hour_index=pl.int_ranges(pl.col("_h0"), pl.col("_h1") + 1))
        .explode("hour_index")
        .with_columns(
            _overlap=pl.min_horizontal(pl.col("valid_to_us").fill_null(far), (hour + 1) * Q)
            - pl.max_horizontal(pl.col("valid_from_us"), hour * Q)
        )
        .filter(pl.col("_overlap") > 0)
    )
    # One equi-join per match level, on its narrowest matcher, so no cross product forms.
    parts = [
        keys.with_columns(_jk=pl.col(m) if m else pl.lit("")).join(
            expanded.filter(pl.col("_level") == level), on=["environment", "_jk", "hour_index"]
        )
        for level, m in enumerate((*MATCHERS, None))
    ]
    cands = pl.concat(parts).filter(
        *((pl.col(f"_r_{m}").is_null() | (pl.col(f"_r_{m}") == pl.col(m))).fill_null(False) for m in MATCHERS)
    )
    rank = pl.col("precedence") * 4 + pl.col("_level")
    best = cands.filter(rank == rank.min().over(KEY)).sort("valid_from_us")
    hourly = best.group_by(KEY, maintain_order=True).agg(
        _r_n=(pl.col("rate_nanos").cast(_I128) * pl.col("_overlap").cast(_I128)).sum(),
        _r_d=pl.col("_overlap").cast(_I128).sum(),
        _r_cur=pl.col("currency").first(),
        _n_cur=pl.col("currency").n_unique(),
        _currencies=pl.col("currency").unique(maintain_order=True).str.join(", "),
        _r_src=pl.col("source").unique(maintain_order=True).str.join("+"),
    )
    bad = hourly.filter(pl.col("_n_cur") > 1)
    if bad.height:
        row = bad.row(0, named=True)
        raise PricingConfigError(
            f"rates in different currencies ({row['_currencies']}) apply to the same GPUs in hour "
            f"{hour_start(row['hour_index']).isoformat()}: {row['_r_src']} (environment "
            f"{row['environment']!r}, instance_id={row['instance_id']!r}, instance_type="
            f"{row['instance_type']!r}, gpu_model={row['gpu_model']!r}); give one scope one currency"
        )
    return hourly.drop("_n_cur", "_currencies")


def _tco_constants(rows: pl.DataFrame, sites: Sequence[SiteConfig]) -> pl.DataFrame:
    """Per distinct on-prem (region, cluster, gpu_model) without a ``GpuRate``: site fractions."""
    schema: dict[str, Any] = {c: pl.Utf8 for c in ("environment", "region", "cluster", "gpu_model")}
    schema |= {c: _I128 for c in ("_a_n", "_a_d", "_e_n", "_e_d", "_k_n", "_k_d")}
    schema |= {"_t_cur": pl.Utf8, "_t_src": pl.Utf8}
    records = []
    for region, cluster, model in rows.select("region", "cluster", "gpu_model").unique().iter_rows():
        site = match_site(sites, region, cluster)
        if site is None:
            continue
        a, e, k = site.hourly_nanos(model), site.kwh_nanos(), site.assumed_kwh_nanos()
        records.append(
            ("onprem", region, cluster, model, a.numerator, a.denominator, e.numerator, e.denominator,
             k.numerator, k.denominator, site.currency, f"tco:{site.name}")
        )  # fmt: skip
    return pl.DataFrame(records, schema=schema, orient="row")


def _amounts(case: int, v: Any) -> dict[str, tuple[Any, Any]]:
    """Exact (numerator, denominator) of total, idle and energy nanos for one pricing case.

    ``v`` holds polars Int128 expressions, or Python ints (absolute maxima) to bound magnitudes.
    Rates are nanos per GPU-hour (r, a), nanos per kWh (e, k = e × assumed_load); p, i in µs,
    m in mJ, tdp in mW, gpu fraction fn/fd.
    """
    if case in (RATE, TCO_NO_ENERGY):
        rn, rd = (v.rn, v.rd) if case == RATE else (v.an, v.ad)
        den = rd * Q * v.fd
        return {"total": (rn * v.p * v.fn, den), "idle": (rn * v.i * v.fn, den)}
    if case == TCO_ESTIMATED:
        rn = v.an * v.kd * _MW_US_PER_MJ + v.kn * v.tdp * v.ad  # capex+opex+TDP energy per GPU-hour
        den = v.ad * v.kd * _MW_US_PER_MJ * Q * v.fd
        return {
            "total": (rn * v.p * v.fn, den),
            "idle": (rn * v.i * v.fn, den),
            "energy": (v.kn * v.tdp * v.p * v.fn, v.kd * _MW_US_PER_MJ * Q * v.fd),
        }
    # TCO_MEASURED: capex a·p·F/Q plus energy e·m/Q (Q µs per hour = Q mJ per kWh); idle × i/p
    den = v.ad * v.fd * v.ed * Q
    capex_n = v.an * v.fn * v.ed
    energy_n = v.en * v.m * v.ad * v.fd
    return {
        "total": (capex_n * v.p + energy_n, den),
        "idle": (capex_n * v.i * v.p + energy_n * v.i, den * v.p),
        "energy": (v.en * v.m, v.ed * Q),
    }


def _by_case(branches: list[tuple[int, pl.Expr]]) -> pl.Expr:
    """Per row, the branch of the row's pricing case (null for a case without one)."""
    chain: Then | ChainedThen = pl.when(pl.col("_case") == branches[0][0]).then(branches[0][1])
    for case, value in branches[1:]:
        chain = chain.when(pl.col("_case") == case).then(value)
    return chain.otherwise(None)


def _round_half_even(num: pl.Expr, den: pl.Expr) -> pl.Expr:
    """num/den (den > 0) rounded half-even to an integer, as Int64."""
    q = num // den
    twice_r = (num - q * den) * 2
    up = (twice_r > den) | ((twice_r == den) & (q % 2 != 0))
    return (q + up.cast(_I128)).cast(pl.Int64)


def _check_magnitudes(work: pl.DataFrame, names: dict[str, str]) -> None:
    maxima = work.select(pl.col(c).cast(_I128).abs().max().alias(k) for k, c in names.items()).row(0)
    bounds = SimpleNamespace(**{k: int(x or 0) for k, x in zip(names, maxima, strict=True)})
    for case in (RATE, TCO_MEASURED, TCO_ESTIMATED, TCO_NO_ENERGY):
        for what, (n, d) in _amounts(case, bounds).items():
            if n >= _LIMIT or d >= _LIMIT:
                raise PricingError(
                    f"{what} amounts exceed exact 128-bit arithmetic; use fewer decimals in the "
                    "pricing configuration or price shorter spans"
                )


def _fractions(values: pl.Series) -> pl.DataFrame:
    nums, dens = [], []
    for value in values:
        if value < 0:
            raise PricingError(f"gpu_fraction {value} is negative")
        f = Fraction(value).limit_denominator(_FRACTION_DENOMINATOR)
        nums.append(f.numerator)
        dens.append(f.denominator)
    return pl.DataFrame(
        {"gpu_fraction": values, "_fn": nums, "_fd": dens},
        schema={"gpu_fraction": pl.Float64, "_fn": _I128, "_fd": _I128},
    )


def _to_int(col: str, scale: float) -> pl.Expr:
    return (pl.col(col).cast(pl.Float64) * scale).round(0).cast(pl.Int64)


def price_rows(rows: pl.DataFrame, book: PriceBook) -> pl.DataFrame:
    """``rows`` (ledger rows with :data:`INPUT_COLUMNS`) plus :data:`OUTPUT_SCHEMA`'s columns, in
    input order. See the module docstring for selection and rounding. An input
    ``energy_estimated`` column is kept (or-ed with the TDP estimate)."""
    missing = [c for c in INPUT_COLUMNS if c not in rows.columns]
    if missing:
        raise ValueError(f"rows lack columns {missing}")
    for col in ("hour_index", "environment", "gpu_fraction", "present_s"):
        if rows[col].null_count():
            raise PricingError(f"rows have null {col}")
    flag_in = pl.lit(False)
    if "energy_estimated" in rows.columns:
        flag_in = pl.col("energy_estimated").fill_null(False)
    base = rows.with_columns(
        pl.col("environment", "region", "cluster", "instance_id", "instance_type", "gpu_model").cast(pl.Utf8),
        pl.col("gpu_fraction", "tdp_w", "present_s", "idle_s", "energy_j").cast(pl.Float64),
        pl.col("hour_index").cast(pl.Int64),
        _flag_in=flag_in,
    ).drop([c for c in OUTPUT_SCHEMA if c in rows.columns])
    base = base.with_row_index("_row").with_columns(
        _p=_to_int("present_s", 1e6).clip(lower_bound=0),
        _m=_to_int("energy_j", 1e3),
        _tdp=_to_int("tdp_w", 1e3),
    )
    base = base.with_columns(_i=_to_int("idle_s", 1e6).fill_null(0).clip(0, pl.col("_p")))
    base = base.join(_fractions(base["gpu_fraction"].unique()), on="gpu_fraction", how="left")

    keys = base.select(KEY).unique()
    if book.rates.height and keys.height:
        base = base.join(_hourly_rates(keys, book.rates), on=KEY, how="left", nulls_equal=True)
    else:
        base = base.with_columns(
            _r_n=pl.lit(None, _I128), _r_d=pl.lit(None, _I128), _r_cur=pl.lit(None, pl.Utf8),
            _r_src=pl.lit(None, pl.Utf8),
        )  # fmt: skip
    tco_rows = base.filter(pl.col("_r_n").is_null() & (pl.col("environment") == "onprem"))
    tco = _tco_constants(tco_rows, book.sites)
    base = base.join(tco, on=["environment", "region", "cluster", "gpu_model"], how="left", nulls_equal=True)

    case = (
        pl.when(pl.col("_r_n").is_not_null()).then(RATE)
        .when(pl.col("_a_n").is_null()).then(UNPRICED)
        .when(pl.col("_m").is_not_null()).then(TCO_MEASURED)
        .when(pl.col("_tdp").is_not_null()).then(TCO_ESTIMATED)
        .otherwise(TCO_NO_ENERGY)
    )  # fmt: skip
    base = base.with_columns(_case=case)

    names = {"p": "_p", "i": "_i", "m": "_m", "tdp": "_tdp", "fn": "_fn", "fd": "_fd"}
    names |= {x: f"_{x[0]}_{x[1]}" for x in ("rn", "rd", "an", "ad", "en", "ed", "kn", "kd")}
    _check_magnitudes(base, names)
    v = SimpleNamespace(**{k: pl.col(c).cast(_I128) for k, c in names.items()})

    is_case = pl.col("_case")
    exact: dict[str, pl.Expr] = {}
    for what in ("total", "idle", "energy"):
        nums, dens = [], []
        for c in (RATE, TCO_MEASURED, TCO_ESTIMATED, TCO_NO_ENERGY):
            pair = _amounts(c, v).get(what)
            if pair is None:
                continue
            n, d = pair
            if what == "idle" and c == TCO_MEASURED:  # idle share of a present_s = 0 row is 0
                n, d = pl.when(v.p > 0).then(n).otherwise(0), pl.when(v.p > 0).then(d).otherwise(1)
            nums.append((c, n))
            dens.append((c, d))
        exact[f"_{what}_n"], exact[f"_{what}_d"] = _by_case(nums), _by_case(dens)
    base = base.with_columns(**exact)
    amounts = {w: _round_half_even(pl.col(f"_{w}_n"), pl.col(f"_{w}_d")) for w in ("total", "idle", "energy")}

    tco_case = is_case.is_in([TCO_MEASURED, TCO_ESTIMATED, TCO_NO_ENERGY])
    out = base.with_columns(
        cost_nanos=amounts["total"],
        idle_cost_nanos=amounts["idle"],
        energy_cost_nanos=amounts["energy"],
        currency=pl.when(is_case == RATE).then(pl.col("_r_cur")).when(tco_case).then(pl.col("_t_cur")),
        rate_source=pl.when(is_case == RATE).then(pl.col("_r_src")).when(tco_case).then(pl.col("_t_src")),
        energy_estimated=pl.col("_flag_in") | (is_case == TCO_ESTIMATED),
    ).sort("_row")
    keep = [c for c in rows.columns if c not in OUTPUT_SCHEMA]
    return out.select(*keep, *(pl.col(c).cast(t) for c, t in OUTPUT_SCHEMA.items()))
