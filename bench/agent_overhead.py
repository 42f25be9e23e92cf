"""Benchmark (c): the node agent's CPU and peak RSS at 1 s sampling, agent alone.

    .venv/bin/python bench/agent_overhead.py [--seconds 120] [--fake-nvml] [--gpus 1]
                                             [--entry console|agent|cli] [--tree DIR] [--python EXE]
                                             [--daemonset] [--out DIR]

Runs the agent — ``--entry console``: ``gpu-ledger agent`` as the installed console script runs it
(service/agent/entry.py); ``agent``: ``python -m service.agent``; ``cli``: through the typer app,
as ``gpu-ledger agent`` ran before issue 13 — from the source tree ``--tree`` (default: this
checkout; an older commit's ``service/`` and ``connectors/`` to compare), with its production
sampler (NVML, ``period_s = 1``,
``ship_every_s = 5``, /metrics served and scraped every 15 s) against a stand-in service: an
in-process HTTP server that acknowledges every ``POST /api/v1/batches`` with 200, as the service
does for a stored batch. So the agent samples, spools, ships and exports as in production, and
nothing but the agent runs in the measured process. ``scripts/gpu-validate-ledger`` measures the
same figures during its end-to-end GPU phases (it needs the whole service and PyTorch there).

CPU is the agent's ``utime + stime`` (/proc/PID/stat) over the steady state (from 5 s after
/metrics first answers to the end), as % of one core; peak RSS is ``VmHWM`` (/proc/PID/status).
The resident memory by mapping (smaps) at the end says what the RSS is.

``--daemonset``: the reference DaemonSet's own agent config (deploy/kubernetes/agent-config.yaml,
bench/daemonset_config.py) instead of the 1 s one — its period, shipping and source options, the
host's ``/proc``, no Kubernetes API and no kubelet — with only the service, spool and /metrics port
moved to the bench's; it runs on any GPU node, no cluster needed.

``--fake-nvml``: no GPU needed — compiles ``tests/nvml/fake_nvml.c`` with gcc and loads it as
``libnvidia-ml.so.1`` through ``LD_LIBRARY_PATH`` (the real pynvml binding calls it), serving
``--gpus`` idle H200s whose counters advance every second.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.request import urlopen

ROOT = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")
TOKEN = "bench-token"


def cpu_s(pid: int) -> float:
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def rss_by_mapping(pid: int, top: int = 10) -> list[tuple[str, int]]:
    """Resident kB per mapped file ([anon], [heap], … for the rest), largest first."""
    sizes: dict[str, int] = {}
    name = "[anon]"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and not head[0].endswith(":"):
            name = Path(head[5]).name if len(head) > 5 else "[anon]"
        elif head and head[0] == "Rss:":
            sizes[name] = sizes.get(name, 0) + int(head[1])
    return sorted(sizes.items(), key=lambda kv: -kv[1])[:top]


class Service(BaseHTTPRequestHandler):
    """Stands in for ``POST /api/v1/batches``: checks the token, reads the body, answers 200."""

    received: list[int] = []
    # What the batches held (samples per metric, devices, workloads): proof that the sampler's
    # readings — NVML's on a GPU — reached the wire, not just that something was posted.
    metrics: dict[str, int] = {}
    devices: set[str] = set()
    workloads: set[str] = set()

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        batch = json.loads(body)
        ok = self.headers.get("Authorization") == f"Bearer {TOKEN}" and bool(batch)
        Service.received.append(len(body))
        samples = batch.get("samples", {}) if isinstance(batch, dict) else {}
        for metric in samples.get("metric", []):
            Service.metrics[metric] = Service.metrics.get(metric, 0) + 1
        Service.devices.update(samples.get("device_id", []))
        Service.workloads.update(samples.get("workload_key", []))
        answer = json.dumps({"stored": True} if ok else {"error": "bad"}).encode()
        self.send_response(200 if ok else 400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fake_nvml(tmp: Path, gpus: int) -> tuple[dict[str, str], threading.Event]:
    """Build the fake libnvidia-ml.so.1; a thread advances its counters every second."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise SystemExit("--fake-nvml needs gcc")
    lib = tmp / "nvml" / "libnvidia-ml.so.1"
    lib.parent.mkdir()
    flags = ["-O2", "-shared", "-fPIC", "-Wl,-soname,libnvidia-ml.so.1", "-Wl,-Bsymbolic"]
    subprocess.run([gcc, *flags, "-o", str(lib), str(ROOT / "tests/nvml/fake_nvml.c")], check=True)
    state = tmp / "nvml.state"
    stop = threading.Event()

    def write(t: float) -> None:
        keys: dict[str, object] = {"driver": "580.159.04", "count": gpus}
        for i in range(gpus):
            gpu = {
                "uuid": f"GPU-00000000-0000-0000-0000-{i:012d}", "name": "NVIDIA H200",
                "pci_bus_id": f"00000000:{i:02x}:00.0", "power_limit_mw": 700000, "util_gpu": 37,
                "util_mem": 5, "mem_total": 143771 << 20, "mem_used": 1 << 30, "power_mw": 89202,
                "energy_mj": int(2383611 + 89.2 * t * 1000), "temp_c": 35, "gpm_supported": 1,
                "gpm.t": t, "gpm.2": 30.0 * t, "gpm.5": 10.0 * t, "gpm.10": 5.0 * t,
            }  # fmt: skip
            keys.update({f"gpu.{i}.{k}": v for k, v in gpu.items()})
        tmp_state = state.with_suffix(".tmp")
        tmp_state.write_text("".join(f"{k}={v}\n" for k, v in keys.items()))
        os.replace(tmp_state, state)

    def advance() -> None:
        t0 = time.monotonic()
        while not stop.wait(1.0):
            write(time.monotonic() - t0)

    write(0.0)
    threading.Thread(target=advance, daemon=True).start()
    env = {
        "LD_LIBRARY_PATH": f"{lib.parent}:{os.environ.get('LD_LIBRARY_PATH', '')}",
        "FAKE_NVML_STATE": str(state),
    }
    return env, stop


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="steady-state seconds measured")
    parser.add_argument("--fake-nvml", action="store_true")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs the fake NVML serves")
    parser.add_argument("--entry", choices=["console", "agent", "cli"], default="console")
    parser.add_argument("--tree", type=Path, default=ROOT, help="source tree the agent runs from")
    parser.add_argument(
        "--python", default=sys.executable, help="interpreter (e.g. a venv's) the agent runs on"
    )
    parser.add_argument("--daemonset", action="store_true", help="the reference DaemonSet's agent config")
    parser.add_argument("--out", type=Path, help="write agent_overhead.json and the agent's log here")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gl-agent-bench-"))
    tree = str(args.tree.resolve())
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in [tree, os.environ.get("PYTHONPATH", "")] if p),
    }
    stop_fake = None
    if args.fake_nvml:
        extra, stop_fake = fake_nvml(tmp, args.gpus)
        env.update(extra)
    svc_port, metrics_port = free_port(), free_port()
    server = ThreadingHTTPServer(("127.0.0.1", svc_port), Service)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = tmp / "agent.toml"
    if args.daemonset:
        from daemonset_config import render  # bench/, beside this file

        config.write_text(render(service_url=f"http://127.0.0.1:{svc_port}", token=TOKEN,
                                 spool_dir=tmp / "spool", metrics_port=metrics_port))  # fmt: skip
    else:
        config.write_text(
            f'[agent]\nservice_url = "http://127.0.0.1:{svc_port}"\ntoken = "{TOKEN}"\nname = "bench"\n'
            f'agent_id = "bench"\nperiod_s = 1\nship_every_s = 5\nspool_dir = "{tmp / "spool"}"\n'
            f'metrics_host = "127.0.0.1"\nmetrics_port = {metrics_port}\n'
            f'docker_socket = "{tmp / "none.sock"}"\n'
            '[agent.source_options]\nnode = "bench"\n'
        )
    command = {
        "console": [args.python, "-c", "from service.agent.entry import main; main()", "agent"],
        "agent": [args.python, "-m", "service.agent"],
        "cli": [args.python, "-c", "from service.cli import app; app()", "agent"],
    }[args.entry]
    log_path = tmp / "agent.log"
    t_spawn = time.monotonic()
    with open(log_path, "w") as agent_log:
        agent = subprocess.Popen([*command, "--config", str(config)], env=env, stdout=agent_log,
                                 stderr=subprocess.STDOUT, cwd=tree)  # fmt: skip
    try:
        metrics = ""
        while "DCGM_FI_DEV_GPU_UTIL" not in metrics:
            if agent.poll() is not None or time.monotonic() - t_spawn > 60:
                raise SystemExit(f"agent did not start:\n{log_path.read_text()[-3000:]}")
            try:
                metrics = urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2).read().decode()
            except OSError:
                time.sleep(0.2)
        up_s = time.monotonic() - t_spawn
        time.sleep(5)
        rss_up_kb = status_kb(agent.pid, "VmRSS")
        cpu0, t0 = cpu_s(agent.pid), time.monotonic()
        next_scrape = t0
        while time.monotonic() - t0 < args.seconds:
            if time.monotonic() >= next_scrape:  # Prometheus scrapes every 15 s
                urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read()
                next_scrape += 15
            time.sleep(0.5)
        cpu1, t1 = cpu_s(agent.pid), time.monotonic()
        result = {
            "command": " ".join([command[0], *command[1:]]),
            "tree": tree,
            "python": platform.python_version(),
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
            "nvml": "fake" if args.fake_nvml else "real",
            "config": "deploy/kubernetes/agent-config.yaml" if args.daemonset else "1 s bench",
            "gpus_fake": args.gpus if args.fake_nvml else None,
            "startup_s": round(up_s, 2),
            "steady_s": round(t1 - t0, 1),
            "cpu_pct_of_one_core": round(100 * (cpu1 - cpu0) / (t1 - t0), 3),
            "vmhwm_mb": round(status_kb(agent.pid, "VmHWM") * 1024 / 1e6, 1),
            "vmrss_mb": round(status_kb(agent.pid, "VmRSS") * 1024 / 1e6, 1),
            "vmrss_after_start_mb": round(rss_up_kb * 1024 / 1e6, 1),
            "batches_shipped": len(Service.received),
            "samples_shipped_by_metric": dict(sorted(Service.metrics.items())),
            "devices_shipped": sorted(Service.devices),
            "workloads_shipped": sorted(Service.workloads),
            "rss_by_mapping_mb": {n: round(kb * 1024 / 1e6, 1) for n, kb in rss_by_mapping(agent.pid)},
        }
    finally:
        agent.terminate()
        agent.wait(30)
        server.shutdown()
        if stop_fake is not None:
            stop_fake.set()
    result["exit"] = agent.returncode
    result["spool_left"] = len(list((tmp / "spool").glob("*.batch")))
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "agent_overhead.json").write_text(json.dumps(result, indent=1))
        shutil.copy(log_path, args.out / "agent.log")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if agent.returncode == 0 and result["batches_shipped"] > 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
