"""The Dockerfile and its entrypoint: non-root, pinned installs, config by file and environment,
the demo, and a health check on the port the service listens on ($PORT)."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_checks import ROOT, health_server

DOCKERFILE = (ROOT / "Dockerfile").read_text()
ENTRYPOINT = ROOT / "deploy" / "docker" / "entrypoint.sh"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.startswith("#")))
    return [(m[1].upper(), m[2].strip()) for m in re.finditer(r"^\s*([A-Za-z]+)\s+(.*)$", joined, re.M)]


def runtime_stage() -> list[tuple[str, str]]:
    steps = instructions(DOCKERFILE)
    last_from = max(i for i, (op, _) in enumerate(steps) if op == "FROM")
    return steps[last_from:]


def test_runtime_runs_as_a_numeric_non_root_user() -> None:
    users = [args for op, args in runtime_stage() if op == "USER"]
    assert users == ["10001:10001"]  # numeric: Kubernetes' runAsNonRoot can verify it


def test_installs_from_the_pinned_constraints_that_ci_uses_too() -> None:
    stage = runtime_stage()
    assert ("COPY", "constraints.txt /tmp/constraints.txt") in stage
    run = " ".join(args for op, args in stage if op == "RUN")
    assert re.search(r"pip install -c /tmp/constraints\.txt \"\$\{whl\}\[cloud,k8s\]\"", run)
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"pip install -q -c constraints\.txt -e '\.\[test\]'", ci)
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert "constraints.txt" not in ignored and "deploy" not in ignored


def test_header_documents_the_config_file_the_environment_and_the_demo() -> None:
    header = DOCKERFILE.split("FROM ", 1)[0]
    for needle in (
        "GPU_LEDGER_CONFIG",
        "/etc/gpu-ledger/config.toml",
        "GPU_LEDGER_DATABASE_URL",
        "GPU_LEDGER_CONNECTORS__",
        "PORT",
        " demo",
        "GPU_LEDGER_AUTH__ANONYMOUS_READ",
    ):
        assert needle in header, needle


def healthcheck_command() -> list[str]:
    check = next(args for op, args in runtime_stage() if op == "HEALTHCHECK")
    exec_form = check.split(" CMD ", 1)[1]
    return __import__("json").loads(exec_form)


@pytest.fixture
def health_port() -> Iterator[int]:
    with health_server({"/healthz"}) as port:
        yield port


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_healthcheck_asks_healthz_on_the_port_in_the_environment(health_port: int) -> None:
    """Runs the HEALTHCHECK's own command: healthy on $PORT, unhealthy where nothing listens."""
    command = healthcheck_command()
    assert command[0] == "python"
    command[0] = "python3"
    env = {"PATH": os.environ["PATH"], "PORT": str(health_port)}
    assert subprocess.run(command, env=env, capture_output=True, timeout=30).returncode == 0
    env["PORT"] = str(free_port())
    assert subprocess.run(command, env=env, capture_output=True, timeout=30).returncode != 0
    default_port = next(args for op, args in runtime_stage() if op == "ENV" and "PORT=" in args)
    assert re.search(r"\bPORT=8000\b", default_port) and ("EXPOSE", "8000") in runtime_stage()


@pytest.fixture
def fake_cli(tmp_path: Path) -> Path:
    """A ``gpu-ledger`` on PATH that prints the arguments it was given, one per line."""
    fake = tmp_path / "gpu-ledger"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    fake.chmod(0o755)
    return tmp_path


def entrypoint(fake_cli: Path, *args: str, **env: str) -> list[str]:
    path = f"{fake_cli}:{os.environ['PATH']}"
    out = subprocess.run(
        ["sh", str(ENTRYPOINT), *args], env={"PATH": path, **env}, capture_output=True, text=True, check=True
    )
    return out.stdout.splitlines()


def test_entrypoint_serves_on_port_demo_and_passes_other_commands(fake_cli: Path) -> None:
    assert ("ENTRYPOINT", '["gpu-ledger-entrypoint"]') in runtime_stage()
    assert ("CMD", '["serve"]') in runtime_stage()
    assert entrypoint(fake_cli) == ["serve", "--host", "0.0.0.0", "--port", "8000"]
    assert entrypoint(fake_cli, "serve", "--workers", "2", PORT="9100", HOST="127.0.0.1") == [
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "9100",
        "--workers",
        "2",
    ]
    assert entrypoint(fake_cli, "demo") == ["serve", "--host", "0.0.0.0", "--port", "8000", "--demo"]
    line = "tokens create --name bi --scope read:team:ml"
    assert entrypoint(fake_cli, *shlex.split(line)) == shlex.split(line)
    assert entrypoint(fake_cli, "agent", "--config", "/etc/a b.toml") == [
        "agent",
        "--config",
        "/etc/a b.toml",
    ]
