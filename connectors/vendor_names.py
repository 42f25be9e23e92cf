"""GPU models as their vendors name them, from what Intel's and Huawei's tools and exporters write.

Standard library only: the node agent's samplers use it too (tests/agent/test_agent_imports.py).
"""

from __future__ import annotations

import re

#: Intel data-center parts by PCI device id, for drivers that name them "Intel(R) Graphics [0x…]"
#: (ids and board powers as XPU Manager's core lists them: device_model.cpp, health_manager.cpp)
INTEL_MODELS = {
    "56c0": "Intel Data Center GPU Flex 170",
    "56c1": "Intel Data Center GPU Flex 140",
    "0bd5": "Intel Data Center GPU Max 1550",
    "0bda": "Intel Data Center GPU Max 1100",
}
_MARKS = re.compile(r"\((?:R|TM)\)")
_GENERIC = re.compile(r"\[0x([0-9a-fA-F]{1,4})\]")


def intel_model(device_name: str | None, pci_device_id: str | None = None) -> str | None:
    """The name the driver reports without ``(R)``/``(TM)`` ("Intel(R) Data Center GPU Max 1550" →
    "Intel Data Center GPU Max 1550"); a generic "Intel(R) Graphics [0x0bd5]" named from the PCI
    device id where ``INTEL_MODELS`` knows it."""
    name = " ".join(_MARKS.sub("", device_name or "").split())
    generic = _GENERIC.search(name)
    pci = (pci_device_id or (generic.group(1) if generic else "")).lower().removeprefix("0x").rjust(4, "0")
    if (not name or generic) and pci in INTEL_MODELS:
        return INTEL_MODELS[pci]
    return name[:100] or None


def ascend_model(chip: str | None) -> str | None:
    """Huawei's name for a chip: npu-exporter's ``910B3-Ascend-V1`` (DCMI name-type-version),
    npu-smi's ``910B3`` or ``Ascend910B3`` → "Ascend 910B3"; another shape is kept as written."""
    name = (chip or "").strip()
    parts = name.split("-")
    if len(parts) >= 2 and parts[0] and parts[1] == "Ascend":
        name = parts[0]
    elif name.startswith("Ascend") and name[6:7].isdigit():
        name = name[6:]
    if re.fullmatch(r"[0-9]{3}[0-9A-Za-z]{0,8}", name):
        return f"Ascend {name}"
    return name[:100] or None
