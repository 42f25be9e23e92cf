"""The FOCUS columns of a ledger export, per FOCUS version, as polars expressions.

Input: one row per (hour, device, allocation) with the ledger's dimensions, ``cost``/``idle_cost``
(Decimal), ``billed_n``/``list_n`` (Int128 nanos), GPU-hours and the billing account. Output: the
FOCUS columns of the version in alphabetical order, then the ``x_`` columns. docs/focus.md says
which spec requirement each value meets and why it is what it is.
"""

from __future__ import annotations

from decimal import Decimal

import polars as pl

from service.analytics.frames import INSTANT, MONEY
from service.export.focus_rates import I128, NANOS, half_even

VERSIONS = ("1.0", "1.2")
DEFAULT_VERSION = "1.2"

#: FOCUS's own name of a cloud the ledger knows by its environment (as its FOCUS exports name it).
PROVIDER_NAMES = {"aws": "AWS", "gcp": "Google Cloud", "azure": "Microsoft"}
SERVICE_NAMES = {"aws": "Amazon Elastic Compute Cloud", "gcp": "Compute Engine", "azure": "Virtual Machines"}
ON_PREM_SERVICE = "GPU Compute"
GPU_HOURS_UNIT = "GPU-Hours"  # UnitFormat "<singular-unit>-<plural-time-units>"
TAG_KEYS = ("project", "team", "user", "namespace", "workload")

#: Columns of both versions (1.0 names; 1.2 kept them).
_COMMON = (
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodEnd",
    "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargeFrequency",
    "ChargePeriodEnd", "ChargePeriodStart", "ConsumedQuantity", "ConsumedUnit", "ContractedCost",
    "ContractedUnitPrice", "EffectiveCost", "InvoiceIssuerName", "ListCost", "ListUnitPrice",
    "PricingCategory", "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName", "RegionId",
    "RegionName", "ResourceId", "ResourceName", "ResourceType", "ServiceCategory", "ServiceName", "SkuId",
    "SkuPriceId", "SubAccountId", "SubAccountName", "Tags",
)  # fmt: skip
#: 1.0's columns the ledger has no value for, present (all null) because focus-validator 1.0.0
#: requires every 1.0 column; 1.2 leaves these Conditional/Recommended columns out.
_NULL_IN_1_0 = (
    "AvailabilityZone", "CommitmentDiscountCategory", "CommitmentDiscountId", "CommitmentDiscountName",
    "CommitmentDiscountStatus", "CommitmentDiscountType",
)  # fmt: skip
FOCUS_COLUMNS: dict[str, tuple[str, ...]] = {
    "1.0": tuple(sorted((*_COMMON, *_NULL_IN_1_0))),
    "1.2": tuple(sorted((*_COMMON, "ServiceSubcategory", "SkuMeter"))),
}
#: The custom columns, after the FOCUS ones (FOCUS "Column Handling": the x_ prefix).
X_COLUMNS = (
    "x_Environment", "x_Cluster", "x_Node", "x_DeviceId", "x_GpuModel", "x_InstanceType", "x_MigProfile",
    "x_Project", "x_Team", "x_User", "x_Namespace", "x_Workload", "x_RateSource",
    "x_GpuHours", "x_EffectiveGpuHours", "x_UtilizationMetric", "x_IdleGpuHours", "x_IdleCost",
)  # fmt: skip


def columns(version: str) -> tuple[str, ...]:
    return (*FOCUS_COLUMNS[version], *X_COLUMNS)


def _money(n: pl.Expr) -> pl.Expr:
    """Int128 nanos → Decimal(38, 9), exactly."""
    return n.cast(pl.Decimal(38, 0)) * pl.lit(Decimal("0.000000001"), dtype=MONEY)


def _text(value: str) -> pl.Expr:
    return pl.lit(value, dtype=pl.String)


def _null_text() -> pl.Expr:
    return pl.lit(None, dtype=pl.String)


def _tags() -> pl.Expr:
    """A JSON object of the allocation labels that are set (KeyValueFormat: string values, unique
    keys); null for time nobody held. Each pair is JSON-encoded by polars, so quotes and control
    characters in a label are escaped."""
    pairs = [
        pl.when(pl.col(k).is_not_null()).then(
            pl.struct(pl.col(k)).struct.json_encode().str.slice(1).str.head(-1)
        )
        for k in TAG_KEYS
    ]
    body = pl.concat_str(pairs, separator=",", ignore_nulls=True)
    return pl.when(pl.any_horizontal(*(pl.col(k).is_not_null() for k in TAG_KEYS))).then(
        pl.lit("{") + body + pl.lit("}")
    )


