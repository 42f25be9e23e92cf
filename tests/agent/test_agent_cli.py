"""``gpu-ledger agent``: one-line errors, and a real run stopped by SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from service.cli import app


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_bad_config_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text('[agent]\nservice_url = "ftp://x"\n')
    result = CliRunner().invoke(app, ["agent", "--config", str(path)])
    assert result.exit_code == 2
    assert result.output.startswith("gpu-ledger: error:") and "service_url" in result.output
    assert "Traceback" not in result.output


@pytest.mark.e2e
def test_runs_exports_spools_and_stops_on_sigterm(tmp_path: Path) -> None:
    metrics_port, dead_port = _free_port(), _free_port()
    config = tmp_path / "agent.toml"
    config.write_text(
        "[agent]\n"
        f'service_url = "http://127.0.0.1:{dead_port}"\ntoken = "tok"\nname = "node-a"\n'
        f'spool_dir = "{tmp_path / "spool"}"\nperiod_s = 0.2\nship_every_s = 0.5\n'
        f'metrics_host = "127.0.0.1"\nmetrics_port = {metrics_port}\n'
        'source = "agent_fakes:CliSampler"\nsource_options = { gpus = 2 }\n'
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    exe = Path(sys.executable).parent / "gpu-ledger"
    proc = subprocess.Popen([str(exe), "agent", "--config", str(config)], env=env, stderr=subprocess.PIPE)
    try:
        text, deadline = "", time.monotonic() + 20
        while "DCGM_FI_DEV_GPU_UTIL" not in text and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            try:
                text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=1).text
            except httpx.HTTPError:
                time.sleep(0.1)
        assert 'DCGM_FI_DEV_GPU_UTIL{gpu="1"' in text
        time.sleep(1.0)  # a couple of batches sealed; the service is not there: they stay spooled
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err.decode()
    assert len(list((tmp_path / "spool").glob("*.batch"))) >= 2


def test_agent_imports_stay_small() -> None:
    """The agent's 100 MB RSS budget (issue 3): its import path must not pull in the frame and
    database libraries (Polars alone is ~36 MB) nor the service's settings."""
    code = (
        "import sys\n"
        "import service.cli, service.agent.run, connectors.nvml, service.agent.exporter\n"
        "heavy = {'polars', 'numpy', 'sqlalchemy', 'sqlmodel', 'pydantic_settings', 'strawberry',"
        " 'starlette', 'pyarrow', 'pgpq'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
