"""The metric keys a sample may carry, their units, and what kind of reading each one is
(docs/design.md §2)."""

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
