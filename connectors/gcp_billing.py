"""``gcp_billing``: the Google Cloud Billing export to BigQuery, read from exported files.

Sources: a local directory (read recursively) or file named by ``path``, holding the standard or
resource-level (detailed) export table as BigQuery writes it out: JSON Lines with the nested
records (``service{id,description}``, ``sku``, ``project``, ``labels[]``, ``system_labels[]``,
``location``, ``resource``, ``usage``, ``credits[]``, ``invoice``), Parquet with the same nested
columns, or a flat CSV (a query's output: ``service.id`` / ``service_id`` style names, labels and
credits as JSON text in ``labels_json`` / ``credits_json``). ``.gz`` is undone whatever the name.
Reading straight from BigQuery is not offered (no BigQuery client is a dependency).

Mapping decisions (FORMATS.md §5.2, DESIGN.md §4):

* Money: JSON numbers are read as their own text (``json.loads(parse_float=str)``), CSV cells are
  text, and both become ``Decimal(38, 9)`` without a binary float. Parquet stores IEEE doubles:
  those are rendered to their shortest text first (the export itself is the float then).
* ``billed_cost`` = ``effective_cost`` = ``cost + Σ credits[].amount`` (credits are negative and
  reduce the invoice); ``list_cost`` = ``cost_at_list`` when present, else ``cost`` (gross, before
  credits). Credits per type are kept in ``tags`` as ``"gcp:credit:<TYPE>": "<sum>"``.
* GCE bills a GPU VM as separate SKU rows (GPU, core, RAM, local SSD), tied by
  ``resource.global_name``. A GPU SKU row (``…GPU…`` in the SKU description) has
  ``is_gpu_sku = true`` and ``gpu_hours`` = its usage in hours (``amount_in_pricing_units`` when
  the pricing unit is ``hour``, else ``usage.amount`` seconds / 3600); ``gpu_count`` = GPU-hours
  per hour of the row's window when that is a whole number. The resource's other rows get
  ``is_gpu_sku = false``, ``gpu_hours = 0`` (they bill no GPU-hours: a catalog must not multiply
  208 core-hours by 8 GPUs) and the resource's ``gpu_count``.
* ``resource_id`` = the numeric instance id ending ``resource.global_name``
  (``…/instances/<id>``), which joins the Monitoring ``instance_id``; another resource keeps its
  global name; ``resource_name`` = ``resource.name``.
* ``instance_type`` = the ``compute.googleapis.com/machine_spec`` system label; without it the
  family from a core/RAM SKU of the same resource (``A3 Instance Core …`` → ``a3``), which names no
  GPU count (the catalog will not know it: reported, never priced at 0).
* ``cost_type`` regular → Usage (a ``Commitment …`` SKU → Purchase), tax → Tax, adjustment and
  rounding error → Adjustment. Pricing: ``Spot``/``Preemptible`` SKUs → spot, a committed-use
  credit → commitment, else on demand.
* ``line_key``: the export has no row id, so it is ``sha1:`` + the SHA-1 of the raw line (JSONL,
  CSV) or of the record's JSON (Parquet). Polars' own hash is not stable across versions, so
  hashlib runs once per line; a line seen twice in a file is refused as a duplicate.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar, Literal

import polars as pl
from pydantic import model_validator

from connectors.billing import (
    MONEY,
    BillingBatch,
    BillingConfig,
    BillingFileError,
    ChargeCategory,
    PricingModel,
    RefusedRow,
    conform,
)
from connectors.billing_io import (
    LINE,
    Checks,
    FileBatches,
    csv_frame,
    export_files,
    file_kind,
    json_text,
    line_keys,
    ndjson_records,
    parquet_frame,
    read_bytes,
    refuse_duplicates,
    require_columns,
    sha1_keys,
)
from service.billing.currencies import BILLING_CURRENCIES

_D18 = pl.Decimal(38, 18)  # products and quotients are taken at 18 decimals, then rounded to 9
_LABEL = pl.List(pl.Struct({"key": pl.String(), "value": pl.String()}))
_CREDIT = pl.List(pl.Struct({"name": pl.String(), "amount": pl.String(), "type": pl.String()}))
_TIME_FORMATS = (
    "%Y-%m-%d %H:%M:%S%.f UTC",  # BigQuery's JSON/CSV rendering
    "%Y-%m-%dT%H:%M:%S%.fZ",
    "%Y-%m-%dT%H:%M:%S%.f%:z",
    "%Y-%m-%d %H:%M:%S%.f%:z",  # a Parquet TIMESTAMP cast to text
)
_CATEGORY = {
    "regular": ChargeCategory.USAGE,
    "tax": ChargeCategory.TAX,
    "adjustment": ChargeCategory.ADJUSTMENT,
    "rounding error": ChargeCategory.ADJUSTMENT,
}
# canonical flat column → path in the nested export record
_NESTED: dict[str, tuple[str, ...]] = {
    "billing_account_id": ("billing_account_id",),
    "service_id": ("service", "id"),
    "service_description": ("service", "description"),
    "sku_id": ("sku", "id"),
    "sku_description": ("sku", "description"),
    "usage_start_time": ("usage_start_time",),
    "usage_end_time": ("usage_end_time",),
    "project_id": ("project", "id"),
    "location_region": ("location", "region"),
    "location_zone": ("location", "zone"),
    "resource_name": ("resource", "name"),
    "resource_global_name": ("resource", "global_name"),
    "cost": ("cost",),
    "cost_at_list": ("cost_at_list",),
    "currency": ("currency",),
    "usage_amount": ("usage", "amount"),
    "usage_unit": ("usage", "unit"),
    "usage_amount_in_pricing_units": ("usage", "amount_in_pricing_units"),
    "usage_pricing_unit": ("usage", "pricing_unit"),
    "cost_type": ("cost_type",),
    "invoice_month": ("invoice", "month"),
}
REQUIRED = ("sku_description", "usage_start_time", "usage_end_time", "cost", "currency")
_SUFFIXES = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet"}


class GcpBillingConfig(BillingConfig):
    """``path``: a directory (read recursively) or a file of the BigQuery billing export
    (``.jsonl``/``.json``/``.ndjson``, ``.csv``, ``.parquet``, each optionally ``.gz``)."""

    type: Literal["gcp_billing"] = "gcp_billing"

    @model_validator(mode="after")
    def _needs_path(self) -> GcpBillingConfig:
        if not self.path:
            raise ValueError('"path" is required: the directory or file of the exported billing table')
        return self


class GcpBillingConnector:
    """Reads GCP billing export files; one :class:`BillingBatch` per file."""

    kind: ClassVar[Literal["billing"]] = "billing"
    config_model: ClassVar[type[GcpBillingConfig]] = GcpBillingConfig

    def __init__(self, config: GcpBillingConfig) -> None:
        self.config = config

    def files(self) -> list[Path]:
        return export_files(Path(str(self.config.path)), _SUFFIXES)

    def read(self, start: dt.datetime, end: dt.datetime) -> Iterator[BillingBatch]:
        """Batches of the files with a line charged in ``[start, end)`` (or with no good line:
        their refusals must be seen). A whole unreadable file raises :class:`BillingFileError`
        from ``next()``; the iterator then goes on with the next file."""
        return FileBatches(self.files(), self.read_file, start, end)

    def read_file(self, path: Path, data: bytes | None = None) -> BillingBatch:
        file = str(path)
        raw = read_bytes(path, data)
        kind = file_kind(file, _SUFFIXES)
        if kind == "csv":
            frame, refused = csv_frame(raw, file)
            frame = _from_flat(frame.rename({c: c.replace(".", "_") for c in frame.columns}), file)
            frame = frame.join(line_keys(raw.split(b"\n")), on=LINE, how="left")
            read = frame.height + len(refused)
        elif kind == "parquet":
            frame = parquet_frame(raw, file)
            frame = _from_nested(frame, file) if "sku" in frame.columns else _from_flat(frame, file)
            frame = frame.join(_record_keys(parquet_frame(raw, file)), on=LINE, how="left")
            refused, read = [], frame.height
        else:
            records, refused, read = ndjson_records(raw, file)
            try:
                nested = pl.DataFrame(records, infer_schema_length=None)
            except (pl.exceptions.PolarsError, TypeError, ValueError) as exc:
                raise BillingFileError(file, f"records of different shapes: {exc}") from None
            if nested.is_empty():
                nested = pl.DataFrame({LINE: []}, schema={LINE: pl.Int64})
            frame = _from_nested(nested, file).join(line_keys(raw.split(b"\n")), on=LINE, how="left")
        lines, bad = normalize(frame, file)
        refused = [*refused, *bad]
        return BillingBatch(lines=lines, source_file=file, refused=refused, read=read)

    def close(self) -> None:
        """Nothing to release: files are read whole and closed."""


def _record_keys(frame: pl.DataFrame) -> pl.DataFrame:
    encoded = frame.select(pl.struct(pl.exclude(LINE)).struct.json_encode()).to_series()
    return pl.DataFrame({LINE: frame[LINE], "line_key": sha1_keys(encoded)})


def _path(frame: pl.DataFrame, path: tuple[str, ...]) -> pl.Expr:
    """The nested field ``path`` as text, null when the export has no such field."""
    dtype = frame.schema.get(path[0])
    expr = pl.col(path[0])
    for name in path[1:]:
        fields = {f.name: f.dtype for f in dtype.fields} if isinstance(dtype, pl.Struct) else {}
        if name not in fields:
            return pl.lit(None, pl.String)
        dtype, expr = fields[name], expr.struct.field(name)
    if dtype is None or isinstance(dtype, pl.Struct | pl.List):
        return pl.lit(None, pl.String)
    return expr.cast(pl.String)


def _typed_list(frame: pl.DataFrame, column: str, dtype: pl.DataType) -> pl.Expr:
    if (
        column not in frame.columns
        or frame.schema[column] == pl.List(pl.Null)
        or frame.schema[column] == pl.Null
    ):
        return pl.lit(None, dtype)
    inner = frame.schema[column]
    if not isinstance(inner, pl.List) or not isinstance(inner.inner, pl.Struct):
        return pl.lit(None, dtype)
    names = {f.name for f in inner.inner.fields}
    fields = [
        (pl.element().struct.field(f) if f in names else pl.lit(None)).cast(pl.String).alias(f)
        for f in (fl.name for fl in dtype.inner.fields)  # type: ignore[attr-defined]
    ]
    return pl.col(column).list.eval(pl.struct(fields))


def _from_nested(frame: pl.DataFrame, file: str) -> pl.DataFrame:
    """The nested export (JSONL records, Parquet) as the flat text frame ``normalize`` reads."""
    present = {c for c, p in _NESTED.items() if p[0] in frame.columns}
    require_columns(frame, file, [_NESTED[c][0] for c in REQUIRED if c not in present])
    system = _typed_list(frame, "system_labels", _LABEL)
    spec = system.list.eval(
        pl.element().filter(pl.element().struct.field("key") == "compute.googleapis.com/machine_spec")
    ).list.first()
    return frame.select(
        pl.col(LINE).cast(pl.Int64),
        *(_path(frame, p).alias(c) for c, p in _NESTED.items()),
        spec.struct.field("value").alias("machine_spec"),
        _typed_list(frame, "labels", _LABEL).alias("_labels"),
        _typed_list(frame, "credits", _CREDIT).alias("_credits"),
        pl.lit(None, pl.String).alias("credits_total"),
        pl.lit(False).alias("_credits_bad"),
        pl.lit(False).alias("_labels_bad"),
    )


def _from_flat(frame: pl.DataFrame, file: str) -> pl.DataFrame:
    """A flat export (CSV, flat Parquet): labels and credits arrive as JSON text."""
    require_columns(frame, file, REQUIRED)
    frame = frame.with_columns(pl.col(c).cast(pl.String) for c in frame.columns if c != LINE)
    labels = pl.lit(None, _LABEL)
    if "labels_json" in frame.columns:
        # a JSON list of {key, value}; anything else is refused by ``normalize`` (not decoded here:
        # one bad text would fail the whole column)
        text = pl.col("labels_json").str.strip_chars()
        valid = text.str.json_path_match("$").str.starts_with("[").fill_null(False)
        frame = frame.with_columns((~valid & text.is_not_null() & (text != "")).alias("_labels_bad"))
        frame = frame.with_columns(pl.when(valid).then(text).alias("_labels_text"))
        labels = pl.col("_labels_text").str.json_decode(_LABEL)
    texts = frame["credits_json"].drop_nulls().unique().to_list() if "credits_json" in frame.columns else []
    decoded, broken = [], []
    for text in texts:  # once per distinct credits text (most rows hold "[]"), exact numbers
        try:
            value = json.loads(text, parse_float=str, parse_int=str) if text.strip() else []
            credits = [{k: _text(c.get(k)) for k in ("name", "amount", "type")} for c in value]
        except (json.JSONDecodeError, AttributeError, TypeError):
            credits, value = None, None
        decoded.append(credits)
        broken.append(value is None)
    table = pl.DataFrame(
        {"credits_json": texts, "_credits": decoded, "_credits_bad": broken},
        schema={"credits_json": pl.String, "_credits": _CREDIT, "_credits_bad": pl.Boolean},
    )
    if "credits_json" in frame.columns:
        frame = frame.join(table, on="credits_json", how="left")
    frame = frame.with_columns(
        labels.alias("_labels"),
        pl.col("_credits") if "_credits" in frame.columns else pl.lit(None, _CREDIT).alias("_credits"),
        pl.col("_credits_bad").fill_null(False)
        if "_credits_bad" in frame.columns
        else pl.lit(False).alias("_credits_bad"),
    )
    if "_labels_bad" not in frame.columns:
        frame = frame.with_columns(pl.lit(False).alias("_labels_bad"))
    optional = [*_NESTED, "machine_spec", "credits_total"]
    return frame.with_columns(pl.lit(None, pl.String).alias(c) for c in optional if c not in frame.columns)


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _credit_parts(frame: pl.DataFrame) -> pl.DataFrame:
    """Per line: Σ credits, the credits per type as tag fragments, committed-use flag, bad amount."""
    long = (
        frame.select(LINE, "_credits")
        .explode("_credits")
        .filter(pl.col("_credits").is_not_null())
        .select(
            LINE,
            amount_text=pl.col("_credits").struct.field("amount").str.strip_chars(),
            type=pl.col("_credits").struct.field("type").fill_null("UNKNOWN"),
        )
        .with_columns(amount=pl.col("amount_text").cast(MONEY, strict=False))
    )
    by_type = long.group_by(LINE, "type").agg(
        pl.col("amount").sum(), pl.col("amount").is_null().any().alias("bad")
    )
    return by_type.group_by(LINE).agg(
        pl.col("amount").sum().alias("_credit_sum"),
        pl.format(
            "{}:{}",
            json_text(pl.lit("gcp:credit:") + pl.col("type")),
            json_text(pl.col("amount").cast(pl.String)),
        )
        .sort()
        .str.join(",")
        .alias("_credit_tags"),
        pl.col("type").str.starts_with("COMMITTED_USAGE_DISCOUNT").any().alias("_cud"),
        pl.col("bad").any().alias("_credit_amount_bad"),
    )


def normalize(frame: pl.DataFrame, file: str) -> tuple[pl.DataFrame, list[RefusedRow]]:
    """The flat text frame → (``BILLING_SCHEMA`` lines, refused rows)."""
    parts = _credit_parts(frame)
    frame = frame.join(parts, on=LINE, how="left")
    checks = Checks(file)
    cost = checks.decimal("cost")
    cost_type = pl.col("cost_type").str.strip_chars().str.to_lowercase().fill_null("regular")
    checks.add("cost_type", "unknown cost_type", ~cost_type.is_in(list(_CATEGORY)))
    start = checks.timestamp("usage_start_time", *_TIME_FORMATS)
    end = checks.timestamp("usage_end_time", *_TIME_FORMATS)
    checks.add("usage_end_time", "usage_end_time is not after usage_start_time", end <= start)
    currency = checks.currency("currency", BILLING_CURRENCIES)
    regular = cost_type == "regular"
    amount = checks.decimal("usage_amount", required=False)
    checks.add("usage_amount", "negative usage on a regular row", regular & (amount < 0))
    priced = checks.decimal("usage_amount_in_pricing_units", required=False)
    checks.add("usage_amount_in_pricing_units", "negative usage on a regular row", regular & (priced < 0))
    total = checks.decimal("credits_total", required=False)
    checks.add("credits_json", "credits are not a JSON list", pl.col("_credits_bad"))
    bad_amount = pl.col("_credit_amount_bad").fill_null(False)
    credits = "credits_json" if "credits_json" in frame.columns else "credits"
    checks.add(credits, "a credit amount that is not a number", bad_amount)
    checks.add("labels_json", "labels are not a JSON list of {key, value}", pl.col("_labels_bad"))
    at_list = checks.decimal("cost_at_list", required=False)
    parsed = {
        "_cost": cost,
        "_start": start,
        "_end": end,
        "_currency": currency,
        "_amount": amount,
        "_priced": priced,
        "_credits_sum": pl.coalesce(pl.col("_credit_sum"), total, pl.lit(0).cast(MONEY)),
        "_at_list": at_list,
        "_cost_type": cost_type,
    }
    good, refused = checks.split(frame, parsed)
    good, duplicates = refuse_duplicates(good, file)
    return _to_lines(good, file), [*refused, *duplicates]


def _to_lines(good: pl.DataFrame, file: str) -> pl.DataFrame:
    sku = pl.col("sku_description")
    resource = pl.col("resource_global_name")
    has_resource = resource.is_not_null() & (resource != "")

    def per_resource(expr: pl.Expr, how: str) -> pl.Expr:
        over = getattr(expr, how)().over(resource)
        return pl.when(has_resource).then(over).otherwise(expr)

    commitment_sku = sku.str.starts_with("Commitment")
    is_gpu = sku.str.contains(r"(?i)\bgpu\b") & ~commitment_sku
    category = (
        pl.when(pl.col("_cost_type") != "regular")
        .then(pl.col("_cost_type").replace_strict(_CATEGORY, return_dtype=pl.String))
        .when(commitment_sku)
        .then(pl.lit(ChargeCategory.PURCHASE.value))
        .otherwise(pl.lit(ChargeCategory.USAGE.value))
    )
    pricing = (
        pl.when(category != ChargeCategory.USAGE.value)
        .then(pl.lit(None, pl.String))
        .when(sku.str.contains(r"(?i)\bspot\b|preemptible"))
        .then(pl.lit(PricingModel.SPOT.value))
        .when(pl.col("_cud").fill_null(False))
        .then(pl.lit(PricingModel.COMMITMENT.value))
        .otherwise(pl.lit(PricingModel.ON_DEMAND.value))
    )
    unit = pl.col("usage_pricing_unit").str.strip_chars().str.to_lowercase()
    seconds = pl.col("usage_unit").str.strip_chars().str.to_lowercase().is_in(["seconds", "second", "s"])
    hours_of_use = (
        pl.when(unit == "hour")
        .then(pl.col("_priced"))
        .when(seconds)
        .then((pl.col("_amount").cast(_D18) / pl.lit(3600).cast(_D18)).round(9).cast(MONEY))
    )
    window_h = (pl.col("_end") - pl.col("_start")).dt.total_seconds() / 3600.0
    ratio = hours_of_use.cast(pl.Float64) / window_h  # a whole number or nothing: floats are exact here
    own_count = pl.when(is_gpu & (ratio > 0) & (ratio == ratio.round(0))).then(ratio.round(0).cast(pl.Int32))
    resource_gpu = per_resource(is_gpu, "any")
    gpu_count = per_resource(own_count, "max")
    family = sku.str.extract(
        r"^(?:Spot Preemptible )?([A-Z]\d+[A-Z]?) (?:Predefined |Custom )?Instance (?:Core|Ram)"
    )
    instance_type = pl.coalesce(
        per_resource(pl.col("machine_spec"), "max"), per_resource(family.str.to_lowercase(), "max")
    )
    effective = (pl.col("_cost") + pl.col("_credits_sum")).cast(MONEY)
    labels = pl.col("_labels").list.eval(
        pl.format(
            "{}:{}",
            json_text(pl.element().struct.field("key")),
            json_text(pl.element().struct.field("value")),
        )
    )
    fragments = pl.concat_list(
        labels.fill_null(pl.lit([], pl.List(pl.String))), pl.col("_credit_tags").fill_null("")
    )
    tag_text = fragments.list.eval(pl.element().filter(pl.element() != "")).list.join(",")
    lines = good.select(
        pl.lit(file).alias("source_file"),
        pl.col(LINE).alias("line_no"),
        "line_key",
        pl.lit("gcp").alias("provider"),
        pl.col("billing_account_id").alias("billing_account"),
        pl.col("project_id").alias("account"),
        pl.col("_start").alias("charge_start"),
        pl.col("_end").alias("charge_end"),
        category.alias("charge_category"),
        pl.col("cost_type").alias("charge_type"),
        pricing.alias("pricing_model"),
        pl.coalesce(resource.str.extract(r"/instances/(\d+)$"), pl.when(has_resource).then(resource)).alias(
            "resource_id"
        ),
        pl.col("resource_name"),
        pl.col("service_description").alias("service"),
        pl.col("sku_id").alias("sku"),
        sku.alias("sku_description"),
        instance_type.alias("instance_type"),
        pl.coalesce(pl.col("location_region"), pl.col("location_zone").str.replace(r"-[a-z]$", "")).alias(
            "region"
        ),
        pl.coalesce(pl.col("_priced"), pl.col("_amount")).alias("usage_quantity"),
        pl.when(pl.col("_priced").is_not_null())
        .then(pl.col("usage_pricing_unit"))
        .otherwise(pl.col("usage_unit"))
        .alias("usage_unit"),
        pl.when(resource_gpu).then(gpu_count).alias("gpu_count"),
        pl.when(is_gpu).then(hours_of_use).when(resource_gpu).then(pl.lit(0).cast(MONEY)).alias("gpu_hours"),
        is_gpu.alias("is_gpu_sku"),
        effective.alias("billed_cost"),
        effective.alias("effective_cost"),
        pl.coalesce(pl.col("_at_list"), pl.col("_cost")).alias("list_cost"),
        pl.col("_currency").alias("currency"),
        pl.when(tag_text != "").then(pl.concat_str(pl.lit("{"), tag_text, pl.lit("}"))).alias("tags"),
    )
    return conform(lines)
