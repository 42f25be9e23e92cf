"""The agent's 60 MB budget (issue 13): its process imports no framework it does not need, and the
small replacements (stdlib HTTP client, log lines, the exposition's number format, the entry
point) do what the libraries did for it."""

from __future__ import annotations

import io
import json
import logging
import math
import random
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client.utils import floatToGoString
from pydantic import SecretStr

from service.agent.exporter import float_to_go_string
from service.agent.http import HttpClient, TransportError
from service.agent.keys import Secret
from service.agent.log import MASK, AgentLogger, _masked, configure_console
from service.agent.ship import Shipper
from service.agent.spool import Spool

# Loaded by none of: `python -m service.agent` (the agent's entry), the NVML sampler, the exporter.
# pydantic too: the agent checks its config itself (service.agent.keys; ~20 MB on the H200).
NOT_IN_AGENT = {
    "polars", "numpy", "sqlalchemy", "sqlmodel", "pydantic", "pydantic_core", "pydantic_settings",
    "annotated_types", "typing_inspection", "strawberry", "starlette",
    "structlog", "asyncio", "httpx", "httpcore", "anyio", "prometheus_client", "typer", "click",
    "rich", "pygments",
    "grpc", "google", "kubernetes", "urllib3", "yaml",  # the `k8s` extra: loaded only when configured
    "pyarrow", "pgpq",  # billing's binary COPY (service/ledger/bulk.py)
}  # fmt: skip


def test_the_agent_process_imports_none_of_the_heavy_libraries() -> None:
    # What `python -m service.agent` imports before it reads its config (service.agent.__main__
    # is run.main), plus the production sampler and the exporter.
    code = (
        "import sys\n"
        "import service.agent.run, connectors.nvml, connectors.nvml_gpm, connectors.nvml_procs\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.replace("'", '"')))
    assert loaded & NOT_IN_AGENT == set()
    assert {"pynvml", "service", "connectors"} <= loaded  # it did import the agent


def test_the_entry_point_gives_one_line_errors(tmp_path: Path) -> None:
    bad = tmp_path / "agent.toml"
    bad.write_text('[agent]\nservice_url = "ftp://x"\n')
    out = subprocess.run([sys.executable, "-m", "service.agent", "--config", str(bad)],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.startswith("gpu-ledger: error:") and "service_url" in out.stderr
    assert "Traceback" not in out.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "service.agent"], capture_output=True, text=True, timeout=60
    )
    assert missing.returncode == 2 and "--config" in missing.stderr


@pytest.mark.parametrize(
    "value",
    [0.0, -0.0, 1.0, 37.0, 0.35, 1e-7, 123456.0, 1234567.0, 12345678.9, 2383611000.0, 1.5e300, -2.5e9,
     math.inf, -math.inf, math.nan],
)  # fmt: skip
def test_numbers_are_written_as_prometheus_client_writes_them(value: float) -> None:
    assert float_to_go_string(value) == floatToGoString(value)


def test_log_lines_have_structlog_console_layout_and_mask_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "structlog", raising=False)  # as in the agent's own process
    stream = io.StringIO()
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        configure_console("INFO", stream)
        log = AgentLogger("service.agent.test")
        log.info("agent started", agent_id="n1", token=SecretStr("s3cret"), api_key="k",
                 service="https://u:pw@ledger.example", note="two words")  # fmt: skip
        log.debug("not shown")
        logging.getLogger("connectors.nvml").warning("nvml: %s failed", "GPU-1")
    finally:
        for h in root.handlers[:]:
            if h not in handlers:
                root.removeHandler(h)
        root.setLevel(level)
    first, second = stream.getvalue().splitlines()
    assert first[:27].endswith("Z") and first[27:].startswith(" [info     ] agent started")
    assert first.endswith(
        "[service.agent.test] agent_id=n1 token=********** api_key=********** "
        "service=https://u:***@ledger.example note='two words'"
    )
    assert "s3cret" not in first and ":pw@" not in first
    # the agent's own secret type (its config's token) is masked whatever the field is called
    assert _masked("bearer", Secret("s3cret")) == MASK and "s3cret" not in repr(Secret("s3cret"))
    assert (
        second[27:] == " [warning  ] nvml: GPU-1 failed" + " " * 12 + " [connectors.nvml]"
    )  # event padded to 30


