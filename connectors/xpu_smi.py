"""``xpu-smi``: the node agent's sampler for Intel data-center GPUs (Max, Flex), through Intel's CLI.

``source = "connectors.xpu_smi:XpuSmiSampler"`` in ``[agent]``; ``[agent.source_options]`` as
:class:`connectors.smi_exec.SmiOptions` (``binary`` defaults to ``xpu-smi``). Formats as the CLI
of github.com/intel/xpumanager writes them (``cli/src/comlet_dump.cpp``, ``comlet_discovery``,
``core_stub/devices_stub.cpp``; fixtures in tests/fixtures/xpum/):

* devices: ``xpu-smi discovery -j`` (``device_list``: ``device_id``, ``uuid``, ``device_name``,
  ``pci_device_id``, ``pci_bdf_address``), and per device ``xpu-smi discovery -d N -j`` for
  ``memory_physical_size_byte`` → ``mem_total_b``. Read once, and again when a reading names a
  device id not seen yet.
* a reading: ``xpu-smi dump -d -1 -m 31,9,0,17,1,8,18,3 -n 1`` — one CSV line per GPU
  (device level: tiles averaged for utilizations, summed for memory): compute engine group
  utilization → ``gpu_util`` (where it reads ``N/A``, the all-engines average stands in), EU
  array active → ``sm_active``, memory bandwidth → ``mem_bw``, power (W), energy (J, the
  counter) → ``energy_j``, memory used (MiB) → ``mem_used_b``, core temperature. ``N/A`` (a
  metric the GPU or the user's privileges do not allow) is no reading. Note: ``dump`` sleeps
  ~0.9 s before it reads (its own ``-i 1`` pacing), so a period under 2 s is not useful.

* workloads: ``xpu-smi ps -j`` (``device_util_by_proc_list``: ``process_id``, ``process_name``,
  ``device_id``) — each process through the agent's attributor (cgroup → container or pod, else
  user/command); ``xpu-smi`` itself (listed on every GPU while it asks) is skipped. A GPU with
  processes of several workloads is split evenly between them (the CLI gives no per-process
  utilization); one without any is unallocated. ``processes = false`` skips the call.

Readings carry the agent's clock, not the CSV's ``Timestamp`` (local time without a date). Output
that is not this format raises an error naming the line and column; the agent logs it and tries
again next period.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from connectors.sdk import SAMPLE_COLUMNS, ConnectorError, DeviceInfo, SampleBatch, WorkloadInfo
from connectors.smi_exec import Attributor, ProcessWorkloads, SmiOptions, add_readings, run_tool
from connectors.vendor_names import intel_model

MIB = 1024 * 1024
#: dump metric id → (CSV header as the CLI writes it, ledger metric, factor to the ledger's unit)
DUMP: dict[int, tuple[str, str, float]] = {
    31: ("Compute engine group utilization (%)", "gpu_util", 1.0),
    9: ("GPU EU Array Active (%)", "sm_active", 1.0),
    0: ("Average % utilization of all GPU Engines", "any_engine", 1.0),
    17: ("GPU Memory Bandwidth Utilization (%)", "mem_bw", 1.0),
    1: ("GPU Power (W)", "power_w", 1.0),
    8: ("GPU Energy Consumed (J)", "energy_j", 1.0),
    18: ("GPU Memory Used (MiB)", "mem_used_b", float(MIB)),
    3: ("GPU Core Temperature (Celsius Degree)", "temp_c", 1.0),
}
DUMP_ARGS = ["dump", "-d", "-1", "-m", ",".join(str(m) for m in DUMP), "-n", "1"]
SELF = "xpu-smi"  # the tool lists itself on every GPU while it asks


def parse_dump(text: str) -> dict[str, dict[str, float]]:
    """``xpu-smi dump`` CSV → {device id: {ledger metric: value}} (``N/A`` left out)."""
    lines = [line for line in text.splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if line.startswith("Timestamp,")), None)
    if start is None:
        said = " ".join(text.split())[:200] or "nothing"
        raise ConnectorError(f"xpu-smi dump: no 'Timestamp, DeviceId, …' header in its output: {said}")
    header = [h.strip() for h in lines[start].split(",")]
    by_header = {name: (metric, scale) for name, metric, scale in DUMP.values()}
    if len(header) < 2 or header[1] != "DeviceId":
        raise ConnectorError(
            f"xpu-smi dump line {start + 1}: expected 'Timestamp, DeviceId, …', got {lines[start][:200]!r}"
        )
    readings: dict[str, dict[str, float]] = {}
    for number, line in enumerate(lines[start + 1 :], start + 2):
        if line.startswith("Error"):
            raise ConnectorError(f"xpu-smi dump line {number}: {line.strip()[:200]}")
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(header):
            raise ConnectorError(
                f"xpu-smi dump line {number}: {len(cells)} fields, the header has {len(header)}"
            )
        device = cells[1]
        if not device.isdigit():
            raise ConnectorError(
                f"xpu-smi dump line {number}, column 'DeviceId': {device[:50]!r} is not a device id"
            )
        values: dict[str, float] = {}
        for column, cell in zip(header[2:], cells[2:], strict=True):
            if column not in by_header or cell in ("N/A", ""):
                continue
            metric, scale = by_header[column]
            try:
                value = float(cell)
            except ValueError:
                raise ConnectorError(
                    f"xpu-smi dump line {number}, column {column!r}: {cell[:50]!r} is not a number"
                ) from None
            if value != value or value in (float("inf"), float("-inf")) or value < 0:
                raise ConnectorError(
                    f"xpu-smi dump line {number}, column {column!r}: {cell[:50]!r} is not a reading"
                )
            values[metric] = value * scale
        if "gpu_util" not in values and "any_engine" in values:
            values["gpu_util"] = values["any_engine"]
        values.pop("any_engine", None)
        readings[device] = values
    return readings


def parse_ps(text: str) -> dict[str, list[int]]:
    """``xpu-smi ps -j`` → {device id: process ids} (the tool itself left out)."""
    body = parse_json(text, "xpu-smi ps -j")
    listed = body.get("device_util_by_proc_list", [])
    if not isinstance(listed, list):
        raise ConnectorError("xpu-smi ps -j: device_util_by_proc_list is not a list")
    pids: dict[str, list[int]] = {}
    for n, proc in enumerate(listed):
        pid, device = (
            (proc.get("process_id"), proc.get("device_id")) if isinstance(proc, dict) else (None, None)
        )
        if not isinstance(pid, int) or not isinstance(device, int) or isinstance(pid, bool) or pid <= 0:
            raise ConnectorError(f"xpu-smi ps -j: device_util_by_proc_list[{n}] has no process_id/device_id")
        if proc.get("process_name") != SELF:
            pids.setdefault(str(device), []).append(pid)
    return pids


def parse_json(text: str, what: str) -> Mapping[str, Any]:
    """One JSON object the CLI printed; an error answer (``{"error": …}``) or other text raises."""
    try:
        body = json.loads(text)
    except ValueError:
        said = " ".join(text.split())[:200] or "nothing"
        raise ConnectorError(f"{what}: not JSON: {said}") from None
    if not isinstance(body, dict):
        raise ConnectorError(f"{what}: expected a JSON object, got {type(body).__name__}")
    if "error" in body:
        raise ConnectorError(f"{what}: {str(body['error'])[:200]}")
    return body


class XpuSmiSampler:
    """Intel GPUs of this node through ``xpu-smi`` (see the module docstring)."""

    def __init__(
        self,
        config: Mapping[str, Any] | SmiOptions,
        attributor: Attributor | None = None,
        *,
        run: Callable[[list[str], float], str] = run_tool,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.options = SmiOptions.parse(config, binary="xpu-smi")
        self._workloads = ProcessWorkloads(attributor)
        self._run, self._clock = run, clock
        self._devices: dict[str, DeviceInfo] = {}
        self._mem_total: dict[str, float] = {}
        self._bdf: dict[str, str] = {}  # device_id → PCI BDF, for the agent's exporter

    def _call(self, *args: str) -> str:
        return self._run([self.options.binary, *args], self.options.timeout_s)

    def devices(self) -> list[DeviceInfo]:
        """The node's Intel GPUs now (``xpu-smi discovery``)."""
        self._discover()
        return list(self._devices.values())

    def pci_bus_id(self, device_id: str) -> str | None:
        """The GPU's PCI BDF as discovery lists it (the agent's exporter labels series with it)."""
        return self._bdf.get(device_id) or None

    def _discover(self) -> None:
        listing = parse_json(self._call("discovery", "-j"), "xpu-smi discovery -j")
        found = listing.get("device_list")
        if not isinstance(found, list):
            raise ConnectorError("xpu-smi discovery -j: no device_list in its answer")
        devices: dict[str, DeviceInfo] = {}
        for n, entry in enumerate(found):
            if (
                not isinstance(entry, dict)
                or not str(entry.get("uuid") or "")
                or not isinstance(entry.get("device_id"), int)
            ):
                raise ConnectorError(f"xpu-smi discovery -j: device_list[{n}] has no uuid or device_id")
            index = str(entry["device_id"])
            self._bdf[str(entry["uuid"])[:200]] = str(entry.get("pci_bdf_address") or "")[:50]
            props = parse_json(self._call("discovery", "-d", index, "-j"), f"xpu-smi discovery -d {index} -j")
            size = str(props.get("memory_physical_size_byte", ""))
            if size.isdigit() and int(size) > 0:
                self._mem_total[index] = float(size)
            devices[index] = DeviceInfo(
                vendor="intel",
                device_id=str(entry["uuid"])[:200],
                environment=self.options.environment,  # type: ignore[arg-type]  # checked by SmiOptions
                region=self.options.region,
                cluster=self.options.cluster,
                node=self.options.node,
                gpu_model=intel_model(
                    str(entry.get("device_name") or ""), str(entry.get("pci_device_id") or "")
                ),
                gpu_index=entry["device_id"] if 0 <= entry["device_id"] <= 65535 else None,
            )
        self._devices = devices

    def sample(self) -> SampleBatch:
        """One reading of every GPU now."""
        if not self._devices:
            self._discover()
        ts_ms = int(self._clock() * 1000)
        readings = parse_dump(self._call(*DUMP_ARGS))
        if set(readings) - set(self._devices):
            self._discover()
            unknown = sorted(set(readings) - set(self._devices))
            if unknown:
                raise ConnectorError(
                    f"xpu-smi dump names device(s) {', '.join(unknown)} that discovery does not list"
                )
        pids = parse_ps(self._call("ps", "-j")) if self.options.processes else {}
        cols: dict[str, list[Any]] = {name: [] for name in SAMPLE_COLUMNS}
        workloads: dict[str, WorkloadInfo] = {}
        for index, values in readings.items():
            if index in self._mem_total:
                values = {**values, "mem_total_b": self._mem_total[index]}
            holders = self._workloads(pids.get(index, []))
            workloads.update((w.workload_key, w) for w in holders)
            add_readings(cols, self._devices[index].device_id, ts_ms, values, holders)
        return SampleBatch.from_columns(cols, [self._devices[i] for i in readings], list(workloads.values()))
