"""Which vendor made an accelerator, from its model name when the source does not say.

``DeviceInfo.vendor`` is ``nvidia``, ``amd``, ``intel`` or ``huawei``. A connector that knows
(an exporter profile, an SMI tool) sets it; otherwise the service derives it from ``gpu_model``
with :func:`vendor_of` — at ingest, for a bill's pseudo-devices, and in the migration that added
the column. Models are named as their vendor names them (``NVIDIA H100 80GB HBM3``,
``AMD Instinct MI300X``, ``Intel(R) Data Center GPU Max 1550``, ``Ascend910B``), but bare names
(``H100``, ``A10G``, ``MI250X``, ``Gaudi2``) are recognised too. The patterns are searched in this
order, case-insensitively; the first that matches names the vendor. A model none matches has no
vendor (NULL), never a guess.

Imports nothing beyond the standard library (the node agent imports the SDK).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

from connectors.sdk.metrics import DeviceInfo
from connectors.sdk.shapes import VENDORS

if TYPE_CHECKING:
    import polars as pl

__all__ = ["PATTERNS", "VENDORS", "vendor_expr", "vendor_of", "with_vendor"]

#: vendor → regular expression, searched in order, case-insensitively and with ASCII meanings of
#: ``\b`` and classes (Python's ``re.ASCII``, the Rust ``regex`` crate's ``(?-u)`` in Polars), so
#: both engines read any text alike (a superscript digit is no word character in either)
PATTERNS: tuple[tuple[str, str], ...] = (
    ("huawei", r"ascend|huawei"),
    ("intel", r"\bintel\b|gaudi|data center gpu (?:max|flex)|\bhl-[0-9]{3}\b|\barc[ \t]*a[0-9]{3}"),
    ("amd", r"\bamd\b|instinct|radeon|\bmi[0-9]{2,3}[a-z]?\b"),
    (
        "nvidia",
        r"nvidia|tesla|geforce|quadro|\brtx\b|\bgh200\b|\bgb[0-9]{3}\b|\b[abhlvtpkm][0-9]{1,3}[a-z]{0,3}\b",
    ),
)
_COMPILED = tuple((vendor, re.compile(pattern, re.IGNORECASE | re.ASCII)) for vendor, pattern in PATTERNS)


def vendor_of(gpu_model: str | None) -> str | None:
    """The vendor a model name says, or None (see the module docstring)."""
    if not gpu_model:
        return None
    return next((vendor for vendor, pattern in _COMPILED if pattern.search(gpu_model)), None)


def with_vendor(device: DeviceInfo) -> DeviceInfo:
    """``device`` with its vendor derived from ``gpu_model`` where the source gave none."""
    if device.vendor is not None:
        return device
    vendor = vendor_of(device.gpu_model)
    return device if vendor is None else replace(device, vendor=vendor)  # type: ignore[arg-type]


def vendor_expr(gpu_model: str = "gpu_model") -> pl.Expr:
    """:func:`vendor_of` as a Polars expression over the text column ``gpu_model`` (vectorized)."""
    import polars as pl

    found = pl.lit(None, pl.String)
    for vendor, pattern in reversed(PATTERNS):  # the first pattern that matches wins
        ascii_ci = f"(?i-u){pattern}"  # as re.IGNORECASE | re.ASCII above
        found = pl.when(pl.col(gpu_model).str.contains(ascii_ci)).then(pl.lit(vendor)).otherwise(found)
    return found.alias("vendor")