class _Service(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as uvicorn answers
    statuses: list[int] = []
    seen: list[tuple[str, str, dict]] = []
    connections: set[int] = set()
    drop_after_answer = False

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Service.seen.append((self.path, self.headers["Authorization"], body))
        _Service.connections.add(self.client_address[1])
        status = _Service.statuses.pop(0) if _Service.statuses else 200
        answer = json.dumps({"duplicate": False} if status == 200 else {"error": f"status {status}"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)
        self.close_connection = _Service.drop_after_answer  # without a Connection: close header

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return


@pytest.fixture
def service() -> Iterator[ThreadingHTTPServer]:
    _Service.statuses, _Service.seen, _Service.connections, _Service.drop_after_answer = [], [], set(), False
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Service)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_http_client_posts_over_one_kept_alive_connection(service: ThreadingHTTPServer) -> None:
    url = f"http://127.0.0.1:{service.server_address[1]}/api/v1/batches?x=1"
    client = HttpClient(timeout=5)
    try:
        answers = [
            client.post(url, content=json.dumps({"n": i}), headers={"Authorization": "Bearer t"})
            for i in range(3)
        ]
    finally:
        client.close()
    assert [(a.status_code, a.is_success, a.json()) for a in answers] == [
        (200, True, {"duplicate": False})
    ] * 3
    assert [(p, h, b["n"]) for p, h, b in _Service.seen] == [
        ("/api/v1/batches?x=1", "Bearer t", i) for i in range(3)
    ]
    assert len(_Service.connections) == 1


def test_http_client_reconnects_when_the_service_dropped_the_idle_connection(
    service: ThreadingHTTPServer,
) -> None:
    """A service closes idle kept-alive connections (uvicorn after 5 s) without saying so; the
    next POST finds the connection dead and is sent once more on a new one."""
    port = service.server_address[1]
    client = HttpClient(timeout=5)
    _Service.drop_after_answer = True
    try:
        first = client.post(f"http://127.0.0.1:{port}/a", content='{"n": 1}', headers={})
        second = client.post(f"http://127.0.0.1:{port}/a", content='{"n": 2}', headers={})
    finally:
        client.close()
    assert (first.status_code, second.status_code) == (200, 200)
    assert [b["n"] for _, _, b in _Service.seen] == [1, 2] and len(_Service.connections) == 2


def test_http_client_errors_are_transport_errors() -> None:
    client = HttpClient(timeout=2)  # each failure closes its connection: nothing to close here
    with pytest.raises(TransportError):
        client.post(f"http://127.0.0.1:{_free_port()}/x", content="{}", headers={})  # refused
    with pytest.raises(TransportError, match="scheme"):
        client.post("ftp://127.0.0.1/x", content="{}", headers={})


def test_shipper_with_the_agent_client_retries_quarantines_and_ships(
    service: ThreadingHTTPServer, tmp_path: Path
) -> None:
    from agent_fakes import FakeClock, FakeSampler
    from test_agent_spool_ship import T0

    clock = FakeClock(T0)
    sampler, spool = FakeSampler(clock, n=1), Spool(tmp_path, "host1", "node-a")
    for _ in range(3):
        spool.append(sampler.sample())
        spool.seal()
        clock.sleep(60)
    port = service.server_address[1]
    down = Shipper(HttpClient(timeout=2), f"http://127.0.0.1:{_free_port()}/api/v1/batches", "tok")
    assert down.ship(spool).failed and down.failures == 1 and len(spool.pending()) == 3
    _Service.statuses = [503, 400]
    shipper = Shipper(
        HttpClient(timeout=5), f"http://127.0.0.1:{port}/api/v1/batches", "tok", rng=random.Random(1)
    )
    try:
        assert shipper.ship(spool).failed  # 503: back off, keep it
        result = shipper.ship(spool)
    finally:
        shipper.client.close()
    assert (result.rejected, result.shipped, result.failed) == (1, 2, False)
    assert spool.pending() == []
    assert [b["batch_id"] for _, _, b in _Service.seen] == ["host1:1", "host1:1", "host1:2", "host1:3"]
    assert "HTTP 400: " in (tmp_path / "rejected" / "000000000001.reason").read_text()


def test_a_running_agent_on_nvml_loads_none_of_them_either(tmp_path: Path) -> None:
    """Build the production agent (NVML sampler on the fake libnvidia-ml.so.1, the attributor with
    a Docker socket path, the stdlib client), tick, seal, ship to a closed port, render /metrics —
    then look at what the process loaded: lazy imports must stay unloaded at run time too."""
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from nvml.fake_nvml_lib import build_fake_libs
    from nvml.h200_replay import h200, state

    lib = build_fake_libs(tmp_path / "libs")["full"]
    state_file = tmp_path / "nvml.state"
    state_file.write_text("".join(f"{k}={v}\n" for k, v in state(h200(), h200(1)).items()))
    config = tmp_path / "agent.toml"
    config.write_text(
        f'[agent]\nservice_url = "http://127.0.0.1:{_free_port()}"\ntoken = "tok"\nname = "n"\n'
        f'agent_id = "n1"\nspool_dir = "{tmp_path / "spool"}"\nmetrics_port = 0\nrequest_timeout_s = 2\n'
        f'docker_socket = "{tmp_path / "docker.sock"}"\n'
    )
    code = (
        "import sys, pathlib\n"
        "from service.agent.config import load_agent_settings\n"
        "from service.agent.run import build_agent\n"
        f"agent = build_agent(load_agent_settings({str(config)!r}))\n"
        "for _ in range(3): agent.tick()\n"
        "agent.spool.seal(); result = agent.shipper.ship(agent.spool)\n"
        "assert result.failed and len(agent.spool.pending()) == 1, result\n"
        "assert b'DCGM_FI_DEV_GPU_UTIL{gpu=\"1\"' in agent.exporter.render()\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(lib.parent), "FAKE_NVML_STATE": str(state_file),
           "PYTHONPATH": str(Path(__file__).parents[2])}  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    loaded = set(json.loads(out.stdout.replace("'", '"')))
    assert "pynvml" in loaded and loaded & NOT_IN_AGENT == set()


def _entry(*args: str) -> subprocess.CompletedProcess[str]:
    """The ``gpu-ledger`` console script's function with ``args``; prints whether typer loaded."""
    code = (
        "import sys\n"
        f"sys.argv = ['gpu-ledger', *{list(args)!r}]\n"
        "from service.agent.entry import main\n"
        "try:\n    main()\nfinally:\n    print('typer loaded:', 'typer' in sys.modules)\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_gpu_ledger_agent_skips_the_cli_framework_and_keeps_its_errors(tmp_path: Path) -> None:
    bad = tmp_path / "agent.toml"
    bad.write_text('[agent]\nservice_url = "ftp://x"\n')
    out = _entry("agent", "--config", str(bad))
    assert out.returncode == 2 and out.stdout == "typer loaded: False\n"
    assert out.stderr.startswith("gpu-ledger: error:") and "service_url" in out.stderr
    assert len(out.stderr.splitlines()) == 1
    helped = _entry("agent", "--help")  # help, and every other command, is the typer app's
    assert helped.returncode == 0 and "Run the node agent" in helped.stdout
    assert helped.stdout.endswith("typer loaded: True\n")
    other = _entry("export-schema")
    assert other.returncode == 0 and "type Query" in other.stdout
