"""``amd-smi``: the node agent's sampler for AMD Instinct GPUs, through AMD's CLI.

``source = "connectors.amd_smi:AmdSmiSampler"`` in ``[agent]``; ``[agent.source_options]`` as
:class:`connectors.smi_exec.SmiOptions` (``binary`` defaults to ``amd-smi``). Formats as the CLI of
github.com/ROCm/amdsmi writes them (``amdsmi_cli/amdsmi_commands.py``; fixtures in
tests/fixtures/amd/):

* devices: ``amd-smi list --json`` (``gpu`` index, ``uuid``, ``bdf``) and
  ``amd-smi static --asic --json`` (``asic.market_name``: "AMD Instinct MI300X"). Read once, and
  again when a reading names a GPU index not seen yet. A GPU is its ``uuid``.
* a reading: ``amd-smi metric --usage --power --temperature --mem-usage --energy --json``:
  ``usage.gfx_activity`` (%) → ``gpu_util`` (the GFX engine's busy share, docs/vendors.md),
  ``usage.umc_activity`` (%) → ``mem_bw``, ``power.socket_power`` (W) → ``power_w``,
  ``temperature.edge`` else ``hotspot`` (°C) → ``temp_c``, ``mem_usage.used_vram``/``total_vram``
  (MB, which amd-smi computes as bytes // 2²⁰: MiB) → bytes, ``energy.total_energy_consumption``
  (J, accumulated) → ``energy_j``.

Both shapes amd-smi prints are read: a list of GPU objects (ROCm 6.x) or ``{"gpu_data": [...]}``
(later releases). Every value is ``{"value": v, "unit": u}``; the unit is checked against the ones
known for the field (an unknown one is an error naming the GPU and field, never a misreading) and
``"N/A"`` is no reading. Readings carry the agent's clock. The CLI names no workloads here: a
Kubernetes node's pods come from the agent's pod-resources reader.

Standard library only (the agent stays small; tests/agent/test_agent_imports.py). The ``amdsmi``
package on PyPI is a ctypes binding that needs ROCm's ``libamd_smi.so`` on the node; the CLI ships
in the same ROCm package, so nothing is gained by loading the library into the agent.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from connectors.sdk import SAMPLE_COLUMNS, ConnectorError, DeviceInfo, SampleBatch
from connectors.smi_exec import SmiOptions, add_readings, run_tool

MIB = 1024 * 1024
METRIC_ARGS = ["metric", "--usage", "--power", "--temperature", "--mem-usage", "--energy", "--json"]
#: (section, key) → (ledger metric, {unit: factor to the ledger's unit}); the first key of a
#: metric with a value wins (edge temperature before hotspot)
FIELDS: tuple[tuple[str, str, str, Mapping[str, float]], ...] = (
    ("usage", "gfx_activity", "gpu_util", {"%": 1.0}),
    ("usage", "umc_activity", "mem_bw", {"%": 1.0}),
    ("power", "socket_power", "power_w", {"W": 1.0, "mW": 1e-3}),
    ("temperature", "edge", "temp_c", {"C": 1.0, "°C": 1.0}),
    ("temperature", "hotspot", "temp_c", {"C": 1.0, "°C": 1.0}),
    ("mem_usage", "used_vram", "mem_used_b", {"MB": MIB, "MiB": MIB, "GB": 1024 * MIB, "B": 1.0}),
    ("mem_usage", "total_vram", "mem_total_b", {"MB": MIB, "MiB": MIB, "GB": 1024 * MIB, "B": 1.0}),
    ("energy", "total_energy_consumption", "energy_j", {"J": 1.0, "mJ": 1e-3, "uJ": 1e-6, "µJ": 1e-6}),
)
MAX_GPUS = 1024


def gpu_entries(text: str, what: str) -> list[Mapping[str, Any]]:
    """The per-GPU objects of an ``amd-smi … --json`` answer, in either shape it prints."""
    try:
        body = json.loads(text)
    except ValueError:
        said = " ".join(text.split())[:200] or "nothing"
        raise ConnectorError(f"{what}: not JSON: {said}") from None
    if isinstance(body, dict) and "gpu_data" in body:
        body = body["gpu_data"]
    if not isinstance(body, list):
        raise ConnectorError(
            f"{what}: expected a list of GPUs or {{'gpu_data': [...]}}, got {type(body).__name__}"
        )
    if len(body) > MAX_GPUS:
        raise ConnectorError(f"{what}: {len(body)} GPUs listed, more than {MAX_GPUS}")
    for n, entry in enumerate(body):
        if not isinstance(entry, dict) or not _is_index(entry.get("gpu")):
            raise ConnectorError(f"{what}: entry [{n}] has no integer 'gpu' index")
    return body


def _is_index(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 65535


def readings(entry: Mapping[str, Any], what: str) -> dict[str, float]:
    """One GPU's ``amd-smi metric`` object → {ledger metric: value} (``N/A`` left out)."""
    found: dict[str, float] = {}
    for section, key, metric, units in FIELDS:
        if metric in found:
            continue
        part = entry.get(section)
        raw = part.get(key) if isinstance(part, dict) else None
        if raw is None or raw == "N/A":
            continue
        where = f"{what}: gpu {entry['gpu']} {section}.{key}"
        if not isinstance(raw, dict) or "value" not in raw:
            raise ConnectorError(f"{where}: expected {{'value': …, 'unit': …}}, got {str(raw)[:80]!r}")
        value, unit = raw["value"], raw.get("unit")
        if value == "N/A":
            continue
        if not isinstance(unit, str) or unit not in units:
            raise ConnectorError(f"{where}: unit {str(unit)[:20]!r}, expected one of {', '.join(units)}")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ConnectorError(f"{where}: value {str(value)[:40]!r} is not a finite number")
        found[metric] = float(value) * units[unit]
    return found


