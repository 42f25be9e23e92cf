"""What the bill says beside the ledger's cost: billed and list amounts of cloud rows priced from
bills, and the billing account of each cloud account.

The ledger stores one cost per row: the *effective* cost (docs/design.md §4, docs/billing.md "From a bill
to the ledger"): re-pricing splits each resource-hour's effective bill share over its device rows
and keeps the resource-hour's rates — effective, billed and list per GPU-hour of ``max(B, P)`` —
as ``GpuRate`` rows of kind ``billing`` scoped to the instance. A row's billed (list) amount is
therefore its cost × billed ÷ effective rate of its instance-hour, rounded half-even to 1e-9 once:
equal to the cost where the bill's billed equals its effective cost (on-demand), 0 where a
commitment covered it (billed 0, FOCUS's rule), the discount's share otherwise. Where the
effective rate is 0 (a fully credited hour) the billed amount is rate × GPU-hours.

Integer nanos (Int128) throughout: no float touches money.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import polars as pl
from sqlalchemy import Connection, or_, select

from service.dbtypes import table_of
from service.models import BillingLine, GpuRate
from service.pricing.rates import BILLING_KIND
from service.timeutil import hour_index

I128 = pl.Int128()
NANOS = 1_000_000_000
_RATE = table_of(GpuRate)
_LINE = table_of(BillingLine)
RATE_SCHEMA = {
    "instance_id": pl.String(),
    "start_h": pl.Int64(),
    "end_h": pl.Int64(),
    "r_eff": I128,
    "r_billed": I128,
    "r_list": I128,
}


def half_even(numerator: pl.Expr, denominator: pl.Expr) -> pl.Expr:
    """``numerator / denominator`` (Int128, ``denominator`` ≠ 0) rounded half to even."""
    sign = pl.when(denominator < 0).then(pl.lit(-1, I128)).otherwise(pl.lit(1, I128))
    n, d = numerator * sign, denominator * sign
    q = n // d  # floor: the remainder is in [0, d)
    twice = (n - q * d) * 2
    up = (twice > d) | ((twice == d) & (q % 2 == 1))
    return q + up.cast(I128)


def nanos(money: str) -> pl.Expr:
    """A ``Decimal(38, 9)`` column as Int128 nanos (exact: the scale is 9)."""
    return (pl.col(money) * NANOS).cast(I128)


def _n(value: Any) -> int | None:
    return None if value is None else int(value.scaleb(9))


def billing_rates(
    conn: Connection, instance_ids: Sequence[str], start: dt.datetime, end: dt.datetime
) -> pl.DataFrame:
    """The ``billing`` rates of ``instance_ids`` overlapping ``[start, end)``: one row per run of
    hours ``[start_h, end_h)`` (end null: open), rates in nanos per GPU-hour. Runs are few (one
    per resource and stretch of equal rates), so their rows are read as Python tuples."""
    if not instance_ids:
        return pl.DataFrame(schema=RATE_SCHEMA)
    r = _RATE.c
    stmt = select(
        r.instance_id,
        r.valid_from,
        r.valid_to,
        r.effective_per_gpu_hour,
        r.billed_per_gpu_hour,
        r.list_per_gpu_hour,
    ).where(  # fmt: skip
        r.source_kind == BILLING_KIND,
        r.instance_id.in_(sorted(set(instance_ids))),
        r.valid_from < end,
        or_(r.valid_to.is_(None), r.valid_to > start),
    )
    rows = conn.execute(stmt).all()
    columns = {
        "instance_id": [x[0] for x in rows],
        "start_h": [hour_index(x[1]) for x in rows],
        "end_h": [None if x[2] is None else hour_index(x[2]) for x in rows],
        "r_eff": [_n(x[3]) for x in rows],
        "r_billed": [_n(x[4]) for x in rows],
        "r_list": [_n(x[5]) for x in rows],
    }
    return pl.DataFrame(columns, schema=RATE_SCHEMA).sort("start_h")


def billing_accounts(conn: Connection, accounts: Sequence[str]) -> pl.DataFrame:
    """``account`` → ``billing_account`` as the bills name it (the lowest where several do)."""
    schema = {"account": pl.String(), "billing_account": pl.String()}
    if not accounts:
        return pl.DataFrame(schema=schema)
    c = _LINE.c
    stmt = (
        select(c.account, c.billing_account)
        .where(c.account.in_(sorted(set(accounts))), c.billing_account.is_not(None))
        .group_by(c.account, c.billing_account)
    )
    pairs = conn.execute(stmt).all()
    frame = pl.DataFrame(
        {"account": [p[0] for p in pairs], "billing_account": [p[1] for p in pairs]}, schema=schema
    )
    return frame.group_by("account").agg(pl.col("billing_account").min())


def with_bill_amounts(rows: pl.DataFrame, rates: pl.DataFrame) -> pl.DataFrame:
    """``rows`` (``h``, ``instance_id``, ``from_bill``, ``cost_n``, ``gpu_hours``) with
    ``billed_n`` and ``list_n`` (Int128 nanos; see the module docstring). Rows not priced from a
    bill, or whose instance-hour has no billing rate, keep their cost as both."""
    keyed = rows.with_row_index("_order").sort("h")
    joined = keyed.join_asof(
        rates, left_on="h", right_on="start_h", by="instance_id", strategy="backward", check_sortedness=False
    ).sort("_order")
    usable = (
        pl.col("from_bill")
        & pl.col("r_eff").is_not_null()
        & (pl.col("end_h").is_null() | (pl.col("h") < pl.col("end_h")))
    )
    cost = pl.col("cost_n")

    def amount(rate: str) -> pl.Expr:
        by_ratio = half_even(cost * pl.col(rate), pl.col("r_eff"))
        by_hours = (
            (pl.col(rate).cast(pl.Float64) * pl.col("gpu_hours")).round(0, mode="half_to_even").cast(I128)
        )
        scaled = pl.when(pl.col("r_eff") != 0).then(by_ratio).otherwise(by_hours)
        return pl.when(usable & pl.col(rate).is_not_null()).then(scaled)

    billed = pl.coalesce(amount("r_billed"), cost)
    return (
        joined.with_columns(billed.alias("billed_n"))
        .with_columns(
            # No list price on the bill: the list amount is the billed one (FOCUS ListCost rule).
            pl.coalesce(amount("r_list"), pl.col("billed_n")).alias("list_n")
        )
        .drop("_order", "start_h", "end_h", "r_eff", "r_billed", "r_list")
    )
