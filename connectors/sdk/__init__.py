"""The GPU Ledger connector SDK: everything a connector plugin imports, and nothing from ``service``.

A plugin imports from this package (``from connectors.sdk import MetricsConnector, SampleBatch``).
The service depends on it; it depends on no service module (tests/test_import_direction.py).

- ``metrics``: ``MetricsConnector`` Protocol, ``SampleBatch``, ``DeviceInfo``, ``WorkloadInfo``,
  ``Sampling``, ``SAMPLE_SCHEMA``;
- ``billing``: ``BillingSource`` Protocol, ``BillingBatch``, ``BILLING_SCHEMA``, ``RefusedRow``, ``Finding``,
  ``BillingFileError``, ``BillingConfig``;
- ``facts``: ``WorkloadFactsSource`` Protocol and ``FactsBatch`` (sources of attribution facts only:
  a scheduler's accounting, an inventory);
- ``config``: ``ConnectorConfig``; ``errors``: ``ConnectorStatus`` and the error classes;
- ``units``: metric keys and their units; ``currencies``: ISO 4217 codes; ``timeutil``: UTC helpers.

Polars-backed names (``SAMPLE_SCHEMA`` and the whole billing half) and the pydantic-backed
``ConnectorConfig`` are loaded on first use (PEP 562), so the node agent, which imports the
metrics half and must stay small, never loads Polars or pydantic.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from connectors.sdk.currencies import BILLING_CURRENCIES
from connectors.sdk.errors import (
    ConfigurationError,
    ConnectorError,
    ConnectorStatus,
    FatalSourceError,
    RetriableError,
    close_connector,
)
from connectors.sdk.facts import FactsBatch, WorkloadFactsSource
from connectors.sdk.metrics import (
    SAMPLE_COLUMNS,
    SAMPLE_TEXT_COLUMNS,
    DeviceInfo,
    MetricsConnector,
    SampleBatch,
    Sampling,
    WorkloadInfo,
    categorical_sample_schema,
    devices_in,
    empty_samples,
    sample_dtype_ok,
)
from connectors.sdk.timeutil import EPOCH, UTC, as_utc, from_ms, parse_utc, to_ms
from connectors.sdk.units import (
    COUNTER_METRICS,
    GAUGE_METRICS,
    MEASURED_METRICS,
    UTIL_METRICS,
    Metric,
)

if TYPE_CHECKING:  # the lazy names below, typed for mypy and editors
    from connectors.sdk.billing import (
        BILLING_SCHEMA,
        MONEY,
        UTC_TIME,
        BillingBatch,
        BillingConfig,
        BillingFileError,
        BillingSource,
        ChargeCategory,
        Finding,
        PricingModel,
        RefusedRow,
        conform,
        empty_lines,
        merge_findings,
    )
    from connectors.sdk.config import ConnectorConfig, FactsConnectorConfig
    from connectors.sdk.metrics import SAMPLE_SCHEMA

#: Names whose module imports Polars (or pydantic: ``ConnectorConfig``): resolved on first access.
_LAZY: dict[str, str] = {
    "SAMPLE_SCHEMA": "connectors.sdk.metrics",
    "ConnectorConfig": "connectors.sdk.config",
    "FactsConnectorConfig": "connectors.sdk.config",
    **dict.fromkeys(
        (
            "BILLING_SCHEMA",
            "MONEY",
            "UTC_TIME",
            "BillingBatch",
            "BillingConfig",
            "BillingFileError",
            "BillingSource",
            "ChargeCategory",
            "Finding",
            "PricingModel",
            "RefusedRow",
            "conform",
            "empty_lines",
            "merge_findings",
        ),
        "connectors.sdk.billing",
    ),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "BILLING_CURRENCIES",
    "COUNTER_METRICS",
    "EPOCH",
    "GAUGE_METRICS",
    "MEASURED_METRICS",
    "SAMPLE_COLUMNS",
    "SAMPLE_TEXT_COLUMNS",
    "UTC",
    "UTIL_METRICS",
    "ConfigurationError",
    "ConnectorConfig",
    "FactsConnectorConfig",
    "ConnectorError",
    "ConnectorStatus",
    "DeviceInfo",
    "FactsBatch",
    "FatalSourceError",
    "Metric",
    "MetricsConnector",
    "RetriableError",
    "SampleBatch",
    "Sampling",
    "WorkloadFactsSource",
    "WorkloadInfo",
    "as_utc",
    "categorical_sample_schema",
    "close_connector",
    "devices_in",
    "empty_samples",
    "from_ms",
    "parse_utc",
    "sample_dtype_ok",
    "to_ms",
    # loaded lazily (see _LAZY)
    "BILLING_SCHEMA",
    "MONEY",
    "SAMPLE_SCHEMA",
    "UTC_TIME",
    "BillingBatch",
    "BillingConfig",
    "BillingFileError",
    "BillingSource",
    "ChargeCategory",
    "Finding",
    "PricingModel",
    "RefusedRow",
    "conform",
    "empty_lines",
    "merge_findings",
]
