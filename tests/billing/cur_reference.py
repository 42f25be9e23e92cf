"""The CUR 2.0 mapping as it was before the columnar rework (``connectors.aws_cur._normalize`` at
``1c2f97b``), kept verbatim as the reference the fast mapping must equal row for row
(``test_aws_cur_equivalence``). Every helper it calls is imported from the connector: only the
arrangement of the work changed (values computed once per column or per distinct value), never
what a helper computes.
"""

# ruff: noqa: E501
from __future__ import annotations

import datetime as dt
import json

import polars as pl

from connectors.aws_cur import (
    _EFFECTIVE_INPUTS,
    _INSTANCE_USAGE,
    _ISO,
    _PERIOD_COLUMNS,
    _REGION_PREFIX,
    _TIME_FORMATS,
    _USAGE_TYPES,
    CATEGORY,
    COVERED,
    DISCOUNTED,
    FEE,
    NEGATION,
    OPTIONAL,
    RI_FEE,
    SP_RECURRING,
    SP_UPFRONT,
    USAGE,
    _canonical_tags,
    _kind,
    _Layout,
    _number,
    _text,
)
from connectors.billing_io import LINE, Checks, Normalized, Split, sha1_keys
from connectors.sdk import BILLING_CURRENCIES, MONEY, UTC_TIME, ChargeCategory, PricingModel


def _optional_number(checks: Checks, column: str, refuse: pl.Expr | None) -> pl.Expr:
    """``column`` as Decimal, empty (or ``NaN``) = null. Text that is no number refuses the row where
    ``refuse`` holds (the row's money is made of it); elsewhere the row is kept, the value null, and
    the finding ``not_a_number`` counted."""
    text = pl.col(column).str.strip_chars()
    text = pl.when(text.is_in(["NaN", "nan", "NAN"])).then(pl.lit("")).otherwise(text)
    value = checks.value(_number(text))
    bad = (text != "") & text.is_not_null() & value.is_null()
    kept = bad
    if refuse is not None:
        checks.add(column, "not a number", bad & refuse)
        kept = bad & ~refuse
    checks.flag(column, "not_a_number", "not a number: read as no value", kept)
    return value


def _with_keys(good: pl.DataFrame, line_id: pl.Expr, columns: list[str]) -> pl.DataFrame:
    """``good`` with ``_key``: ``<line item id>:<usage start>``; a row without a line item id is
    keyed by ``sha1:`` of its fields (the same record gives the same key in every import, and a
    record repeated in the file is still refused as a duplicate). Python per such row only."""
    keyed = good.with_columns((line_id + ":" + pl.col("_start").dt.strftime(_ISO)).alias("_key"))
    without = keyed.filter(pl.col("_key").is_null())
    if without.is_empty():
        return keyed
    content = without.select(pl.struct(columns).struct.json_encode()).to_series()
    keys = pl.DataFrame({LINE: without[LINE], "_content_key": sha1_keys(content)})
    keyed = keyed.join(keys, on=LINE, how="left", maintain_order="left")
    return keyed.with_columns(pl.coalesce("_key", "_content_key").alias("_key")).drop("_content_key")


