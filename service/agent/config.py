"""The agent's configuration: the ``[agent]`` table of its own TOML file.

::

    [agent]
    service_url = "https://ledger.example.com"  # the service; batches go to <url>/api/v1/batches
    token = "…"                 # the bearer token of the service's `agent` connector
    name = "gpu-node-17"        # that connector's name (one per node, or a fleet's shared name)
    agent_id = "node17"         # unique per node: batch ids are "<agent_id>:<seq>" (default: hostname)
    period_s = 5                # sample every GPU this often
    ship_every_s = 60           # seal a batch this often, then ship what the spool holds
    spool_dir = "/var/lib/gpu-ledger-agent/spool"
    metrics_host = "0.0.0.0"    # dcgm-exporter-compatible /metrics
    metrics_port = 9400         # 0: no exporter
    source = "nvml"             # or "module:Class" of another Sampler
    [agent.source_options]      # keys of the sampler's own config (NVML: cluster, region, …)

Unknown keys are errors that name them. The token is a ``SecretStr`` (masked in logs).
"""

from __future__ import annotations

import socket
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from connectors.attribution import MappingRule
from connectors.registry import validation_problems


class AgentConfigError(ValueError):
    """The agent's configuration is wrong; the message names the file and the key."""


class AgentSettings(BaseModel):
    """Validated ``[agent]`` table (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    service_url: str = Field(pattern=r"^https?://")
    token: SecretStr
    name: str = Field(min_length=1, max_length=100)
    agent_id: str = Field(default_factory=lambda: socket.gethostname(), pattern=r"^[^:\s]+$", max_length=150)
    period_s: float = Field(5.0, gt=0, le=3600)
    ship_every_s: float = Field(60.0, gt=0, le=86400)
    spool_dir: Path
    metrics_host: str = "0.0.0.0"
    metrics_port: int = Field(9400, ge=0, le=65535)
    source: str = "nvml"
    source_options: dict[str, Any] = Field(default_factory=dict)
    request_timeout_s: float = Field(
        10.0, gt=0, description="one POST; a slow service delays a tick this much"
    )
    backoff_base_s: float = Field(1.0, gt=0)
    backoff_cap_s: float = Field(300.0, gt=0)
    # Process → workload attribution (used by samplers that take an ``attributor``, e.g. NVML):
    attribution_rules: list[MappingRule] = Field(default_factory=list)  # [[agent.attribution_rules]]
    docker_socket: Path | None = Path("/var/run/docker.sock")  # Docker labels; none to skip
    proc_root: Path = Path("/proc")  # the host's /proc (hostPID in a pod)

    @field_validator("service_url")
    @classmethod
    def _strip(cls, value: str) -> str:
        return value.rstrip("/")

    @property
    def batches_url(self) -> str:
        return f"{self.service_url}/api/v1/batches"


def load_agent_settings(path: str | Path) -> AgentSettings:
    """The ``[agent]`` table of ``path``; :class:`AgentConfigError` naming the problem."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise AgentConfigError(f"{path}: config file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise AgentConfigError(f"{path}: not valid TOML: {exc}") from None
    unknown = sorted(set(data) - {"agent"})
    if unknown:
        raise AgentConfigError(f"{path}: unknown top-level key(s) {', '.join(map(repr, unknown))}")
    if not isinstance(data.get("agent"), dict):
        raise AgentConfigError(f"{path}: missing [agent] table")
    try:
        return AgentSettings.model_validate(data["agent"])
    except ValidationError as exc:
        details = "; ".join(f'key "{k}": {m}' for k, m in validation_problems(exc))
        raise AgentConfigError(f"{path}: [agent]: {details}") from None
