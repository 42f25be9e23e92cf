"""``npu-smi``: the node agent's sampler for Huawei Ascend NPUs, through Huawei's CLI.

``source = "connectors.npu_smi:NpuSmiSampler"`` in ``[agent]``; ``[agent.source_options]`` as
:class:`connectors.smi_exec.SmiOptions` (``binary`` defaults to ``npu-smi``). One ``npu-smi info``
per period (fixture: tests/fixtures/ascend/npu-smi-info.txt). Its table has two lines per chip —
``| <NPU>  <name> | <health> | Power(W)  Temp(C)  Hugepages-Usage(page) |`` and
``| <chip> | <Bus-Id> | AICore(%)  Memory-Usage(MB)  HBM-Usage(MB) |`` — read by the titles of the
header's third cells, so a release that moves or adds a column is still read (or refused by
name). Then a process table: ``| <NPU> <chip> | <pid> | <name> | <memory MB> | …``.

* Readings: ``AICore(%)`` → ``sm_active`` *and* ``gpu_util`` (``npu-smi info`` shows no overall
  utilization; npu-exporter's ``npu_chip_info_overall_utilization`` does — docs/vendors.md);
  ``Power(W)``, ``Temp(C)``; ``HBM-Usage(MB)`` used / total → ``mem_used_b`` / ``mem_total_b``
  (MB as DCMI counts them, MiB), or ``Memory-Usage(MB)`` on chips without HBM (total 0). ``NA``
  is no reading. There is no energy counter: the ledger estimates energy from mean power.
* Devices: ``<node>/npu<NPU>-<chip>`` (npu-smi shows no die id), model "Ascend <name>"
  (``910B3`` → "Ascend 910B3"), ``gpu_index`` the NPU id.
* Workloads: each process on a chip through the agent's attributor (cgroup → container or pod,
  else user/command); a chip with processes of several workloads is split evenly between them
  (npu-smi gives no per-process utilization), one without any is unallocated.

Output that is not this table raises an error naming the line; the agent logs it and tries again.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from connectors.sdk import SAMPLE_COLUMNS, ConnectorError, DeviceInfo, SampleBatch, WorkloadInfo
from connectors.smi_exec import Attributor, ProcessWorkloads, SmiOptions, add_readings, run_tool
from connectors.vendor_names import ascend_model

MIB = 1024 * 1024
_BUS = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_TOKEN = re.compile(r"(\S+)\s*/\s*(\S+)|(\S+)")
_TITLES = re.compile(r"\S+")


@dataclass
class Chip:
    """One chip's line pair (and processes) of ``npu-smi info``."""

    npu: int
    chip: int
    name: str
    bus_id: str
    values: dict[str, float] = field(default_factory=dict)
    pids: list[int] = field(default_factory=list)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _tokens(cell: str) -> list[tuple[str, str | None]]:
    """``352.6  57  0 / 0`` → [("352.6", None), ("57", None), ("0", "0")]."""
    return [(m.group(1), m.group(2)) if m.group(1) else (m.group(3), None) for m in _TOKEN.finditer(cell)]


def _number(text: str, where: str) -> float | None:
    if text in ("NA", "N/A", "-"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise ConnectorError(f"{where}: {text[:50]!r} is not a number") from None
    if value != value or value in (float("inf"), float("-inf")) or value < 0:
        raise ConnectorError(f"{where}: {text[:50]!r} is not a reading")
    return value


def parse_info(text: str) -> list[Chip]:
    """``npu-smi info`` → its chips with readings (ledger metrics) and process ids."""
    lines = text.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("|") and _cells(line)[0].startswith("NPU")]
    if not heads or len(_cells(lines[heads[0]])) < 3 or heads[0] + 1 >= len(lines):
        said = " ".join(text.split())[:200] or "nothing"
        raise ConnectorError(f"npu-smi info: no '| NPU  Name | Health | …' table in its output: {said}")
    titles = (_TITLES.findall(_cells(lines[heads[0]])[2]), _TITLES.findall(_cells(lines[heads[0] + 1])[2]))
    chips: list[Chip] = []
    device: tuple[int, str, list[tuple[str, str | None]], str] | None = None
    in_procs = False
    for number, line in enumerate(lines[heads[0] + 2 :], heads[0] + 3):
        if not line.startswith("|"):
            continue
        cells = _cells(line)
        where = f"npu-smi info line {number}"
        if cells[0].startswith("NPU") and "Process id" in line:
            in_procs = True
            continue
        if len(cells) < 2 or cells[0].startswith("No running processes"):
            continue
        first = cells[0].split()
        if in_procs:
            if len(first) != 2 or not all(p.isdigit() for p in first) or not cells[1].isdigit():
                raise ConnectorError(f"{where}: expected '| NPU chip | pid | …', got {line.strip()[:200]!r}")
            found = [c for c in chips if (c.npu, c.chip) == (int(first[0]), int(first[1]))]
            if not found:
                raise ConnectorError(
                    f"{where}: a process on NPU {first[0]} chip {first[1]}, not in the table"
                )
            found[0].pids.append(int(cells[1]))
            continue
        if len(cells) < 3 or not first or not first[0].isdigit():
            raise ConnectorError(f"{where}: expected an NPU or chip line, got {line.strip()[:200]!r}")
        if not _BUS.match(cells[1]):  # "| 0  910B3 | OK | 352.6  57  0 / 0 |": the NPU's line
            device = (int(first[0]), first[1] if len(first) > 1 else "", _tokens(cells[2]), where)
            continue
        if device is None:
            raise ConnectorError(f"{where}: a chip line before any NPU line")
        chip = Chip(device[0], int(first[0]), device[1], cells[1])
        for title, (value, total) in zip(titles[0], device[2], strict=False):
            _read(chip.values, title, value, total, f"{device[3]}, {title}")
        for title, (value, total) in zip(titles[1], _tokens(cells[2]), strict=False):
            _read(chip.values, title, value, total, f"{where}, {title}")
        if "sm_active" in chip.values:
            chip.values["gpu_util"] = chip.values["sm_active"]
        chips.append(chip)
    return chips


