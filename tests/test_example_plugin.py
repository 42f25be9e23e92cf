"""examples/plugin-connector: a third-party connector package, installed by pip as a user would
(from a copy of the example, offline, into a directory of its own) and found only through its
``gpu_ledger.connectors`` entry point — by the registry, and by ``gpu-ledger ingest`` in a
subprocess, which writes its GPU-hours into the ledger with the project the plugin names."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from connectors.registry import ENTRY_POINT_GROUP, Registry

pytestmark = pytest.mark.slow  # pip builds and installs the package (~6 s), the CLI ingests (~8 s)

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "plugin-connector"
GPU_LEDGER = str(Path(sys.executable).with_name("gpu-ledger"))


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example installed with pip into a directory of its own (a copy is built, so the
    repository's example folder gets no build output); the directory is returned."""
    work = tmp_path_factory.mktemp("plugin")
    source = work / "src"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    target = work / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index"]
        + ["--target", str(target), str(source)],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_NO_INPUT": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return target


def test_the_registry_finds_the_installed_plugin_by_its_entry_point(
    installed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(installed))
    for name in [m for m in sys.modules if m.startswith("gpu_ledger_acme")]:
        monkeypatch.delitem(sys.modules, name)
    registry = Registry()
    assert "acme_csv" in registry.known_types()
    assert registry._eps["acme_csv"].group == ENTRY_POINT_GROUP
    cls = registry.connector_class("acme_csv")
    assert Path(sys.modules[cls.__module__].__file__ or "").is_relative_to(installed)  # the installed copy
    config = registry.validate({"name": "lab", "type": "acme_csv", "path": "x.csv"})
    assert type(config).__name__ == "AcmeCsvConfig"


def readings(path: Path) -> None:
    """Two GPUs, 10:00–10:59 once a minute: ACME-0001 runs job train-42 of project vision at 90 %
    busy and 400 W, ACME-0002 is free (no job) at 0 % and 50 W."""
    lines = ["timestamp,gpu_uuid,gpu_model,host,busy_pct,board_power_w,job,project"]
    for minute in range(60):
        ts = f"2026-11-30T10:{minute:02d}:00Z"
        lines.append(f"{ts},ACME-0001,ACME X1,node-a,90.0,400.0,train-42,vision")
        lines.append(f"{ts},ACME-0002,ACME X1,node-a,0.0,50.0,,")
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.e2e
def test_gpu_ledger_ingest_runs_the_plugin_end_to_end(installed: Path, tmp_path: Path) -> None:
    csv = tmp_path / "acme.csv"
    readings(csv)
    config = tmp_path / "gpu-ledger.toml"
    config.write_text(f'[[connectors]]\nname = "acme-lab"\ntype = "acme_csv"\npath = "{csv}"\n')
    database = tmp_path / "ledger.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_LEDGER_")}
    env |= {"PYTHONPATH": str(installed), "GPU_LEDGER_DATABASE_URL": f"sqlite:///{database}"}
    argv = [
        GPU_LEDGER,
        "ingest",
        "acme-lab",
        "--start",
        "2026-11-30T10:00:00Z",
        "--end",
        "2026-11-30T11:00:00Z",
    ]
    done = subprocess.run(
        [*argv, "--config", str(config)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("acme-lab: ")
    with sqlite3.connect(database) as db:
        rows = db.execute(
            "SELECT device_id, workload_key, project, workload, present_s, busy_s, power_avg_w "
            "FROM ledger_hour WHERE source = 'acme-lab' ORDER BY device_id"
        ).fetchall()
        status = db.execute("SELECT status FROM connector_state WHERE name = 'acme-lab'").fetchone()
    # One hour each: 60 readings a minute apart cover it; busy = 0.9 × 3600 s.
    assert rows == [
        ("ACME-0001", "acme:train-42", "vision", "train-42", 3600.0, 3240.0, 400.0),
        ("ACME-0002", "", None, None, 3600.0, 0.0, 50.0),
    ]
    assert status == ("OK",)
