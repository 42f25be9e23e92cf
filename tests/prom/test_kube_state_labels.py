"""kube-state-metrics' kube_pod_labels / kube_namespace_labels joined to dcgm-exporter's pods, read
from a real Prometheus holding recorded kube-state-metrics exposition (tests/fixtures)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from prom.promserver import running_prometheus, series_text

from connectors.prometheus import PrometheusConfig, PrometheusConnector
from connectors.sdk import WorkloadInfo

START = dt.datetime(2026, 11, 30, 10, tzinfo=dt.UTC)
EXPOSITION = Path(__file__).parents[1] / "fixtures" / "kube_state_metrics" / "metrics.prom"
_SERIES = re.compile(r"^(\w+)\{(.*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
KSM_TARGET = {"job": "kube-state-metrics", "instance": "10.244.1.7:8080"}
# honor_labels: false — Prometheus put its target's namespace/pod on the series, the pod's moved to exported_*
RELABELLED = {**KSM_TARGET, "namespace": "monitoring", "pod": "kube-state-metrics-6c9d7b8f5-q2w4x"}


def scraped(target: dict[str, str], ts: list[int]) -> str:
    """The recorded exposition as Prometheus stores it after scraping it at ``ts``."""
    out = []
    for line in EXPOSITION.read_text().splitlines():
        if not (m := _SERIES.match(line)):
            continue
        labels = dict(_LABEL.findall(m.group(2)))
        for name in ("namespace", "pod"):
            if name in target and name in labels:
                labels[f"exported_{name}"] = labels.pop(name)
        out.append(series_text(m.group(1), {**labels, **target}, ts, [float(m.group(3))] * len(ts)))
    return "".join(out)


def dcgm(ts: list[int]) -> str:
    out = []
    pods = [("ml-research", "bert-train-0", "trainer"), ("ml-infer", "llama-0", "server"), ("ml.*", "x", "c")]
    for g, (ns, pod, container) in enumerate(pods):
        labels = {"UUID": f"GPU-{g}", "gpu": str(g), "Hostname": "n1", "job": "dcgm",
                  "namespace": ns, "pod": pod, "container": container}  # fmt: skip
        out.append(series_text("DCGM_FI_DEV_GPU_UTIL", labels, ts, [50.0] * len(ts)))
    return "".join(out)


@pytest.fixture(scope="module", params=["honor_labels", "relabelled"])
def prometheus_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    ts = [int(START.timestamp()) + 15 * i for i in range(240)]
    ksm = scraped(KSM_TARGET if request.param == "honor_labels" else RELABELLED, ts[::2])
    with running_prometheus(tmp_path_factory.mktemp("ksm"), dcgm(ts) + ksm) as url:
        yield url


class GridConnector(PrometheusConnector):
    """The older last_over_time grid path (the Prometheus-compatible services' subclasses)."""

    raw_samples = False


def workloads(
    url: str, kind: type[PrometheusConnector] = PrometheusConnector, **config: object
) -> dict[str, WorkloadInfo]:
    cfg = PrometheusConfig(name="p", url=url, step_s=15, label_selector='{job="dcgm"}', **config)  # type: ignore[arg-type]
    with kind(cfg, clock=lambda: START + dt.timedelta(hours=3)) as connector:
        batches = list(connector.collect(START, START + dt.timedelta(hours=1)))
    return {w.workload_key: w for b in batches for w in b.workloads}


@pytest.mark.parametrize("kind", [PrometheusConnector, GridConnector])
def test_pod_and_namespace_labels_become_facts(prometheus_url: str, kind: type[PrometheusConnector]) -> None:
    got = workloads(
        prometheus_url, kind, kube_state_labels=True, kube_state_selector='{job="kube-state-metrics"}'
    )
    assert got["k8s:ml-research/bert-train-0/trainer"].facts == {
        "k8s.namespace": "ml-research",
        "k8s.pod": "bert-train-0",
        "k8s.container": "trainer",
        "k8s.pod_label:app_kubernetes_io_name": "bert",
        "k8s.pod_label:team": "nlp",
        "k8s.namespace_label:cost_center": "cc-4711",
        "k8s.namespace_label:kubernetes_io_metadata_name": "ml-research",
        "k8s.namespace_label:team": "nlp",
    }
    llama = got["k8s:ml-infer/llama-0/server"].facts
    assert llama["k8s.pod_label:gpu_ledger_project"] == "chat"
    assert llama["k8s.namespace_label:cost_center"] == "cc-0815"
    # a namespace no RFC 1123 name can be (regex characters): asked without a matcher, nothing joined
    assert got["k8s:ml.*/x/c"].facts == {"k8s.namespace": "ml.*", "k8s.pod": "x", "k8s.container": "c"}


def test_off_by_default_the_pods_carry_their_names_only(prometheus_url: str) -> None:
    got = workloads(prometheus_url)
    assert got["k8s:ml-research/bert-train-0/trainer"].facts == {
        "k8s.namespace": "ml-research", "k8s.pod": "bert-train-0", "k8s.container": "trainer"
    }  # fmt: skip


def test_a_selector_matching_no_kube_state_series_adds_nothing(prometheus_url: str) -> None:
    got = workloads(prometheus_url, kube_state_labels=True, kube_state_selector='{job="elsewhere"}')
    assert set(got["k8s:ml-infer/llama-0/server"].facts) == {"k8s.namespace", "k8s.pod", "k8s.container"}


def test_the_selector_is_checked() -> None:
    with pytest.raises(ValueError, match="kube_state_selector"):
        PrometheusConfig(name="p", url="http://x", kube_state_selector='job="a"} or vector(1)')
