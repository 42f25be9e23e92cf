"""GPM (GPU Performance Monitoring, Hopper and later) readings through pynvml.

GPM reports a metric over the interval between two samples (docs/design.md §2: measured on the H200), so
a reader keeps the previous call's sample and its first ``read()`` has nothing to report.
"""

from __future__ import annotations

from typing import Any

from connectors.sdk import Metric

#: Our metric key → the pynvml constant name of its GPM metric (all in percent, 0–100).
GPM_METRICS: dict[str, str] = {
    Metric.SM_ACTIVE.value: "NVML_GPM_METRIC_SM_UTIL",
    Metric.TENSOR_ACTIVE.value: "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
    Metric.MEM_BW.value: "NVML_GPM_METRIC_DRAM_BW_UTIL",
}


def gpm_supported(nvml: Any, handle: Any) -> bool:
    """Whether the GPU behind ``handle`` has GPM; a driver without the GPM symbols raises
    ``NVMLError_FunctionNotFound``, which the caller treats as "no"."""
    return bool(nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)


class GpmReader:
    """GPM metrics of one GPU or MIG instance, each over the interval since the previous read.

    ``handle`` is the GPU's handle; for a MIG instance pass the parent GPU's handle and the
    instance's GPU-instance id (GPM samples MIG instances through their parent).
    A metric the driver refuses once is not asked for again.
    """

    def __init__(self, nvml: Any, handle: Any, gpu_instance_id: int | None = None) -> None:
        self._nvml = nvml
        self._handle = handle
        self._gi = gpu_instance_id
        self._ids = {key: getattr(nvml, name) for key, name in GPM_METRICS.items()}
        # Two samples, swapped every read: the driver fills one while we keep the other.
        self._prev: Any = None
        self._cur: Any = None
        self._have_prev = False

    def _take(self, sample: Any) -> None:
        if self._gi is None:
            self._nvml.nvmlGpmSampleGet(self._handle, sample)
        else:
            self._nvml.nvmlGpmMigSampleGet(self._handle, self._gi, sample)

    def read(self) -> tuple[dict[str, float], set[str]]:
        """Take a sample now; return ``(values, unsupported)``: each metric's percent over the
        interval since the previous read (empty on the first), and the metrics the driver
        refused for this device. NVML errors of the sample calls propagate."""
        nvml = self._nvml
        if self._cur is None:
            self._prev, self._cur = nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()
        self._take(self._cur)
        if not self._have_prev:
            self._prev, self._cur = self._cur, self._prev
            self._have_prev = True
            return {}, set()
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(self._ids)
        request.sample1, request.sample2 = self._prev, self._cur
        for i, metric_id in enumerate(self._ids.values()):
            request.metrics[i].metricId = metric_id
        try:
            nvml.nvmlGpmMetricsGet(request)
        finally:
            # Whatever happened, the sample just taken is the start of the next interval.
            self._prev, self._cur = self._cur, self._prev
        values: dict[str, float] = {}
        refused: set[str] = set()
        for i, key in enumerate(self._ids):
            metric = request.metrics[i]
            if metric.nvmlReturn == nvml.NVML_SUCCESS:
                values[key] = float(metric.value)
            else:
                refused.add(key)
        for key in refused:  # never ask again for a metric this device refused
            del self._ids[key]
        return values, refused

    def close(self) -> None:
        """Free the driver's sample buffers."""
        for sample in (self._prev, self._cur):
            if sample is not None:
                self._nvml.nvmlGpmSampleFree(sample)
        self._prev = self._cur = None
        self._have_prev = False
