"""Issue 14's CLI polish: ``--version``; help with no ``<bool>`` after flags and no ``[word]`` eaten
by rich markup; no alembic "Context impl" lines on commands or ``/readyz``; ``connectors`` creating
no database; a misspelt ``GPU_LEDGER_*`` variable warned about; a missing cloud SDK naming the
extra to install. The installed ``gpu-ledger`` runs in a subprocess where the output is the point
(those tests are marked ``e2e``)."""

from __future__ import annotations

import importlib.metadata
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer.main
from typer.testing import CliRunner

from connectors.registry import extras_providing
from service.cli import app
from service.failures import classify
from service.settings import unknown_env_warnings

GPU_LEDGER = str(Path(sys.executable).with_name("gpu-ledger"))
REQUIRES = [  # Requires-Dist lines as a distribution's metadata gives them
    "boto3>=1.42.7; extra == \"aws\"",
    "google-cloud-monitoring>=2.20; extra == \"gcp\"",
    "google-cloud-bigquery>=3.47; extra == \"gcp\"",
    "azure-monitor-query>=2.0; extra == \"azure\"",
    "azure-identity>=1.15; extra == \"azure\"",
    "gpu-ledger[aws,azure,gcp]; extra == \"cloud\"",
    "grpcio>=1.60; extra == \"test\"",
    "moto[server]>=5.1; extra == \"test\"",
    "httpx>=0.27",
]


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in list(os.environ):
        if var.startswith("GPU_LEDGER_"):
            monkeypatch.delenv(var)
    monkeypatch.chdir(tmp_path)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_LEDGER_")}
    return env | {"COLUMNS": "100"} | extra


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None, python: str | None = None) -> Any:
    """``gpu-ledger ARGS`` in ``cwd`` (``python``: run ``service.cli`` after this code instead)."""
    argv = [sys.executable, "-c", f"{python}\nfrom service.cli import app\napp()"] if python else [GPU_LEDGER]
    return subprocess.run(
        [*argv, *args], cwd=cwd, env=env or clean_env(), capture_output=True, text=True, timeout=120
    )


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "100"})


# --- --version --------------------------------------------------------------------------------


@pytest.mark.e2e
def test_version_is_the_installed_distributions(tmp_path: Path) -> None:
    done = cli("--version", cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"gpu-ledger {importlib.metadata.version('gpu-ledger')}\n",
        "",
    )
    assert list(tmp_path.iterdir()) == []  # and it touched nothing


# --- help ---------------------------------------------------------------------------------------


