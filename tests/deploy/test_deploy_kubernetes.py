"""deploy/kubernetes: every object fits the official client's models, and the service and the agent
get what they need — probes, non-root, NVML, host PIDs, a spool on the node, a /metrics port,
GPU-node placement — with configuration the real loaders accept."""

from __future__ import annotations

import copy
import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_checks import (
    K8S_DIR,
    connector_models,
    deserialize,
    kustomize_resources,
    load_documents,
    model_name,
    model_problems,
    unknown_ledger_vars,
)

from service.agent.config import load_agent_settings
from service.agent.sampler import load_sampler
from service.settings import load_settings

OBJECTS = kustomize_resources()
AGENT_UID = 10001


def pod_spec(key: str) -> dict[str, Any]:
    return OBJECTS[key]["spec"]["template"]["spec"]


def container(key: str, name: str) -> dict[str, Any]:
    spec = pod_spec(key)
    return next(c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == name)


def test_every_file_in_the_folder_is_listed_or_optional() -> None:
    listed = set(yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())["resources"])
    present = {p.name for p in K8S_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert present == listed


@pytest.mark.parametrize("key", sorted(OBJECTS))
def test_object_fits_the_kubernetes_client_models(key: str) -> None:
    doc = OBJECTS[key]
    assert model_problems(doc, model_name(doc)) == []
    deserialize(doc)  # required fields: the models' constructors raise when one is missing


def test_model_check_catches_a_misspelt_field_and_a_wrong_type() -> None:
    doc = copy.deepcopy(OBJECTS["Deployment/gpu-ledger"])
    main = doc["spec"]["template"]["spec"]["containers"][0]
    main["readinesProbe"] = main.pop("readinessProbe")
    main["ports"][0]["containerPort"] = "8000"
    problems = model_problems(doc, "V1Deployment")
    assert any("readinesProbe: no such field" in p for p in problems)
    assert any("containerPort: expected int" in p for p in problems)
    doc = copy.deepcopy(OBJECTS["Deployment/gpu-ledger"])
    del doc["spec"]["selector"]
    with pytest.raises(ValueError, match="selector"):
        deserialize(doc)


def test_kustomize_builds_it_when_kubectl_is_here() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl on this machine")
    out = subprocess.run([kubectl, "kustomize", str(K8S_DIR)], capture_output=True, text=True, check=True)
    built = {f"{d['kind']}/{d['metadata']['name']}": d for d in yaml.safe_load_all(out.stdout)}
    assert set(built) == set(OBJECTS)
    cluster_scoped = ("Namespace", "ClusterRole", "ClusterRoleBinding")
    assert all(
        d["metadata"].get("namespace") == "gpu-ledger"
        for k, d in built.items()
        if d["kind"] not in cluster_scoped
    )
    images = {
        c["image"]
        for d in built.values()
        if "template" in d.get("spec", {})
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert images == {"registry.example.com/gpu-ledger:0.1.0"}


# -- the service -------------------------------------------------------------------------------


def test_service_probes_hit_healthz_and_readyz_on_the_served_port() -> None:
    main = container("Deployment/gpu-ledger", "gpu-ledger")
    assert main["command"] == ["gpu-ledger"] and main["args"][0] == "serve"
    port = int(main["args"][main["args"].index("--port") + 1])
    assert main["ports"] == [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    assert main["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert main["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert main["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert main["args"][main["args"].index("--host") + 1] == "0.0.0.0"
    service = OBJECTS["Service/gpu-ledger"]["spec"]
    assert service["ports"][0]["targetPort"] == "http"
    labels = OBJECTS["Deployment/gpu-ledger"]["spec"]["template"]["metadata"]["labels"]
    assert service["selector"].items() <= labels.items()


@pytest.mark.parametrize(
    ("key", "name"),
    [
        ("Deployment/gpu-ledger", "gpu-ledger"),
        ("Job/gpu-ledger-bootstrap-tokens", "tokens"),
        ("DaemonSet/gpu-ledger-agent", "agent"),
    ],
)
def test_containers_run_non_root_read_only_with_no_capabilities(key: str, name: str) -> None:
    spec = pod_spec(key)
    ctx = {**spec.get("securityContext", {}), **container(key, name)["securityContext"]}
    assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] == AGENT_UID
    assert ctx["allowPrivilegeEscalation"] is False
    assert ctx["readOnlyRootFilesystem"] is True
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    # Only the service talks to the API (the kubernetes facts connector's read-only role,
    # ledger-rbac.yaml): nothing else gets a token — not the agents (issue 13's memory budget).
    assert spec["automountServiceAccountToken"] is (key == "Deployment/gpu-ledger")
    resources = container(key, name)["resources"]
    assert resources["requests"]["cpu"] and resources["requests"]["memory"] and resources["limits"]["memory"]


def test_service_config_and_secret_load_through_the_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    main = container("Deployment/gpu-ledger", "gpu-ledger")
    env = {e["name"]: e["value"] for e in main["env"]}
    secret_name = main["envFrom"][0]["secretRef"]["name"]
    env.update(OBJECTS[f"Secret/{secret_name}"]["stringData"])
    mount = next(m for m in main["volumeMounts"] if m["name"] == "config")
    config_map = next(v for v in pod_spec("Deployment/gpu-ledger")["volumes"] if v["name"] == "config")
    data = OBJECTS[f"ConfigMap/{config_map['configMap']['name']}"]["data"]
    assert env["GPU_LEDGER_CONFIG"] == f"{mount['mountPath']}/config.toml"
    (tmp_path / "config.toml").write_text(data["config.toml"])
    env["GPU_LEDGER_CONFIG"] = str(tmp_path / "config.toml")

    for name in [n for n in os.environ if n.upper().startswith("GPU_LEDGER_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert settings.database_url.startswith("postgresql+psycopg://")
    assert [(c.name, c.type) for c in settings.connectors] == [
        ("gpu-nodes", "agent"),
        ("kubernetes", "kubernetes"),
    ]
    kubernetes = settings.connectors[1]
    assert kubernetes.api == "in-cluster"  # type: ignore[attr-defined]
    # its facts' keys are what the rules read
    assert {r.source for r in settings.attribution} == {"k8s.pod_label:gpu-ledger.project", "k8s.namespace"}
    assert [s.name for s in settings.sites] == ["dc1"]
    assert unknown_ledger_vars(env, connector_models(settings)) == []
    # The Job that creates the agents' token names the connector the service has.
    job = " ".join(container("Job/gpu-ledger-bootstrap-tokens", "tokens")["args"])
    assert "--scope push:gpu-nodes" in job and "--scope admin" in job


# -- the node agent ----------------------------------------------------------------------------


def test_agent_runs_on_gpu_nodes_only_and_tolerates_their_taints() -> None:
    spec = pod_spec("DaemonSet/gpu-ledger-agent")
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    keys = {e["key"] for t in terms for e in t["matchExpressions"]}
    assert keys == {"nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present"}
    assert {(t["key"], t["operator"], t["effect"]) for t in spec["tolerations"]} >= {
        ("nvidia.com/gpu", "Exists", "NoSchedule")
    }


def test_agent_gets_nvml_host_pids_a_spool_on_the_node_and_a_metrics_port() -> None:
    spec = pod_spec("DaemonSet/gpu-ledger-agent")
    agent = container("DaemonSet/gpu-ledger-agent", "agent")
    assert spec["hostPID"] is True
    assert spec["runtimeClassName"] == "nvidia"
    env = {e["name"]: e["value"] for e in agent["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and "utility" in env["NVIDIA_DRIVER_CAPABILITIES"]
    # No GPU is requested: the device plugin would hand the agent one GPU and hide the others.
    assert not any("nvidia.com" in k for part in agent["resources"].values() for k in part)
    state = next(v for v in spec["volumes"] if v["name"] == "state")
    assert state["hostPath"]["type"] == "DirectoryOrCreate"
    port = next(p for p in agent["ports"] if p["name"] == "metrics")["containerPort"]
    annotations = OBJECTS["DaemonSet/gpu-ledger-agent"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/port"] == str(port)
    assert agent["livenessProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    metrics = OBJECTS["Service/gpu-ledger-agent-metrics"]["spec"]
    assert metrics["ports"][0]["port"] == port and metrics["clusterIP"] == "None"
    monitor = load_documents(K8S_DIR / "monitoring" / "servicemonitor.yaml")[0]
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= metrics["selector"].items()


def test_the_service_reads_the_api_with_a_read_only_role_and_the_agent_mounts_the_kubelet_socket() -> None:
    rules = OBJECTS["ClusterRole/gpu-ledger-kubernetes-reader"]["rules"]
    assert rules == [{"apiGroups": [""], "resources": ["pods", "namespaces", "nodes"],
                      "verbs": ["get", "list", "watch"]}]  # fmt: skip
    binding = OBJECTS["ClusterRoleBinding/gpu-ledger-kubernetes-reader"]
    assert binding["roleRef"]["name"] == "gpu-ledger-kubernetes-reader"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpu-ledger", "namespace": "gpu-ledger"}
    ]
    assert "ServiceAccount/gpu-ledger" in OBJECTS
    assert pod_spec("Deployment/gpu-ledger")["serviceAccountName"] == "gpu-ledger"
    assert "serviceAccountName" not in pod_spec("DaemonSet/gpu-ledger-agent")
    assert not any(k.endswith("/gpu-ledger-agent") for k in OBJECTS if k.split("/")[0].startswith("Cluster"))
    agent = container("DaemonSet/gpu-ledger-agent", "agent")
    mount = next(m for m in agent["volumeMounts"] if m["name"] == "pod-resources")
    assert mount == {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True}


def test_agent_init_script_renders_a_config_the_agent_loads(tmp_path: Path) -> None:
    """Runs the init container's own script (paths moved under tmp_path) and loads its output
    with the agent's loader: the settings the DaemonSet runs with are real and complete."""
    spec = pod_spec("DaemonSet/gpu-ledger-agent")
    prepare = container("DaemonSet/gpu-ledger-agent", "prepare")
    agent = container("DaemonSet/gpu-ledger-agent", "agent")
    mounts = {m["name"]: m["mountPath"] for m in prepare["volumeMounts"]}
    template_volume = next(v for v in spec["volumes"] if v["name"] == "template")
    data = OBJECTS[f"ConfigMap/{template_volume['configMap']['name']}"]["data"]
    secret_ref = next(e for e in prepare["env"] if e["name"] == "AGENT_TOKEN")["valueFrom"]["secretKeyRef"]
    assert secret_ref["key"] in OBJECTS[f"Secret/{secret_ref['name']}"]["stringData"]
    node_ref = next(e for e in prepare["env"] if e["name"] == "NODE_NAME")["valueFrom"]["fieldRef"]
    assert node_ref["fieldPath"] == "spec.nodeName"

    script = prepare["args"][0]
    for name, path in mounts.items():
        (tmp_path / name).mkdir()
        script = script.replace(path, str(tmp_path / name))
    for name, text in data.items():
        (tmp_path / "template" / name).write_text(text)
    token = 'gpl_abc"\\def-0123456789'  # quotes and backslashes survive into the TOML string
    env = {"PATH": os.environ["PATH"], "NODE_NAME": "gpu-node-17", "AGENT_TOKEN": token}
    if os.geteuid() != 0:
        script = script.replace("os.chown(", "(lambda *a: None)(")  # only root may chown
    subprocess.run([sys.executable, "-c", script], env=env, check=True)

    config_path = Path(agent["command"][agent["command"].index("--config") + 1])
    assert str(config_path.parent) == mounts["config"]
    rendered = tmp_path / "config" / config_path.name
    assert oct(rendered.stat().st_mode & 0o777) == "0o400"
    if os.geteuid() == 0:
        assert rendered.stat().st_uid == AGENT_UID
        assert (tmp_path / "state" / "spool").stat().st_uid == AGENT_UID
    rendered.chmod(0o600)
    settings = load_agent_settings(rendered)
    assert settings.token.get_secret_value() == token
    assert settings.agent_id == "gpu-node-17" and settings.name == "gpu-nodes"
    assert settings.spool_dir == Path(mounts["state"]) / "spool"
    assert settings.metrics_port == next(p for p in agent["ports"] if p["name"] == "metrics")["containerPort"]
    assert settings.proc_root == Path("/proc")
    assert settings.service_url == "http://gpu-ledger.gpu-ledger.svc"  # the Service, in its namespace
    # The agent's own path to its sampler: source_options validated by NVML's config model (NVML
    # itself is started on the first sample, so this runs without a GPU). No API server and no
    # kubelet: the lean default (issue 13), which builds the same here as on a GPU node.
    assert (settings.kubernetes_api, settings.pod_resources_socket) == (None, None)
    assert spec["automountServiceAccountToken"] is False
    nvml = load_sampler(settings).config
    assert nvml.node == "gpu-node-17" and nvml.region == "dc1" and nvml.period_s == settings.period_s
    # The agent's connector on the service side exists under the same name.
    service_config = OBJECTS["ConfigMap/gpu-ledger-config"]["data"]["config.toml"]
    assert 'name = "gpu-nodes"\ntype = "agent"' in service_config


def test_the_bench_runs_the_daemonsets_agent_config_without_a_cluster(tmp_path: Path) -> None:
    """bench/agent_overhead.py --daemonset (and agent_k8s_rss's ``daemonset`` mode) render the
    DaemonSet's own template: what the agent loads is the DaemonSet's config but for where it ships,
    spools and serves /metrics — and it reads no Kubernetes, so it runs on a GPU node outside one."""
    path = Path(__file__).resolve().parents[2] / "bench" / "daemonset_config.py"
    spec = importlib.util.spec_from_file_location("daemonset_config", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    text = bench.render(service_url="http://127.0.0.1:8123", token="t" * 20, spool_dir=tmp_path / "spool",
                        metrics_port=9555, node="gpu-node-17")  # fmt: skip
    rendered = tmp_path / "agent.toml"
    rendered.write_text(text)
    rendered.chmod(0o600)
    settings = load_agent_settings(rendered)
    assert (settings.service_url, settings.spool_dir, settings.metrics_host, settings.metrics_port) == (
        "http://127.0.0.1:8123", tmp_path / "spool", "127.0.0.1", 9555
    )  # fmt: skip
    # the rest is the DaemonSet's, as the init container renders it
    data = OBJECTS["ConfigMap/gpu-ledger-agent-config"]["data"]["agent.toml.template"]
    shipped = tomllib.loads(data.replace("@NODE_NAME@", "gpu-node-17").replace("@AGENT_TOKEN@", "x"))
    ours = tomllib.loads(text)
    moved = {"service_url", "token", "spool_dir", "metrics_host", "metrics_port"}
    assert {k: v for k, v in ours["agent"].items() if k not in moved} == {
        k: v for k, v in shipped["agent"].items() if k not in moved
    }
    assert (settings.kubernetes_api, settings.pod_resources_socket, settings.proc_root) == (
        None,
        None,
        Path("/proc"),
    )
    assert load_sampler(settings).config.node == "gpu-node-17"
