"""``/metrics`` of the agent, with dcgm-exporter's metric names, units and labels.

Dashboards and alerts written for NVIDIA's dcgm-exporter work unchanged on the latest reading of
each device (docs/formats.md §1):

=====================================  ===========  =============================
name                                   unit         from (ledger metric)
=====================================  ===========  =============================
DCGM_FI_DEV_GPU_UTIL                   % (integer)  gpu_util
DCGM_FI_PROF_SM_ACTIVE                 ratio 0–1    sm_active / 100
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE        ratio 0–1    tensor_active / 100
DCGM_FI_PROF_DRAM_ACTIVE               ratio 0–1    mem_bw / 100
DCGM_FI_DEV_FB_USED / _FB_FREE         MiB          mem_used_b, mem_total_b − mem_used_b
DCGM_FI_DEV_POWER_USAGE                W            power_w
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION   mJ, counter  energy_j × 1000
DCGM_FI_DEV_GPU_TEMP                   °C           temp_c
=====================================  ===========  =============================

Labels: ``gpu`` (index), ``UUID``, ``device`` (``nvidia<index>``), ``modelName``, ``Hostname``,
``pci_bus_id``; a MIG instance carries its parent's and ``GPU_I_PROFILE``. A device held by a
Kubernetes workload adds ``namespace``, ``pod``, ``container`` (from ``k8s:<ns>/<pod>/<container>``
keys, or the workload's namespace and name); a Docker container adds ``container``. A time-sliced
device has one series per workload, as dcgm-exporter does for shared GPUs.

The exposition is rendered here, not by ``generate_latest``: prometheus_client would rename the
energy counter ``…_total``, which is not the name dcgm-exporter dashboards query. And the agent
does not import prometheus_client at all (its memory budget): the text format is a few lines.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from connectors.sdk.metrics import DeviceInfo, SampleBatch, WorkloadInfo

MIB = 1024 * 1024
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: dcgm name → (type, help, ledger metric, scale, integer?)
FIELDS: dict[str, tuple[str, str, str, float, bool]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %).", "gpu_util", 1.0, True),
    "DCGM_FI_PROF_SM_ACTIVE": (
        "gauge",
        "The ratio of cycles an SM has at least 1 warp assigned.",
        "sm_active",
        0.01,
        False,
    ),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": (
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        "tensor_active",
        0.01,
        False,
    ),
    "DCGM_FI_PROF_DRAM_ACTIVE": (
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        "mem_bw",
        0.01,
        False,
    ),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB).", "mem_used_b", 1 / MIB, True),
    "DCGM_FI_DEV_FB_FREE": ("gauge", "Framebuffer memory free (in MiB).", "mem_free_b", 1 / MIB, True),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W).", "power_w", 1.0, False),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": (
        "counter",
        "Total energy consumption since boot (in mJ).",
        "energy_j",
        1000.0,
        True,
    ),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C).", "temp_c", 1.0, True),
}


def workload_labels(key: str, info: WorkloadInfo | None) -> dict[str, str]:
    """dcgm-exporter's Kubernetes labels for a workload key (``connectors.attribution`` keys)."""
    if key.startswith("k8s:"):
        parts = key[4:].split("/")
        if len(parts) == 3 and info is not None and info.namespace:
            return dict(zip(("namespace", "pod", "container"), parts, strict=True))
        return {
            "namespace": (info and info.namespace) or "",
            "pod": (info and info.workload) or "",
            "container": "",
        }
    if key.startswith("docker:"):
        return {"namespace": "", "pod": "", "container": (info and info.workload) or key[7:]}
    return {}


def float_to_go_string(value: float) -> str:
    """A sample value as Prometheus' Go client writes it (prometheus_client's ``floatToGoString``):
    ``+Inf``/``-Inf``/``NaN``, and an exponent for large numbers where Go switches to one."""
    value = float(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return text


@dataclass(slots=True)
class Family:
    """One metric family: its name, help, type and (labels, value) samples."""

    name: str
    documentation: str
    type: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)


