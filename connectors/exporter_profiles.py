"""The exporter profiles a Prometheus connector may be configured with (``exporter = "<name>"``).

Each entry names the module whose ``PROFILE`` (a :class:`connectors.exporter_profile.ExporterProfile`)
reads one vendor's exporter; a module is imported only when its profile is asked for. Adding a
vendor is one line here plus its module (see :mod:`connectors.exporter_profile`).
"""

from __future__ import annotations

import importlib

from connectors.exporter_profile import ExporterProfile

#: profile name → module defining ``PROFILE``
MODULES: dict[str, str] = {
    "dcgm": "connectors.dcgm",  # NVIDIA dcgm-exporter
    "xpum": "connectors.xpum_exporter",  # Intel XPU Manager exporter
    "xpumd": "connectors.xpumd_exporter",  # Intel XPU Manager 2 (xpumd, OpenTelemetry hw_*)
    "ascend": "connectors.npu_exporter",  # Huawei Ascend npu-exporter
    "amd": "connectors.rocm_exporter",  # AMD ROCm device-metrics-exporter
}
DEFAULT = "dcgm"


def names() -> tuple[str, ...]:
    return tuple(MODULES)


def profile(name: str, prefix: str = "") -> ExporterProfile:
    """The registered profile ``name`` (for an exporter writing ``prefix`` before every name)."""
    module = MODULES.get(name)
    if module is None:
        raise ValueError(f"unknown exporter profile {name!r}: one of {', '.join(MODULES)}")
    found: ExporterProfile = importlib.import_module(module).PROFILE
    return found.with_prefix(prefix) if prefix else found
