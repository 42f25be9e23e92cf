"""The ledger's reading of the metric keys: utilization histogram edges, the idle threshold and the
default metric. The keys themselves and their units are the connector SDK's
(``connectors.sdk.units``); they are re-exported here for the service's and older plugins' imports.
"""

from __future__ import annotations

from connectors.sdk.units import COUNTER_METRICS as COUNTER_METRICS
from connectors.sdk.units import GAUGE_METRICS as GAUGE_METRICS
from connectors.sdk.units import MEASURED_METRICS as MEASURED_METRICS
from connectors.sdk.units import UTIL_METRICS as UTIL_METRICS
from connectors.sdk.units import Metric as Metric

#: Edges (percent) of the utilization histogram kept per ledger row for the default metric.
#: Bucket i holds seconds with edges[i] <= util < edges[i+1]; the last bucket includes 100.
HIST_EDGES_PCT: tuple[int, ...] = (0, 1, 5, 10, 25, 50, 75, 100)
HIST_COLUMNS: tuple[str, ...] = tuple(
    f"hist_{lo}_{hi}_s" for lo, hi in zip(HIST_EDGES_PCT[:-1], HIST_EDGES_PCT[1:], strict=True)
)

#: Default idle threshold: a device interval is idle when its utilization is strictly below this.
DEFAULT_IDLE_THRESHOLD_PCT = 5.0


def default_metric(available: set[str] | frozenset[str]) -> Metric:
    """SM activity where the device has it, else nvidia-smi's GPU util (docs/design.md §2)."""
    return Metric.SM_ACTIVE if Metric.SM_ACTIVE in available else Metric.GPU_UTIL