def focus_frame(rows: pl.DataFrame, version: str) -> pl.DataFrame:
    """The FOCUS ``version`` columns (then the ``x_`` columns) of ``rows`` (see the module docstring)."""
    onprem = pl.col("environment") == "onprem"
    cloud_name = pl.col("environment").replace_strict(PROVIDER_NAMES, default=None, return_dtype=pl.String)
    site = pl.when(pl.col("rate_source").str.starts_with("tco:")).then(pl.col("rate_source").str.slice(4))
    provider = (
        pl.when(onprem)
        .then(pl.coalesce(site, pl.col("region"), _text("on-premises")))
        .otherwise(pl.coalesce(cloud_name, pl.col("provider"), pl.col("environment")))
    )
    service = pl.col("environment").replace_strict(
        SERVICE_NAMES, default=ON_PREM_SERVICE, return_dtype=pl.String
    )
    quantity_n = (pl.col("gpu_hours") * NANOS).round(0, mode="half_to_even").cast(I128)
    cost_n = pl.col("cost_n")
    start = pl.col("period_start")
    resource_id = pl.when(onprem).then(pl.col("device")).otherwise(pl.coalesce("instance_id", "device"))
    sku = pl.concat_str(
        [pl.col("environment"), pl.coalesce("instance_type", "gpu_model", _text("GPU"))], separator="/"
    )
    model = pl.coalesce(pl.col("gpu_model") + _text(" "), _text(""))
    frame = rows.with_columns(
        _q=quantity_n,
        _provider=provider,
        _resource=resource_id,
        _sku=_text(GPU_HOURS_UNIT + "/") + sku,
    ).with_columns(
        # ListUnitPrice × PricingQuantity = ListCost to within rounding: a GPU-hour count of a
        # MIG 1/7 slice has no finite decimal form, so no unit price makes the product exact.
        _unit=pl.when(pl.col("_q") > 0).then(half_even(pl.col("list_n") * NANOS, pl.col("_q"))),
    )
    account = pl.when(~onprem).then(pl.col("account"))
    values: dict[str, pl.Expr] = {
        "AvailabilityZone": _null_text(),
        "BilledCost": _money(pl.col("billed_n")),
        "BillingAccountId": pl.when(onprem)
        .then(pl.col("_provider"))
        .otherwise(pl.coalesce("billing_account", "account", "_provider")),
        "BillingAccountName": pl.when(onprem).then(pl.col("_provider")).otherwise(_null_text()),
        "BillingCurrency": pl.col("currency"),
        "BillingPeriodStart": start.dt.truncate("1mo"),
        "BillingPeriodEnd": start.dt.truncate("1mo").dt.offset_by("1mo"),
        "ChargeCategory": _text("Usage"),
        "ChargeClass": _null_text(),
        "ChargeDescription": model + _text(f"{GPU_HOURS_UNIT} of ") + pl.col("device"),
        "ChargeFrequency": _text("Usage-Based"),
        "ChargePeriodStart": start,
        "ChargePeriodEnd": start.dt.offset_by("1h"),
        "CommitmentDiscountCategory": _null_text(),
        "CommitmentDiscountId": _null_text(),
        "CommitmentDiscountName": _null_text(),
        "CommitmentDiscountStatus": _null_text(),
        "CommitmentDiscountType": _null_text(),
        "ConsumedQuantity": _money(pl.col("_q")),
        "ConsumedUnit": _text(GPU_HOURS_UNIT),
        # The ledger keeps no negotiated price apart from the list price: "defaults to the List Cost".
        "ContractedCost": _money(pl.col("list_n")),
        "ContractedUnitPrice": _money(pl.col("_unit")),
        "EffectiveCost": _money(cost_n),
        "InvoiceIssuerName": pl.col("_provider"),
        "ListCost": _money(pl.col("list_n")),
        "ListUnitPrice": _money(pl.col("_unit")),
        "PricingCategory": pl.when(pl.col("from_bill") & (pl.col("billed_n") == 0) & (cost_n != 0))
        .then(_text("Committed"))
        .otherwise(_text("Standard")),
        "PricingQuantity": _money(pl.col("_q")),
        "PricingUnit": _text(GPU_HOURS_UNIT),
        "ProviderName": pl.col("_provider"),
        "PublisherName": pl.col("_provider"),
        "RegionId": pl.col("region"),
        "RegionName": pl.col("region"),
        "ResourceId": pl.col("_resource"),
        "ResourceName": pl.when(pl.col("device") != pl.col("_resource")).then(pl.col("device")),
        "ResourceType": pl.when(pl.col("mig_profile").is_not_null())
        .then(_text("GPU MIG Instance"))
        .otherwise(_text("GPU")),
        "ServiceCategory": _text("Compute"),
        "ServiceSubcategory": pl.when(onprem)
        .then(_text("Other (Compute)"))
        .otherwise(_text("Virtual Machines")),
        "ServiceName": service,
        "SkuId": pl.col("_sku"),
        "SkuMeter": _text(GPU_HOURS_UNIT),
        "SkuPriceId": pl.concat_str([pl.col("_sku"), pl.col("rate_source")], separator="@"),
        "SubAccountId": account,
        "SubAccountName": account,
        "Tags": _tags(),
        "x_Environment": pl.col("environment"),
        "x_Cluster": pl.col("cluster"),
        "x_Node": pl.col("node"),
        "x_DeviceId": pl.col("device"),
        "x_GpuModel": pl.col("gpu_model"),
        "x_InstanceType": pl.col("instance_type"),
        "x_MigProfile": pl.col("mig_profile"),
        "x_Project": pl.col("project"),
        "x_Team": pl.col("team"),
        "x_User": pl.col("user"),
        "x_Namespace": pl.col("namespace"),
        "x_Workload": pl.col("workload"),
        "x_RateSource": pl.col("rate_source"),
        "x_GpuHours": pl.col("gpu_hours"),
        "x_EffectiveGpuHours": pl.col("effective_gpu_hours"),
        "x_UtilizationMetric": pl.col("metric").str.to_uppercase(),
        "x_IdleGpuHours": pl.col("idle_gpu_hours"),
        "x_IdleCost": pl.col("idle_cost"),
    }
    return frame.select(values[name].alias(name) for name in columns(version)).with_columns(
        pl.col(c).cast(INSTANT)
        for c in ("BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd")
    )
