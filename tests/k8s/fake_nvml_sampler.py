"""The production NVML sampler bound to the fake NVML a test put in ``FAKE`` — the agent's
``source = "tests.k8s.fake_nvml_sampler:FakeNvmlSampler"`` (imported by that name, once)."""

from __future__ import annotations

from typing import Any

from connectors.nvml import NvmlSampler

FAKE: dict[str, Any] = {}  # "nvml": the fake; "now_s": the sampler's clock (default NOW_S)
NOW_S = 1_764_633_600.0  # 2025-12-02T00:00:00Z


class FakeNvmlSampler(NvmlSampler):
    def __init__(self, config: Any, attributor: Any = None) -> None:
        super().__init__(
            config, nvml=FAKE["nvml"].nvml, attributor=attributor, clock=lambda: FAKE.get("now_s", NOW_S)
        )