def command_paths(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from command_paths(sub, (*path, name))


def test_flags_show_no_value_type_and_options_still_do() -> None:
    out = invoke("serve", "--help").stdout
    demo = next(line for line in out.splitlines() if "--demo" in line)
    help_line = next(line for line in out.splitlines() if "--help" in line)
    port = next(line for line in out.splitlines() if "--port" in line)
    assert "<" not in demo and "<" not in help_line, out
    assert "<int" in port  # a value's type is still shown
    for path, _ in command_paths(typer.main.get_command(app)):
        result = invoke(*path, "--help")
        assert result.exit_code == 0 and "<bool>" not in result.stdout, (path, result.stdout)


def test_square_brackets_in_help_are_shown() -> None:
    """Every ``[word]`` of every help text (``[agent]``, ``[auth]``…) is in the rendered help:
    rich would take them for style tags and drop them."""
    tree = typer.main.get_command(app)  # a fresh tree: help texts as written
    checked = 0
    for path, command in command_paths(tree):
        texts = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
        words = {w for text in texts for w in re.findall(r"\[[a-z_]+\]", text)}
        if not words:
            continue
        out = " ".join(invoke(*path, "--help").stdout.split())
        for word in words:
            assert word in out, (path, word, out)
            checked += 1
    assert checked >= 2  # [agent] of `agent --config`, [auth] of `serve`


def test_docstring_line_breaks_do_not_break_the_listing() -> None:
    out = invoke("--help").stdout
    line = next(line for line in out.splitlines() if "migrate" in line)
    # "…(all of it or nothing), and" used to end the line there, the docstring's own break
    assert not line.rstrip(" │").endswith("and"), out


@pytest.mark.e2e
def test_no_arguments_prints_the_help_and_no_empty_error_line(tmp_path: Path) -> None:
    done = cli(cwd=tmp_path)
    assert done.returncode == 2 and "Commands" in done.stdout
    assert "error" not in done.stderr, done.stderr


# --- alembic's chatter --------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.slow
def test_commands_log_migrations_but_not_alembic_context_lines(tmp_path: Path) -> None:
    env = clean_env(GPU_LEDGER_DATABASE_URL=f"sqlite:///{tmp_path / 'l.db'}")
    first = cli("migrate", cwd=tmp_path, env=env)
    assert first.returncode == 0 and "Running upgrade  -> 0001" in first.stderr, first.stderr
    again = cli("migrate", cwd=tmp_path, env=env)
    tokens = cli("tokens", "list", cwd=tmp_path, env=env)
    for done in (first, again, tokens):
        assert done.returncode == 0, done.stderr
        assert "Context impl" not in done.stderr and "Will assume" not in done.stderr, done.stderr
    assert again.stderr == ""  # nothing to migrate: nothing to say


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.e2e
@pytest.mark.slow
def test_readyz_does_not_log_alembic_context_lines(tmp_path: Path) -> None:
    env = clean_env(GPU_LEDGER_DATABASE_URL=f"sqlite:///{tmp_path / 'r.db'}")
    port = _free_port()
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [GPU_LEDGER, "serve", "--port", str(port)], cwd=tmp_path, env=env, stdout=log, stderr=log
        )
    try:
        deadline, answers = time.monotonic() + 60, 0
        while answers < 3:
            assert time.monotonic() < deadline and server.poll() is None, log_path.read_text()
            try:
                answers += httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200
            except httpx.TransportError:
                time.sleep(0.1)
    finally:
        server.terminate()
        server.wait(20)
    text = log_path.read_text()
    assert "Running upgrade" in text  # serve migrated a new database, and said so
    assert "Context impl" not in text and "Will assume" not in text, text


# --- connectors is read-only --------------------------------------------------------------------


@pytest.mark.e2e
def test_connectors_without_config_creates_no_database(tmp_path: Path) -> None:
    done = cli("connectors", cwd=tmp_path)
    assert done.returncode == 0 and "no connectors configured" in done.stdout, done.stderr
    assert list(tmp_path.iterdir()) == []