class DcgmExporter:
    """The latest reading of each device, as dcgm-exporter metric families."""

    def __init__(self, hostname: str, pci_bus_id: Callable[[str], str | None] = lambda _d: None):
        self.hostname, self.pci_bus_id = hostname, pci_bus_id
        self._lock = threading.Lock()
        self._devices: dict[str, DeviceInfo] = {}
        self._workloads: dict[str, WorkloadInfo] = {}
        self._latest: dict[
            str, tuple[int, dict[str, float], list[str]]
        ] = {}  # device → ts, values, workloads

    def update(self, batch: SampleBatch) -> None:
        """Keep each device's newest reading of ``batch`` (readings older than the kept one are ignored).

        Plain lists, not Polars: a tick is a few dozen readings (see ``spool.tick_record``).
        """
        cols = batch.columns
        rows = list(
            zip(
                cols["device_id"],
                cols["ts_ms"],
                cols["metric"],
                cols["value"],
                cols["workload_key"],
                strict=True,
            )
        )
        newest: dict[str, int] = {}
        for device_id, ts_ms, *_ in rows:
            if ts_ms is not None and ts_ms > newest.get(device_id, -1):
                newest[device_id] = ts_ms
        per_device: dict[str, dict[str, float]] = {}
        workloads: dict[str, set[str]] = {}
        for device_id, ts_ms, metric, value, workload_key in rows:
            if ts_ms != newest.get(device_id) or value is None:
                continue
            per_device.setdefault(device_id, {}).setdefault(metric, value)
            workloads.setdefault(device_id, set()).add(workload_key or "")
        with self._lock:
            self._devices.update((d.device_id, d) for d in batch.devices)
            self._workloads.update((w.workload_key, w) for w in batch.workloads)
            for device_id, ts_ms in newest.items():
                if device_id in self._latest and self._latest[device_id][0] > ts_ms:
                    continue  # a late, older reading: the newer one stays
                readings = per_device.get(device_id, {})
                if "mem_total_b" in readings and "mem_used_b" in readings:
                    readings["mem_free_b"] = readings["mem_total_b"] - readings["mem_used_b"]
                self._latest[device_id] = (ts_ms, readings, sorted(workloads.get(device_id, ())))

    def _labels(self, device: DeviceInfo) -> dict[str, str]:
        parent = self._devices.get(device.parent_device_id or "") if device.parent_device_id else None
        gpu = parent or device
        index = "" if gpu.gpu_index is None else str(gpu.gpu_index)
        labels = {
            "gpu": index,
            "UUID": gpu.device_id,
            "pci_bus_id": self.pci_bus_id(gpu.device_id) or "",
            "device": f"nvidia{index}",
            "modelName": gpu.gpu_model or "",
            "Hostname": self.hostname,
        }
        if device.mig_profile:
            labels["GPU_I_PROFILE"] = device.mig_profile
        return labels

    def collect(self) -> Iterable[Family]:
        with self._lock:
            latest = dict(self._latest)
            devices, workloads = dict(self._devices), dict(self._workloads)
        for name, (kind, doc, metric, scale, integer) in FIELDS.items():
            family = Family(name, doc, kind)
            for device_id, (_ts_ms, readings, keys) in sorted(latest.items()):
                if metric not in readings or device_id not in devices:
                    continue
                value = readings[metric] * scale
                value = float(round(value)) if integer else value
                base = self._labels(devices[device_id])
                for key in keys or [""]:
                    family.samples.append(({**base, **workload_labels(key, workloads.get(key))}, value))
            if family.samples:
                yield family

    def render(self) -> bytes:
        """dcgm-exporter's text exposition: HELP, TYPE, then one line per series."""
        lines: list[str] = []
        for family in self.collect():
            lines.append(f"# HELP {family.name} {family.documentation}")
            lines.append(f"# TYPE {family.name} {family.type}")
            for sample_labels, value in family.samples:
                labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sample_labels.items())
                lines.append(f"{family.name}{{{labels}}} {float_to_go_string(value)}")
        return ("\n".join(lines) + "\n").encode() if lines else b""

    def serve(self, host: str, port: int) -> ThreadingHTTPServer:
        """Serve ``GET /metrics`` on ``host:port`` from a daemon thread; ``shutdown()`` it."""
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802  (http.server's name)
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = exporter.render()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002  (quiet: scrapes every 15 s)
                return

        server = ThreadingHTTPServer((host, port), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name="agent-metrics", daemon=True).start()
        return server


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