def _read(values: dict[str, float], title: str, value: str, total: str | None, where: str) -> None:
    """One titled cell value into ``values`` (ledger metric → value)."""
    single = {"Power(W)": "power_w", "Temp(C)": "temp_c", "AICore(%)": "sm_active"}
    if title in single:
        reading = _number(value, where)
        if reading is not None:
            values[single[title]] = reading
    elif title in ("HBM-Usage(MB)", "Memory-Usage(MB)") and total is not None:
        used, size = _number(value, where), _number(total, where)
        if size and (title == "HBM-Usage(MB)" or "mem_total_b" not in values):
            values["mem_total_b"] = size * MIB
            if used is not None:
                values["mem_used_b"] = used * MIB
            else:
                values.pop("mem_used_b", None)


class NpuSmiSampler:
    """Ascend NPUs of this node through ``npu-smi info`` (see the module docstring)."""

    def __init__(
        self,
        config: Mapping[str, Any] | SmiOptions,
        attributor: Attributor | None = None,
        *,
        run: Callable[[list[str], float], str] = run_tool,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.options = SmiOptions.parse(config, binary="npu-smi")
        self._workloads = ProcessWorkloads(attributor)
        self._run, self._clock = run, clock
        self._devices: list[DeviceInfo] = []
        self._bus: dict[str, str] = {}  # device_id → PCI Bus-Id, for the agent's exporter

    def _device(self, chip: Chip) -> DeviceInfo:
        return DeviceInfo(
            vendor="huawei",
            device_id=f"{self.options.node}/npu{chip.npu}-{chip.chip}"[:200],
            environment=self.options.environment,  # type: ignore[arg-type]  # checked by SmiOptions
            region=self.options.region,
            cluster=self.options.cluster,
            node=self.options.node,
            gpu_model=ascend_model(chip.name),
            gpu_index=chip.npu if chip.npu <= 65535 else None,
        )

    def pci_bus_id(self, device_id: str) -> str | None:
        """The chip's PCI Bus-Id as ``npu-smi info`` shows it (the agent's exporter labels series
        with it)."""
        return self._bus.get(device_id)

    def devices(self) -> list[DeviceInfo]:
        """The node's NPU chips now."""
        self.sample()
        return list(self._devices)

    def sample(self) -> SampleBatch:
        """One reading of every chip now, split between the workloads running on it."""
        ts_ms = int(self._clock() * 1000)
        chips = parse_info(self._run([self.options.binary, "info"], self.options.timeout_s))
        cols: dict[str, list[Any]] = {name: [] for name in SAMPLE_COLUMNS}
        devices: list[DeviceInfo] = []
        workloads: dict[str, WorkloadInfo] = {}
        for chip in chips:
            device = self._device(chip)
            devices.append(device)
            self._bus[device.device_id] = chip.bus_id
            holders = self._workloads(chip.pids)
            workloads.update((w.workload_key, w) for w in holders)
            add_readings(cols, device.device_id, ts_ms, chip.values, holders)
        self._devices = devices
        return SampleBatch.from_columns(cols, devices, list(workloads.values()))
