"""``[agent.source_options]`` of the NVML sampler, checked without pydantic.

The same keys, defaults, bounds and messages as the service's ``connectors.nvml_config.NvmlConfig``
(which the ``nvml`` connector type validates with pydantic); tests/agent/test_agent_config_parity.py
holds the two equal key by key, so a key added to one and not the other fails there.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Literal

from service.agent.keys import Key

#: ``NvmlConfig``'s keys in its order (``ConnectorConfig``'s first).
NVML_KEYS: dict[str, Key] = {
    "name": Key("str", "nvml"),
    "type": Key("str", "nvml"),
    "enabled": Key("bool", True),
    "interval_s": Key("float", 300.0),
    "backfill_days": Key("float", 1.0),
    "period_s": Key("float", 5.0, gt=0),
    "process_util_every_s": Key("float", 1.0, ge=0),
    "energy_every_s": Key("float", 10.0, ge=0),
    "node": Key("str", factory=socket.gethostname),
    "environment": Key("literal", "onprem", choices=("onprem", "aws", "gcp", "azure")),
    "region": Key("str", None),
    "cluster": Key("str", None),
}


@dataclass(frozen=True)
class NvmlSettings:
    """What ``connectors.nvml.NvmlSampler`` reads of its config (``NvmlOptions``), checked."""

    name: str = "nvml"
    type: str = "nvml"
    enabled: bool = True
    interval_s: float = 300.0
    backfill_days: float = 1.0
    period_s: float = 5.0
    process_util_every_s: float = 1.0
    energy_every_s: float = 10.0
    node: str = field(default_factory=socket.gethostname)
    environment: Literal["onprem", "aws", "gcp", "azure"] = "onprem"
    region: str | None = None
    cluster: str | None = None
