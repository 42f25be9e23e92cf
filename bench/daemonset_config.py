"""The reference DaemonSet's agent config (deploy/kubernetes/agent-config.yaml), rendered for a bench
machine: the template as its init container renders it (``@NODE_NAME@``, ``@AGENT_TOKEN@``), with only
where it ships, spools and serves /metrics moved to the bench's stand-ins. Everything else — source,
period, ``proc_root``, source options, and no ``kubernetes_api`` or ``pod_resources_socket`` — is the
DaemonSet's, so a GPU node outside Kubernetes runs exactly what the DaemonSet runs. Plain text, no
YAML library: the bench's interpreter needs nothing but the standard library."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG_MAP = ROOT / "deploy" / "kubernetes" / "agent-config.yaml"
KEY = "agent.toml.template: |"


def template(path: Path = CONFIG_MAP) -> str:
    """The ConfigMap's ``agent.toml.template`` block, dedented."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == KEY) + 1
    block = []
    for line in lines[start:]:
        if line.strip() and not line.startswith("    "):
            break
        block.append(line)
    return textwrap.dedent("\n".join(block)) + "\n"


def render(*, service_url: str, token: str, spool_dir: Path, metrics_port: int, node: str = "bench") -> str:
    """The DaemonSet's agent config with the bench's service, token, spool and /metrics port."""
    text = template().replace("@NODE_NAME@", node).replace("@AGENT_TOKEN@", token)
    for key, value in (
        ("service_url", f'"{service_url}"'),
        ("spool_dir", f'"{spool_dir}"'),
        ("metrics_host", '"127.0.0.1"'),
        ("metrics_port", str(metrics_port)),
    ):
        text, n = re.subn(rf"(?m)^{key} = [^#\n]*", f"{key} = {value} ", text, count=1)
        if n != 1:
            raise ValueError(f"{CONFIG_MAP}: the agent template has no {key}")
    if re.search(r"(?m)^(kubernetes_api|pod_resources_socket) =", text):
        raise ValueError(f"{CONFIG_MAP}: the DaemonSet's agent reads Kubernetes: this bench runs it without")
    return text
