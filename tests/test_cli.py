"""The gpu-ledger CLI through typer's CliRunner."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from service.cli import app
from service.db import current_revision, head_revision, make_engine


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in list(os.environ):
        if var.startswith("GPU_LEDGER_"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("GPU_LEDGER_DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_migrate(tmp_path: Path) -> None:
    code, out, _ = run("migrate")
    assert code == 0 and f"at revision {head_revision()}" in out
    engine = make_engine(f"sqlite:///{tmp_path / 'cli.db'}")
    assert current_revision(engine) == head_revision()
    engine.dispose()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("ingest", "dc1", "--start", "2025-09-01T00:00", "--end", "2025-09-02T00:00Z"), "has no timezone"),
        (("ingest", "dc1", "--start", "yesterday", "--end", "2025-09-02T00:00Z"), "--start 'yesterday'"),
        (
            ("ingest", "dc1", "--start", "2025-09-02T00:00Z", "--end", "2025-09-01T00:00Z"),
            "must be after --start",
        ),
        (
            ("ingest", "dc1", "--start", "2025-09-01T00:00Z", "--end", "2025-09-02T00:00Z"),
            'no connector named "dc1"',
        ),
        (("ingest", "dc1", "--start", "2025-09-01T00:00Z"), "Missing option '--end'"),
        (("serve", "--port", "0"), "--port"),
        (("frobnicate",), "No such command 'frobnicate'"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args: tuple[str, ...], message: str) -> None:
    code, out, err = run(*args)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-ledger: error: ") and message in lines[0], err
    assert "Traceback" not in out + err


def test_bad_config_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[[connectors]]\nname = "x"\ntype = "no-such-type"\n')
    code, _, err = run("connectors", "--config", str(path))
    assert code == 2 and str(path) in err and 'unknown connector type "no-such-type"' in err
    assert len(err.strip().splitlines()) == 1


def test_unknown_connector_lists_configured(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[[connectors]]\nname = "demo"\ntype = "synthetic"\n')
    code, _, err = run(
        "ingest", "nope", "--start", "2025-09-01", "--end", "2025-09-02", "--config", str(path)
    )
    assert code == 2 and 'no connector named "nope"; configured: demo' in err


def test_connectors_lists_configured_with_status(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[[connectors]]\nname = "demo"\ntype = "synthetic"\nenabled = false\n')
    code, out, _ = run("connectors", "--config", str(path))
    assert code == 0 and "demo" in out and "DISABLED" in out


def test_connectors_none_configured() -> None:
    code, out, _ = run("connectors")
    assert code == 0 and "no connectors configured" in out


def test_ingest_synthetic_window(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[[connectors]]\nname = "demo"\ntype = "synthetic"\n')
    code, out, err = run(
        "ingest", "demo", "--start", "2025-09-01T00:30Z", "--end", "2025-09-01T02:00Z", "--config", str(path)
    )
    assert code == 0, err
    assert "window widened to whole hours: 2025-09-01T00:00:00+00:00" in err
    assert out.startswith("demo: ")


def test_help_exits_0() -> None:
    code, out, _ = run("--help")
    assert code == 0 and "serve" in out and "export-schema" in out