class AmdSmiSampler:
    """AMD GPUs of this node through ``amd-smi`` (see the module docstring)."""

    def __init__(
        self,
        config: Mapping[str, Any] | SmiOptions,
        *,
        run: Callable[[list[str], float], str] = run_tool,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.options = SmiOptions.parse(config, binary="amd-smi")
        self._run, self._clock = run, clock
        self._devices: dict[int, DeviceInfo] = {}

    def _call(self, *args: str) -> str:
        return self._run([self.options.binary, *args], self.options.timeout_s)

    def devices(self) -> list[DeviceInfo]:
        """The node's AMD GPUs now (``amd-smi list`` and ``static --asic``)."""
        self._discover()
        return list(self._devices.values())

    def _discover(self) -> None:
        listed = gpu_entries(self._call("list", "--json"), "amd-smi list --json")
        static = gpu_entries(self._call("static", "--asic", "--json"), "amd-smi static --asic --json")
        models: dict[int, str] = {}
        for entry in static:
            asic = entry.get("asic")
            name = asic.get("market_name") if isinstance(asic, dict) else None
            if isinstance(name, str) and name and name != "N/A":
                models[entry["gpu"]] = " ".join(name.split())[:100]
        devices: dict[int, DeviceInfo] = {}
        for n, entry in enumerate(listed):
            uuid = entry.get("uuid")
            if not isinstance(uuid, str) or not uuid.strip() or uuid == "N/A":
                raise ConnectorError(f"amd-smi list --json: entry [{n}] (gpu {entry['gpu']}) has no uuid")
            index = entry["gpu"]
            devices[index] = DeviceInfo(
                device_id=uuid.strip()[:200],
                environment=self.options.environment,  # type: ignore[arg-type]  # checked by SmiOptions
                region=self.options.region,
                cluster=self.options.cluster,
                node=self.options.node,
                gpu_model=models.get(index),
                gpu_index=index,
                vendor="amd",
            )
        self._devices = devices

    def sample(self) -> SampleBatch:
        """One reading of every GPU now."""
        if not self._devices:
            self._discover()
        ts_ms = int(self._clock() * 1000)
        entries = gpu_entries(self._call(*METRIC_ARGS), "amd-smi metric --json")
        if any(e["gpu"] not in self._devices for e in entries):
            self._discover()  # a GPU appeared (or the indices moved): describe them again
        columns: dict[str, list[Any]] = {c: [] for c in SAMPLE_COLUMNS}
        seen: dict[str, DeviceInfo] = {}
        for entry in entries:
            device = self._devices.get(entry["gpu"])
            if device is None:
                raise ConnectorError(f"amd-smi metric --json: gpu {entry['gpu']} is not in `amd-smi list`")
            seen[device.device_id] = device
            add_readings(columns, device.device_id, ts_ms, readings(entry, "amd-smi metric --json"), [])
        return SampleBatch.from_columns(columns, list(seen.values()))
