"""``gpu-ledger agent --config F``: build the agent from its config and run it until SIGTERM/SIGINT.

``gpu-ledger agent`` (service/agent/entry.py) and ``python -m service.agent`` run it through
:func:`main`, without the CLI's framework (typer, click, rich). Nothing on this import path loads Polars,
NumPy, SQLAlchemy, structlog, httpx or prometheus_client (tests/agent/test_agent_imports.py).
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from service.agent.config import AgentConfigError, AgentSettings, load_agent_settings
from service.agent.exporter import DcgmExporter
from service.agent.http import HttpClient
from service.agent.log import configure_console, get_logger
from service.agent.loop import Agent
from service.agent.sampler import load_sampler
from service.agent.ship import Client, Shipper
from service.agent.spool import Spool

log = get_logger(__name__)


class AgentStartError(Exception):
    """The agent cannot start: bad config, no sampler (no NVML), spool or port unusable."""


def build_agent(settings: AgentSettings, *, sampler: Any = None, client: Client | None = None) -> Agent:
    """The production agent for ``settings`` (``sampler``/``client`` replace the defaults)."""
    sampler = sampler if sampler is not None else load_sampler(settings)
    spool = Spool(settings.spool_dir, settings.agent_id, settings.name)
    client = client or HttpClient(timeout=settings.request_timeout_s)
    shipper = Shipper(
        client,
        settings.batches_url,
        settings.token.get_secret_value(),
        base_s=settings.backoff_base_s,
        cap_s=settings.backoff_cap_s,
    )
    exporter = DcgmExporter(socket.gethostname(), getattr(sampler, "pci_bus_id", lambda _d: None))
    return Agent(settings, sampler=sampler, spool=spool, shipper=shipper, exporter=exporter)


def run_agent(config_path: Path) -> None:
    configure_console("INFO")
    try:
        settings = load_agent_settings(config_path)
        agent = build_agent(settings)
    except (AgentConfigError, ImportError, OSError, ValueError, TypeError) as exc:
        raise AgentStartError(f"{type(exc).__name__}: {exc}") from None
    server = None
    if settings.metrics_port and agent.exporter is not None:
        try:
            server = agent.exporter.serve(settings.metrics_host, settings.metrics_port)
        except OSError as exc:
            raise AgentStartError(f"metrics port {settings.metrics_port}: {exc.strerror}") from None
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: agent.stop_event.set())
    log.info("agent started", agent_id=settings.agent_id, name=settings.name, service=settings.service_url,
             spool=str(settings.spool_dir), pending=len(agent.spool.pending()))  # fmt: skip
    try:
        agent.run()
    finally:
        if server is not None:
            server.shutdown()
        agent.shipper.client.close()
        log.info("agent stopped", pending=len(agent.spool.pending()))


def main(argv: list[str] | None = None, prog: str = "gpu-ledger agent") -> None:
    """``--config F``: the agent without the CLI framework; the CLI's one-line error and exit
    status 2 when it cannot start."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True, help="The agent's TOML file ([agent] table).")
    args = parser.parse_args(argv)
    try:
        run_agent(args.config)
    except AgentStartError as exc:
        print(f"gpu-ledger: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
