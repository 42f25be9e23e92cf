"""``NvmlConfig``: the ``[[connectors]] type = "nvml"`` table, validated by pydantic.

Apart from ``connectors.nvml`` so that importing the sampler loads no pydantic: the node agent
validates the same keys itself (``service.agent.nvml_options``, kept equal to this model by
tests/agent/test_agent_config_parity.py) and must stay small (issue 13: < 60 MB).
"""

from __future__ import annotations

import socket
from typing import Literal

from pydantic import Field

from connectors.sdk import ConnectorConfig


class NvmlConfig(ConnectorConfig):
    """``type = "nvml"``: the GPUs of the node the agent runs on.

    ``period_s``: seconds between samples. ``process_util_every_s``: seconds between per-process
    SM-utilization draws while two or more uncapped workloads time-slice a GPU (~2.5 ms per GPU
    per read on an H200, so 0.25 % of a core per such GPU at the default 1 s; none on a GPU with
    one owner); each draw is NVML's newest ~200 ms window, and 0.2 s draws nearly every window
    (docs/virtual-gpus.md). ``energy_every_s``: seconds between energy-counter reads (~4 ms per GPU per
    call on an H200, measured: the rest of a sample costs ~0.1 ms); a counter loses nothing when
    read less often (docs/design.md §3.6 spreads each delta over its span). 0 means every sample.
    ``node``, ``environment``, ``region``, ``cluster`` label every device.
    """

    name: str = "nvml"
    type: str = "nvml"
    period_s: float = Field(5.0, gt=0)
    process_util_every_s: float = Field(1.0, ge=0)
    energy_every_s: float = Field(10.0, ge=0)
    node: str = Field(default_factory=socket.gethostname)
    environment: Literal["onprem", "aws", "gcp", "azure"] = "onprem"
    region: str | None = None
    cluster: str | None = None
