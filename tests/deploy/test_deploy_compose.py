"""docker-compose.yml: the service on PostgreSQL with the demo, healthchecks on both, and
configuration (the mounted file and the environment) the real settings loader accepts."""

from __future__ import annotations

import os
import re
import socket
import subprocess
from pathlib import Path

import pytest
import yaml
from deploy_checks import ROOT, connector_models, health_server, unknown_ledger_vars
from sqlalchemy.engine import make_url

from service.demo import with_demo
from service.settings import load_settings

COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
LEDGER = COMPOSE["services"]["ledger"]
POSTGRES = COMPOSE["services"]["postgres"]


def interpolate(value: str) -> str:
    """Compose's ``${VAR:-default}`` with nothing set in the environment: the default."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def ledger_env() -> dict[str, str]:
    return {k: interpolate(str(v)) for k, v in LEDGER["environment"].items()}


def test_ledger_serves_the_demo_on_postgres_once_postgres_is_healthy() -> None:
    assert LEDGER["build"] == "."  # the repository's Dockerfile
    assert LEDGER["command"] == ["demo"]  # deploy/docker/entrypoint.sh: serve --demo
    assert LEDGER["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert (
        POSTGRES["healthcheck"]["test"][0] == "CMD-SHELL"
        and "pg_isready" in POSTGRES["healthcheck"]["test"][1]
    )
    url = make_url(ledger_env()["GPU_LEDGER_DATABASE_URL"])
    pg = {k: interpolate(str(v)) for k, v in POSTGRES["environment"].items()}
    assert (url.drivername, url.host, url.port) == ("postgresql+psycopg", "postgres", 5432)
    assert (url.username, url.password, url.database) == (
        pg["POSTGRES_USER"],
        pg["POSTGRES_PASSWORD"],
        pg["POSTGRES_DB"],
    )
    assert any(v.endswith(":/var/lib/postgresql/data") for v in POSTGRES["volumes"])


def test_ledger_healthcheck_asks_readyz_on_the_port_it_serves_and_publishes_on_loopback() -> None:
    env = ledger_env()
    check = LEDGER["healthcheck"]
    assert (
        check["test"][0] == "CMD"
        and "/readyz" in check["test"][-1]
        and "os.environ.get('PORT'" in check["test"][-1]
    )
    assert check["start_period"]  # the first start loads the demo before it listens
    assert LEDGER["ports"] == [f"127.0.0.1:{env['PORT']}:{env['PORT']}"]
    # Anonymous reads are asked for explicitly, and only because the port stays on loopback.
    assert env["GPU_LEDGER_AUTH__ANONYMOUS_READ"] == "true"


def test_mounted_file_and_environment_load_through_the_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = ledger_env()
    source, target, mode = LEDGER["volumes"][0].split(":")
    assert env["GPU_LEDGER_CONFIG"] == target and mode == "ro"
    config = (ROOT / source).resolve()
    assert config.is_file()
    env["GPU_LEDGER_CONFIG"] = str(config)
    for name in [n for n in os.environ if n.upper().startswith("GPU_LEDGER_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert settings.log_format == "json" and settings.auth.anonymous_read is True
    assert settings.limits.rate_per_minute == int(env["GPU_LEDGER_LIMITS__RATE_PER_MINUTE"])  # env wins
    assert settings.connectors == []  # so serve --demo adds the demo fleet
    demo = with_demo(settings)
    assert [c.name for c in demo.connectors] == ["demo"]
    assert {s.name for s in demo.sites} == {"lab", "dc1"}
    assert unknown_ledger_vars(env, connector_models(settings)) == []


def test_unknown_ledger_vars_names_misspelt_and_unknown_keys() -> None:
    assert unknown_ledger_vars(
        {
            "GPU_LEDGER_DATABASE_URL": "x",
            "GPU_LEDGER_DATABSE_URL": "x",  # misspelt scalar
            "GPU_LEDGER_LIMITS__MAX_DEPTH": "8",
            "GPU_LEDGER_LIMITS__MAX_DEPT": "8",  # no such [limits] key
            "GPU_LEDGER_CACHE__MAX_B": "0",  # no such table
            "GPU_LEDGER_CONNECTORS__DEMO__SEED": "1",  # no connector DEMO configured
            "GPU_LEDGER_CONFIG": "/x.toml",
            "PORT": "8000",
        },
        {},
    ) == [
        "GPU_LEDGER_DATABSE_URL",
        "GPU_LEDGER_LIMITS__MAX_DEPT",
        "GPU_LEDGER_CACHE__MAX_B",
        "GPU_LEDGER_CONNECTORS__DEMO__SEED",
    ]


def test_ledger_healthcheck_command_passes_only_when_readyz_answers() -> None:
    """Runs the healthcheck's own command against a local server on $PORT."""
    command = list(LEDGER["healthcheck"]["test"][1:])
    assert command[0] == "python"
    command[0] = "python3"
    with health_server({"/readyz"}) as port:
        env = {"PATH": os.environ["PATH"], "PORT": str(port)}
        assert subprocess.run(command, env=env, capture_output=True, timeout=30).returncode == 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        env["PORT"] = str(s.getsockname()[1])  # nothing listens there
    assert subprocess.run(command, env=env, capture_output=True, timeout=30).returncode != 0
    with health_server({"/healthz"}) as port:  # alive but not ready: unhealthy
        env["PORT"] = str(port)
        assert subprocess.run(command, env=env, capture_output=True, timeout=30).returncode != 0
