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

Kubernetes (off unless set; docs/agent.md, "Kubernetes"): ``pod_resources_socket``,
``pod_resources_every_s``, ``kubernetes_api`` (``"in-cluster"`` or a kubeconfig path),
``kubernetes_node`` (this node's name; default: hostname).

Unknown keys are errors that name them. The token is a secret (masked in repr and logs).

The tables are checked by ``service.agent.keys`` with pydantic's rules and messages, not by
pydantic: the agent must stay under 60 MB on a GPU node (issue 13), and pydantic alone was ~20 MB
of it. tests/agent/test_agent_config_parity.py holds these checks to pydantic models.
"""

from __future__ import annotations

import dataclasses
import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from connectors.attribution import Rule
from service.agent.keys import Key, Secret, check_table, check_value, describe


class AgentConfigError(ValueError):
    """The agent's configuration is wrong; the message names the file and the key."""


#: The ``[agent]`` table's keys (the module docstring says what each one is).
AGENT_KEYS: dict[str, Key] = {
    "service_url": Key("str", pattern=r"^https?://"),
    "token": Key("str"),
    "name": Key("str", min_length=1, max_length=100),
    "agent_id": Key("str", factory=socket.gethostname, pattern=r"^[^:\s]+$", max_length=150),
    "period_s": Key("float", 5.0, gt=0, le=3600),
    "ship_every_s": Key("float", 60.0, gt=0, le=86400),
    "spool_dir": Key("path"),
    "metrics_host": Key("str", "0.0.0.0"),
    "metrics_port": Key("int", 9400, ge=0, le=65535),
    "source": Key("str", "nvml"),
    "source_options": Key("dict", factory=dict),
    "request_timeout_s": Key("float", 10.0, gt=0),  # one POST; a slow service delays a tick this much
    "backoff_base_s": Key("float", 1.0, gt=0),
    "backoff_cap_s": Key("float", 300.0, gt=0),
    # Process → workload attribution (used by samplers that take an ``attributor``, e.g. NVML):
    "attribution_rules": Key("list", factory=list),  # [[agent.attribution_rules]]
    "docker_socket": Key("path", None, factory=lambda: Path("/var/run/docker.sock")),  # None: skip
    "proc_root": Key("path", factory=lambda: Path("/proc")),  # the host's /proc (hostPID in a pod)
    # Kubernetes (service/agent/kube.py), off unless set: the kubelet's pod-resources socket, and
    # the API server ("in-cluster" or a kubeconfig path) for pod, namespace and node labels.
    "pod_resources_socket": Key("path", None),
    "pod_resources_every_s": Key("float", 10.0, gt=0),
    "kubernetes_api": Key("str", None, min_length=1),
    "kubernetes_node": Key("str", factory=socket.gethostname, min_length=1, max_length=253),
}
#: One ``[[agent.attribution_rules]]`` table (``connectors.attribution.Rule``).
RULE_KEYS: dict[str, Key] = {
    **dict.fromkeys(("container_name", "image", "namespace", "pod"), Key("str", None)),
    "label": Key("str_dict", factory=dict),
    **dict.fromkeys(("unix_user", "command", "project", "team", "user"), Key("str", None)),
}


def check_rules(value: Any, where: str = "attribution_rules") -> tuple[list[Rule], list[tuple[str, str]]]:
    """The rules of ``[[agent.attribution_rules]]``: each table's keys, then the rule's own checks
    (its regexes and references), reported as pydantic reports a model validator's error."""
    items, problems = check_value(AGENT_KEYS["attribution_rules"], value, where)
    rules: list[Rule] = []
    for i, item in enumerate(items or ()):
        if isinstance(item, Rule):
            rules.append(item)
            continue
        if not isinstance(item, Mapping):
            problems.append((f"{where}.{i}", "Input should be a valid dictionary or instance of MappingRule"))
            continue
        fields, bad = check_table(item, RULE_KEYS, f"{where}.{i}.")
        problems += bad
        if not bad:
            try:
                rules.append(Rule(**fields))
            except ValueError as exc:
                problems.append((f"{where}.{i}", f"Value error, {exc}"))
    return rules, problems


@dataclass(frozen=True)
class AgentSettings:
    """Validated ``[agent]`` table (see the module docstring); built by keyword, it checks its
    values the same way (``AgentConfigError`` naming the keys)."""

    service_url: str
    token: Secret  # a str given here is wrapped
    name: str
    spool_dir: Path  # a str given here is made a Path
    agent_id: str = field(default_factory=socket.gethostname)
    period_s: float = 5.0
    ship_every_s: float = 60.0
    metrics_host: str = "0.0.0.0"
    metrics_port: int = 9400
    source: str = "nvml"
    source_options: dict[str, Any] = field(default_factory=dict)
    request_timeout_s: float = 10.0
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 300.0
    attribution_rules: list[Rule] = field(default_factory=list)
    docker_socket: Path | None = Path("/var/run/docker.sock")
    proc_root: Path = Path("/proc")
    pod_resources_socket: Path | None = None
    pod_resources_every_s: float = 10.0
    kubernetes_api: str | None = None
    kubernetes_node: str = field(default_factory=socket.gethostname)

    def __post_init__(self) -> None:
        values = _checked({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})
        for name, value in values.items():
            object.__setattr__(self, name, value)

    @property
    def batches_url(self) -> str:
        return f"{self.service_url}/api/v1/batches"

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> AgentSettings:
        """The ``[agent]`` table as TOML gives it; ``AgentConfigError`` names every bad key."""
        return cls(**_checked(table))


def _checked(table: Mapping[str, Any]) -> dict[str, Any]:
    """The table's values as the fields hold them, or ``AgentConfigError`` with every problem in
    pydantic's order (the keys as declared, then the unknown ones)."""
    plain = {k: v for k, v in table.items() if k != "attribution_rules"}
    values, problems = check_table(plain, {k: v for k, v in AGENT_KEYS.items() if k != "attribution_rules"})
    rules, bad = check_rules(table["attribution_rules"]) if "attribution_rules" in table else ([], [])
    if problems or bad:
        order = list(AGENT_KEYS)

        def rank(problem: tuple[str, str]) -> int:
            head = problem[0].split(".")[0]
            return order.index(head) if head in order and problem[1] != "unknown key" else len(order)

        raise AgentConfigError(f"[agent]: {describe(sorted(problems + bad, key=rank))}")
    token = values["token"]
    values["token"] = token if isinstance(token, Secret) else Secret(token)
    values["service_url"] = values["service_url"].rstrip("/")
    values["attribution_rules"] = rules
    return values


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
        return AgentSettings.from_table(data["agent"])
    except AgentConfigError as exc:
        raise AgentConfigError(f"{path}: {exc}") from None