def _normalize(
    frame: pl.DataFrame,
    layout: _Layout,
    file: str,
    period: tuple[dt.datetime | None, dt.datetime | None] = (None, None),
) -> Normalized:
    """A text chunk → (normalized lines, refused rows, findings); a repeated line key is the
    driver's to refuse.
    ``period``: the file's billing period when its path or manifest names one; else each row's
    ``bill_billing_period_*`` bounds its usage dates."""
    col = layout.col
    file_columns = [x for x in frame.columns if x != LINE]
    for optional in OPTIONAL:  # absent optional columns: null text under their CUR 2.0 name
        if optional not in layout.names and optional not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=pl.String).alias(optional))
    names = {**{c: c for c in OPTIONAL}, **layout.names}
    c = pl.col
    n = names.__getitem__

    checks = Checks(file, money=_number(c(n("line_item_unblended_cost"))), provider=pl.lit("aws"))
    kind = _kind(c(n("line_item_line_item_type")))
    kind_column = n("line_item_line_item_type")
    checks.flag(
        kind_column,
        "unknown_value",
        "unknown line item type: booked as an adjustment at its unblended cost",
        kind.is_null(),
    )
    line_id = n("identity_line_item_id")
    checks.flag(
        line_id,
        "missing_value",
        "empty line item id: keyed by the record's content",
        _text(c(line_id)).is_null(),
    )
    start = checks.timestamp(n("line_item_usage_start_date"), *_TIME_FORMATS)
    end = checks.timestamp(n("line_item_usage_end_date"), *_TIME_FORMATS)
    checks.add(n("line_item_usage_end_date"), "usage end before its start", end < start)
    checks.dates(n("line_item_usage_start_date"), start, n("line_item_usage_end_date"), end)
    has_period = all(c in layout.names for c in _PERIOD_COLUMNS)
    row_lo, row_hi = (checks.timestamp(n(c), *_TIME_FORMATS, required=has_period) for c in _PERIOD_COLUMNS)
    checks.period(n(_PERIOD_COLUMNS[0]), row_lo, row_hi)
    if period[0] is not None and period[1] is not None:
        bounds = (pl.lit(period[0]).cast(UTC_TIME), pl.lit(period[1]).cast(UTC_TIME))
        what = f"the file's billing period {period[0]:%Y-%m-%d}..{period[1]:%Y-%m-%d}"
    else:
        bounds, what = (row_lo, row_hi), "the row's billing period"
    checks.within(n("line_item_usage_start_date"), start, n("line_item_usage_end_date"), end, bounds, what)
    # The usage amount is no money: an unreadable one leaves the line without a quantity (and GPU-hours).
    amount = _optional_number(checks, n("line_item_usage_amount"), None)
    usage_line = kind.is_in(_USAGE_TYPES).fill_null(False)
    checks.flag(
        n("line_item_usage_amount"),
        "missing_value",
        "empty usage amount on a usage line",
        usage_line & _text(c(n("line_item_usage_amount"))).is_null(),
    )
    checks.flag(
        n("line_item_usage_amount"),
        "negative_usage",
        "negative usage amount on a usage line",
        usage_line & (amount < 0),
    )
    currency = checks.currency(n("line_item_currency_code"), BILLING_CURRENCIES)
    unblended = checks.decimal(n("line_item_unblended_cost"))
    public = _optional_number(checks, n("pricing_public_on_demand_cost"), None)
    money: dict[str, pl.Expr] = {
        # a row whose effective cost is made of the column cannot be booked without it
        column: _optional_number(checks, n(column), kind.is_in(used_by).fill_null(False))
        for column, used_by in _EFFECTIVE_INPUTS.items()
    }
    for needed, when in (
        ("savings_plan_savings_plan_effective_cost", COVERED),
        ("reservation_effective_cost", DISCOUNTED),
    ):
        checks.add(
            n(needed),
            f"empty where a number is required on a {when} line",
            (kind == when) & _text(c(n(needed))).is_null(),
        )
    # Tags: a CUR 2.0 map column (JSON text), or legacy one-column-per-tag.
    if layout.tags:
        tag_text = pl.struct(
            [_text(c(col_)).alias(key) for col_, key in layout.tags.items()]
        ).struct.json_encode()
        tag_column = None
    else:
        tag_text = c(n("resource_tags"))
        tag_column = n("resource_tags")
    distinct = _canonical_tags(frame.select(tag_text.alias("t")).to_series())
    tags = tag_text.replace_strict(
        {k: v for k, v in distinct.items() if v is not None}, default=None, return_dtype=pl.String
    ).fill_null("{}")
    if tag_column is not None:
        bad_tags = [k for k, v in distinct.items() if v is None]
        checks.flag(
            tag_column,
            "invalid_tags",
            "not a JSON object of tags: tags dropped",
            c(tag_column).is_in(bad_tags),
        )

    parsed = {
        "_start": start,
        "_end": end,
        "_amount": amount,
        "_currency": currency,
        "_unblended": unblended,
        "_public": public,
        "_tags": tags,
        **{f"_{k}": v for k, v in money.items()},
    }
    good, refused, findings = checks.split(frame, parsed)

    usage_type = _text(col("line_item_usage_type"))
    base_type = usage_type.str.replace(_REGION_PREFIX, "")
    from_usage = base_type.str.extract(_INSTANCE_USAGE + r"([a-z0-9][a-z0-9\-]*\.[a-z0-9\-]+)$", 1)
    # The product map as a JSON object (a Parquet map arrives as key/value pairs); its fields are
    # read once per distinct map (every value of a canonical map is text).
    product_text = good.select(col("product").alias("p")).to_series()
    products = {k: json.loads(v) for k, v in _canonical_tags(product_text).items() if v is not None}

    def product_field(key: str) -> pl.Expr:
        values = {text: fields[key] for text, fields in products.items() if key in fields}
        return col("product").replace_strict(values, default=None, return_dtype=pl.String)

    instance_type = pl.coalesce(
        _text(col("product_instance_type")),
        product_field("instance_type"),
        from_usage,
    )
    gpus = pl.coalesce(_text(col("product_gpu")), product_field("gpu")).cast(pl.Int32, strict=False)
    gpu_count = pl.when(instance_type.is_not_null() & (gpus > 0)).then(gpus)
    # an unknown line item type is booked as an adjustment: its money is on the invoice, and its
    # meaning (usage? a fee?) is not known, so it prices no GPU-hour and no commitment
    category = kind.replace_strict(CATEGORY, default=None, return_dtype=pl.String).fill_null(
        ChargeCategory.ADJUSTMENT.value
    )
    spot = base_type.str.starts_with("SpotUsage:")
    pricing = (
        pl.when((kind == USAGE) & spot.fill_null(False))
        .then(pl.lit(PricingModel.SPOT.value))
        .when(kind == USAGE)
        .then(pl.lit(PricingModel.ON_DEMAND.value))
        .when(kind.is_in([COVERED, NEGATION, DISCOUNTED]))
        .then(pl.lit(PricingModel.COMMITMENT.value))
    )
    zero = pl.lit(0).cast(MONEY)
    sp_unused = (c("_savings_plan_total_commitment_to_date") - c("_savings_plan_used_commitment")).fill_null(
        zero
    )
    ri_unused = c("_reservation_unused_amortized_upfront_fee_for_billing_period").fill_null(zero) + c(
        "_reservation_unused_recurring_fee"
    ).fill_null(zero)
    ri_arn = _text(col("reservation_reservation_a_r_n"))
    effective = (
        pl.when(kind == COVERED)
        .then(c("_savings_plan_savings_plan_effective_cost"))
        .when(kind == DISCOUNTED)
        .then(c("_reservation_effective_cost"))
        .when(kind.is_in([NEGATION, SP_UPFRONT]))
        .then(zero)
        .when(kind == SP_RECURRING)
        .then(sp_unused)
        .when(kind == RI_FEE)
        .then(ri_unused)
        .when((kind == FEE) & ri_arn.is_not_null())
        .then(zero)
        .otherwise(c("_unblended"))
        .cast(MONEY)
    )
    listed = pl.when(c("_public").is_not_null()).then(c("_public")).when(~usage_line).then(zero).cast(MONEY)
    unit = _text(col("pricing_unit"))
    in_hours = unit.str.to_lowercase().is_in(["hrs", "hr", "hours", "hour"]).fill_null(False)
    instance_time = ((category == ChargeCategory.USAGE.value) & in_hours & (kind != NEGATION)).fill_null(
        False
    )
    gpu_hours = (
        pl.when(gpu_count.is_null() | (instance_time & c("_amount").is_null()))
        .then(pl.lit(None, dtype=MONEY))  # not known: no count, or no readable amount
        .when(instance_time & (c("_amount") >= 0))  # a negative amount (flagged) bills no GPU-hours
        .then(c("_amount") * gpu_count)
        .otherwise(zero)
        .cast(MONEY)
    )
    good = _with_keys(good, _text(col("identity_line_item_id")), file_columns)
    lines = good.select(
        pl.lit(file).alias("source_file"),
        c(LINE).alias("line_no"),
        c("_key").alias("line_key"),
        pl.lit("aws").alias("provider"),
        _text(col("bill_payer_account_id")).alias("billing_account"),
        _text(col("line_item_usage_account_id")).alias("account"),
        c("_start").alias("charge_start"),
        c("_end").alias("charge_end"),
        category.alias("charge_category"),
        pl.coalesce(kind, _text(c(kind_column))).alias("charge_type"),
        pricing.alias("pricing_model"),
        pl.coalesce(_text(col("savings_plan_savings_plan_a_r_n")), ri_arn).alias("commitment_id"),
        _text(col("line_item_resource_id")).alias("resource_id"),
        _text(col("line_item_product_code")).alias("service"),
        _text(col("product_sku")).alias("sku"),
        _text(col("line_item_line_item_description")).alias("sku_description"),
        instance_type.alias("instance_type"),
        pl.coalesce(_text(col("product_region_code")), _text(col("product_region"))).alias("region"),
        c("_amount").alias("usage_quantity"),
        unit.alias("usage_unit"),
        gpu_count.alias("gpu_count"),
        gpu_hours.alias("gpu_hours"),
        c("_unblended").alias("billed_cost"),
        effective.alias("effective_cost"),
        listed.alias("list_cost"),
        c("_currency").alias("currency"),
        c("_tags").alias("tags"),
    )
    return Split(lines, refused, findings)
