"""Kept for the imports of older plugins and of this release's modules: the connector contract now
lives in the SDK package ``connectors.sdk`` (import from there in new code). Entry points and the
``gpu_ledger.connectors`` group are unchanged.
"""

from __future__ import annotations

from typing import Any

from connectors.sdk.config import ConnectorConfig as ConnectorConfig
from connectors.sdk.errors import ConfigurationError as ConfigurationError
from connectors.sdk.errors import ConnectorError as ConnectorError
from connectors.sdk.errors import ConnectorStatus as ConnectorStatus
from connectors.sdk.errors import FatalSourceError as FatalSourceError
from connectors.sdk.errors import RetriableError as RetriableError
from connectors.sdk.errors import close_connector as close_connector
from connectors.sdk.metrics import SAMPLE_COLUMNS as SAMPLE_COLUMNS
from connectors.sdk.metrics import DeviceInfo as DeviceInfo
from connectors.sdk.metrics import MetricsConnector as MetricsConnector
from connectors.sdk.metrics import SampleBatch as SampleBatch
from connectors.sdk.metrics import Sampling as Sampling
from connectors.sdk.metrics import WorkloadInfo as WorkloadInfo
from connectors.sdk.metrics import devices_in as devices_in
from connectors.sdk.metrics import empty_samples as empty_samples


def __getattr__(name: str) -> Any:
    # ``SAMPLE_SCHEMA`` builds a Polars schema: resolved on first use, as in the SDK, so importing
    # this module does not import Polars (the node agent's memory budget).
    if name == "SAMPLE_SCHEMA":
        from connectors.sdk import metrics

        return metrics.SAMPLE_SCHEMA
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
