"""The metric keys a sample may carry, and what kind of reading each one is (DESIGN §2)."""

from __future__ import annotations

from enum import StrEnum


class Metric(StrEnum):
    """Metric keys of a sample. Units are in the names; utilization is a percentage 0–100."""

    GPU_UTIL = "gpu_util"  # % of time any kernel ran (nvidia-smi "GPU util")
    SM_ACTIVE = "sm_active"  # % SM activity (GPM / DCGM PROF, scaled from 0–1 to 0–100 by the connector)
    TENSOR_ACTIVE = "tensor_active"  # % tensor-pipe activity
    MEM_BW = "mem_bw"  # % DRAM bandwidth utilization
    POWER_W = "power_w"  # gauge, watts
    ENERGY_J = "energy_j"  # monotonically increasing counter, joules (resets to 0 on driver reload)
    MEM_USED_B = "mem_used_b"  # gauge, bytes
    MEM_TOTAL_B = "mem_total_b"  # gauge, bytes
    TEMP_C = "temp_c"  # gauge, degrees Celsius
    # The device existed at ts and nothing was measured: a source that knows a GPU is there
    # (Azure's nodeGpuCapacity, an inventory) but has no reading of it. Counts toward presence
    # only — present and unobserved, never idle; the value is ignored (send 1).
    PRESENT = "present"


UTIL_METRICS: tuple[Metric, ...] = (Metric.GPU_UTIL, Metric.SM_ACTIVE, Metric.TENSOR_ACTIVE, Metric.MEM_BW)
GAUGE_METRICS: tuple[Metric, ...] = (
    *UTIL_METRICS,
    Metric.POWER_W,
    Metric.MEM_USED_B,
    Metric.MEM_TOTAL_B,
    Metric.TEMP_C,
)
COUNTER_METRICS: tuple[Metric, ...] = (Metric.ENERGY_J,)
#: Everything a GPU reports about itself (all but the presence-only ``present``).
MEASURED_METRICS: tuple[Metric, ...] = (*GAUGE_METRICS, *COUNTER_METRICS)

#: Edges (percent) of the utilization histogram kept per ledger row for the default metric.
#: Bucket i holds seconds with edges[i] <= util < edges[i+1]; the last bucket includes 100.
HIST_EDGES_PCT: tuple[int, ...] = (0, 1, 5, 10, 25, 50, 75, 100)
HIST_COLUMNS: tuple[str, ...] = tuple(
    f"hist_{lo}_{hi}_s" for lo, hi in zip(HIST_EDGES_PCT[:-1], HIST_EDGES_PCT[1:], strict=True)
)

#: Default idle threshold: a device interval is idle when its utilization is strictly below this.
DEFAULT_IDLE_THRESHOLD_PCT = 5.0


def default_metric(available: set[str] | frozenset[str]) -> Metric:
    """SM activity where the device has it, else nvidia-smi's GPU util (DESIGN §2)."""
    return Metric.SM_ACTIVE if Metric.SM_ACTIVE in available else Metric.GPU_UTIL