def test_connectors_with_a_missing_database_lists_them_never_run(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    connector = '[[connectors]]\nname = "lab"\ntype = "synthetic"\n'
    config.write_text(f'database_url = "sqlite:///nowhere.db"\n{connector}')
    result = invoke("connectors", "--config", str(config))
    assert result.exit_code == 0 and "lab" in result.stdout and "NEVER_RUN" in result.stdout, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml"]


# --- misspelt environment variables -------------------------------------------------------------


@pytest.mark.e2e
def test_misspelt_variable_warns_with_the_closest_setting(tmp_path: Path) -> None:
    env = clean_env(GPU_LEDGER_DATABSE_URL="sqlite:///typo.db", GPU_LEDGER_LOG_LEVEL="INFO")
    done = cli("connectors", cwd=tmp_path, env=env)
    assert done.returncode == 0
    warnings = [line for line in done.stderr.splitlines() if "GPU_LEDGER_DATABSE_URL" in line]
    assert len(warnings) == 1 and "did you mean GPU_LEDGER_DATABASE_URL?" in warnings[0], done.stderr
    assert "LOG_LEVEL" not in done.stderr  # a real setting is not warned about


def test_unknown_env_warnings() -> None:
    env = {
        "GPU_LEDGER_DATABASE_URL": "x",  # settings, tables, connectors, other readers: silent
        "GPU_LEDGER_LIMITS__MAX_DEPTH": "8",
        "GPU_LEDGER_LIMITS__MAX_DEPT": "8",  # a known table's unknown key: load_settings refuses it
        "GPU_LEDGER_CONNECTORS__DC1__URL": "http://x",
        "GPU_LEDGER_CONFIG": "/x.toml",
        "GPU_LEDGER_DISABLED_CONNECTORS": "aws_cur",
        "GPU_LEDGER_TEST_WORKERS": "2",
        "HOME": "/root",
        "GPU_LEDGER_DATABSE_URL": "x",  # misspelt
        "GPU_LEDGER_CACHE__MAX_B": "0",
        "gpu_ledger_log_levl": "DEBUG",
        "GPU_LEDGER_WHATEVER": "1",
    }
    assert unknown_env_warnings(env) == [
        "environment variable GPU_LEDGER_CACHE__MAX_B is not a GPU Ledger setting and is ignored: "
        "did you mean GPU_LEDGER_ANSWER_CACHE__MAX_B?",
        "environment variable GPU_LEDGER_DATABSE_URL is not a GPU Ledger setting and is ignored: "
        "did you mean GPU_LEDGER_DATABASE_URL?",
        "environment variable GPU_LEDGER_WHATEVER is not a GPU Ledger setting and is ignored: "
        "no setting has a similar name",
        "environment variable gpu_ledger_log_levl is not a GPU Ledger setting and is ignored: "
        "did you mean GPU_LEDGER_LOG_LEVEL?",
    ]


# --- a missing cloud SDK ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "extras"),
    [
        ("boto3", ["aws"]),
        ("google", ["gcp"]),
        ("google.api_core", ["gcp"]),  # a dependency of google-cloud-monitoring: its parent decides
        ("google.cloud.monitoring_v3", ["gcp"]),
        ("azure.identity", ["azure"]),
        ("azure", ["azure"]),
        ("grpc", []),  # only the test extra has grpcio: never the advice
        ("numpy", []),
    ],
)
def test_extras_providing(module: str, extras: list[str]) -> None:
    assert extras_providing(module, REQUIRES) == extras


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("connector_type", "missing", "extra"),
    [("cloudwatch", "boto3", "aws"), ("gcp_monitoring", "google.api_core", "gcp")],
)
def test_a_connector_without_its_sdk_names_the_extra(
    tmp_path: Path, connector_type: str, missing: str, extra: str
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'[[connectors]]\nname = "cloud"\ntype = "{connector_type}"\n')
    hide = f"import sys\nsys.modules[{missing!r}] = None  # as if not installed"
    done = cli("connectors", "--config", str(config), cwd=tmp_path, python=hide)
    assert done.returncode == 2, done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("gpu-ledger: error: ") and f"needs the module \"{missing}\"" in error, error
    assert error.endswith(f"pip install 'gpu-ledger[{extra}]'"), error


@pytest.mark.e2e
def test_an_sdk_imported_on_first_use_names_the_extra(tmp_path: Path) -> None:
    """The Azure connectors import their SDK when they first run: the run fails as a
    configuration to fix, with the extra, not as a bug."""
    failure = classify(ModuleNotFoundError("No module named 'azure'", name="azure"))
    assert (failure.status, failure.next_step, failure.bug) == ("INVALID_CONFIGURATION", "stop", False)
    assert failure.message.endswith("pip install 'gpu-ledger[azure]'")
    config = tmp_path / "z.toml"
    workspace = "00000000-0000-0000-0000-000000000000"
    config.write_text(f'[[connectors]]\nname = "az"\ntype = "azure_monitor"\nworkspace_id = "{workspace}"\n')
    hide = "import sys\nsys.modules['azure'] = None  # as if not installed"
    window = ("--start", "2025-09-01T00:00Z", "--end", "2025-09-01T01:00Z")
    done = cli("ingest", "az", *window, "--config", str(config), cwd=tmp_path, python=hide)
    assert done.returncode == 1, done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("gpu-ledger: error: az: INVALID_CONFIGURATION: ModuleNotFoundError"), error
    assert error.endswith("pip install 'gpu-ledger[azure]'") and "a bug" not in error, error
    # A module no extra brings is still a bug.
    assert classify(ModuleNotFoundError("No module named 'nope'", name="nope")).bug
