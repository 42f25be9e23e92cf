"""Which FOCUS rows are GPUs, for any provider: the patterns and the one pass that applies them.

The three clouds' instance types are in the instance catalog; a provider outside them (Oracle,
Lambda, CoreWeave…) arrives through FOCUS with no catalog entry, so its GPU rows are recognised
from what the row says: a ``ConsumedUnit`` in GPU-hours, an OCI GPU shape, a GPU count stated in
``SkuPriceDetails`` or in a description (``8x H100``), or a SKU naming a GPU. Each pattern runs
once a row, over the row's texts joined into one.
"""

from __future__ import annotations

import polars as pl

#: The three clouds, whose instance types the catalog knows (their descriptions are not searched).
CLOUDS: tuple[str, ...] = ("aws", "gcp", "azure")

#: A ``ConsumedUnit`` in GPU-hours (``GPU Hours``, ``GPU-Hours``, ``GPU Per Hour``): the row's
#: quantity already is GPU-hours, whatever the provider.
GPU_UNIT = r"(?i)^\s*GPUs?[\s_-]*(?:per[\s_-]*)?(?:hours?|hrs?|h)\s*$"
#: A SKU that is the GPU itself (GCP bills GPUs as their own SKUs): its name says GPU.
GPU_SKU = r"(?i)\bGPUs?\b"
#: GPU models by name, for providers outside :data:`CLOUDS` (``Compute - GPU - H100``).
GPU_MODELS = (
    r"(?:A100|H100|H200|H20|B200|B300|GB200|GB300|L40S|L40|L4|A10G|A10|A30|A40|V100|P100|T4|"
    r"MI300X|MI325X|MI355X|MI250X?|RTX\s?PRO\s?6000|RTX\s?6000|A6000)"
)
#: Text naming a GPU, for providers outside :data:`CLOUDS`.
GPU_TEXT = rf"(?i)\bGPUs?\b|\b{GPU_MODELS}\b"
#: A GPU count the text states: ``8x H100``, ``8 x NVIDIA H100``, ``GPU_8xH100``, ``8 GPUs``.
GPU_COUNT_TEXT: tuple[str, ...] = (
    rf"(?i)(?:^|[^\d.])(\d{{1,3}})\s*[x×]\s*(?:nvidia\s+|amd\s+)?(?:tesla\s+|instinct\s+)?{GPU_MODELS}\b",
    r"(?i)(?:^|[^\d.])(\d{1,3})\s*GPUs?\b",
)
#: A GPU count in ``SkuPriceDetails`` (FOCUS 1.1+ JSON): ``GpuCount`` or another spelling of it
#: (``GPUCount``, ``gpu_count``, ``x_GpuCount``, ``GPUs``), as a number or a quoted number.
GPU_COUNT_KEY = r'(?i)"(?:x_)?(?:gpu_?count|gpus|number_?of_?gpus)"\s*:\s*"?\s*(\d+)'
#: An OCI GPU shape named in the row (``BM.GPU.H100.8``, ``BM.GPU.A100-v2.8``, ``VM.GPU.A10.1``):
#: its instance type; the catalog (or the shape's last number) gives its GPUs.
OCI_GPU_SHAPE = r"(?i)\b((?:BM|VM)\.GPU[0-9]*(?:\.[A-Za-z0-9][A-Za-z0-9-]*)+)"
#: AWS usage types of instance hours: ``[REGION-]BoxUsage:<type>`` (also Spot, Dedicated, Host).
AWS_INSTANCE_USAGE = r"^(?:[A-Z0-9]+-)?(?:BoxUsage|SpotUsage|DedicatedUsage|HostBoxUsage|SchedUsage):(.+)$"


def text_of(column: str) -> pl.Expr:
    """Trimmed text, empty → null."""
    text = pl.col(column).str.strip_chars()
    return pl.when(text == "").then(None).otherwise(text)


#: Between a row's texts joined into one (a control character no pattern matches or counts as space).
_JOIN = "\x1f"


def _gputext_of(x_columns: tuple[str, ...]) -> pl.Expr:
    """The texts of a row that may name a GPU, joined (each pattern runs once a row, not once a
    column): descriptions, resource type, SKU and the file's ``x_`` columns."""
    columns: tuple[str, ...] = ("ChargeDescription", "SkuMeter", "x_SkuDescription", "ResourceType", "SkuId")
    columns += tuple(c for c in x_columns if c not in columns)
    return pl.concat_str([pl.col(c).fill_null("") for c in columns], separator=_JOIN)


def with_gpu_facts(frame: pl.DataFrame, provider: pl.Expr, x_columns: tuple[str, ...]) -> pl.DataFrame:
    """``frame`` with ``_shape`` (an OCI GPU shape the row names), ``_gpu_count`` (GPUs the row
    states) and ``_gpu_sku`` (the row is the GPU itself, its hours GPU-hours) — each computed once.

    * ``_gpu_count``: ``SkuPriceDetails`` (any provider), else — for a provider outside
      :data:`CLOUDS` — a count its texts state (``8x H100``, ``8 GPUs``).
    * ``_gpu_sku``: a SKU meter or description naming a GPU (GCP GPU SKUs), a ``ConsumedUnit`` in
      GPU-hours, or — for a provider outside :data:`CLOUDS`, when no shape is named — a text naming
      a GPU (``Compute - GPU - H100``); never where a GPU count is known (the row is the instance)."""
    other = ~provider.is_in(CLOUDS)
    text = pl.col("_gpu_text")
    frame = frame.with_columns(_gputext_of(x_columns).alias("_gpu_text"))
    shape_text = pl.concat_str(
        [pl.col("SkuPriceDetails").fill_null(""), pl.col("ResourceName").fill_null(""), text], separator=_JOIN
    )
    details = text_of("SkuPriceDetails").str.extract(GPU_COUNT_KEY, 1).cast(pl.Int32, strict=False)
    stated = pl.coalesce(
        [text.str.extract(pattern, 1).cast(pl.Int32, strict=False) for pattern in GPU_COUNT_TEXT]
    )
    frame = frame.with_columns(
        shape_text.str.extract(OCI_GPU_SHAPE, 1).alias("_shape"),
        pl.coalesce(details, pl.when(other).then(stated)).alias("_gpu_count"),
    )
    named = other & pl.col("_shape").is_null() & text.str.contains(GPU_TEXT)
    sku = (
        text_of("SkuMeter").str.contains(GPU_SKU).fill_null(False)
        | text_of("x_SkuDescription").str.contains(GPU_SKU).fill_null(False)
        | gpu_unit()
        | named.fill_null(False)
    )
    return frame.with_columns((sku & pl.col("_gpu_count").is_null()).alias("_gpu_sku")).drop("_gpu_text")


def gpu_unit() -> pl.Expr:
    return text_of("ConsumedUnit").str.contains(GPU_UNIT).fill_null(False)
