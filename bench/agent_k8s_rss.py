"""What the node agent's Kubernetes readers cost in memory: peak RSS with each of them on and off.

    .venv/bin/python bench/agent_k8s_rss.py [--gpus 8] [--pods 100] [--namespaces 300] [--ticks 20]

No GPU or cluster needed: the fake ``libnvidia-ml.so.1`` (tests/nvml/fake_nvml.c, compiled with
gcc) serves ``--gpus`` idle H200s, an in-process fake API server (tests/k8s/fake_kube_api.py)
holds ``--pods`` pods on the node and ``--namespaces`` namespaces, and a fake kubelet
(tests/k8s/fake_kubelet.py, the real pod-resources proto over gRPC) allocates one GPU. For each
mode — ``off``, ``podres`` (``pod_resources_socket``), ``api`` (``kubernetes_api``), ``both``, and
``daemonset`` (the reference DaemonSet's own agent config, deploy/kubernetes/agent-config.yaml,
rendered by bench/daemonset_config.py: the host's /proc, no Kubernetes reader) — a fresh Python
builds the agent's sampler with ``service.agent.sampler.load_sampler`` from those settings, reads
``--ticks`` samples, and prints its ``VmHWM`` and which libraries it loaded.
The differences between modes are the libraries' cost (grpc + protobuf; the kubernetes client,
which imports all its models); with real NVML the agent's own base is higher (docs/agent.md).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import sys, time
from pathlib import Path
from service.agent.config import AgentSettings
from service.agent.sampler import load_sampler
mode, tmp, kubeconfig, socket = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
ticks = int(sys.argv[5])
keys = {}
if mode in ("api", "both"):
    keys["kubernetes_api"] = kubeconfig
if mode in ("podres", "both"):
    keys["pod_resources_socket"] = Path(socket)
if mode == "daemonset":  # the reference DaemonSet's own config (bench/daemonset_config.py)
    from service.agent.config import load_agent_settings
    settings = load_agent_settings(tmp / "daemonset.toml")
else:
    settings = AgentSettings(service_url="http://127.0.0.1:9", token="t" * 20, name="n", agent_id="n1",
                             spool_dir=tmp / "spool", docker_socket=None, proc_root=tmp / "proc",
                             kubernetes_node="gpu-node-17", source_options={"node": "gpu-node-17"}, **keys)
sampler = load_sampler(settings)
for _ in range(ticks):
    sampler.sample()
    time.sleep(0.05)
status = Path("/proc/self/status").read_text().splitlines()
hwm = next(line.split()[1] for line in status if line.startswith("VmHWM"))
loaded = [m for m in ("grpc", "asyncio", "google.protobuf", "kubernetes", "pydantic") if m in sys.modules]
print(f"{mode:7} peak RSS {int(hwm) / 1024:6.1f} MB  loaded: {', '.join(loaded) or '-'}")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--namespaces", type=int, default=300)
    parser.add_argument("--ticks", type=int, default=20)
    args = parser.parse_args()
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT), str(ROOT / "bench")]
    from nvml.fake_nvml_lib import build_fake_libs
    from nvml.h200_replay import h200, state

    from connectors.podresources import api_pb2
    from tests.k8s.fake_kube_api import fake_kube_api
    from tests.k8s.fake_kubelet import fake_kubelet, pod
    from tests.k8s.objects import namespace, node
    from tests.k8s.objects import pod as api_pod

    tmp = Path(tempfile.mkdtemp(prefix="agent-k8s-rss-"))
    lib = build_fake_libs(tmp / "libs")["full"]
    nvml_state = tmp / "nvml.state"
    gpus = state(*(h200(i) for i in range(args.gpus)))
    nvml_state.write_text("".join(f"{k}={v}\n" for k, v in gpus.items()))
    (tmp / "proc").mkdir()
    from daemonset_config import render

    ds = render(service_url="http://127.0.0.1:9", token="t" * 20, spool_dir=tmp / "spool", metrics_port=9)
    (tmp / "daemonset.toml").write_text(ds)
    (tmp / "daemonset.toml").chmod(0o600)
    with fake_kube_api() as api, fake_kubelet() as kubelet:
        held = {"nvidia.com/gpu": ["GPU-00000000-0000-0000-0000-000000000001"]}
        kubelet.answer = api_pb2.ListPodResourcesResponse(pod_resources=[pod("ns", "p", ("c", held))])
        for i in range(args.pods):
            api.put("pods", api_pod(f"p{i}", uid=f"{i:08d}-aaaa-4bbb-8ccc-dddddddddddd"))
        for i in range(args.namespaces):
            api.put("namespaces", namespace(f"ns{i}", {"team": f"t{i % 7}"}))
        api.put("nodes", node())
        kubeconfig = api.kubeconfig(tmp)
        env = {**os.environ, "LD_LIBRARY_PATH": str(lib.parent), "FAKE_NVML_STATE": str(nvml_state),
               "PYTHONPATH": str(ROOT)}  # fmt: skip
        for mode in ("off", "podres", "api", "both", "daemonset"):
            argv = [mode, str(tmp), str(kubeconfig), str(kubelet.socket), str(args.ticks)]
            out = subprocess.run(
                [sys.executable, "-c", PROBE, *argv], env=env, capture_output=True, text=True
            )
            print(out.stdout.strip() or out.stderr.strip()[-800:])


if __name__ == "__main__":
    main()
