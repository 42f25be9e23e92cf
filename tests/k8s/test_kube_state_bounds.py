"""KubeStateLabels' facts stay within what the push API and the ledger accept, whatever the labels."""

from __future__ import annotations

from typing import Any

from connectors.kube_state import KubeStateLabels
from connectors.sdk import SampleBatch, WorkloadInfo


def test_labels_past_the_bounds_are_left_out_never_cut() -> None:
    pod = {"namespace": "ns", "pod": "p", "uid": "u", "label_a_long": "v" * 301, "label_a_ok": "fine"}
    pod |= {f"label_k{i:03d}": str(i) for i in range(250)}
    ns = {"namespace": "ns", "label_" + "x" * 290: "too long a key with its prefix", "label_owner": "ana"}
    asked: list[str] = []

    def query(promql: str, at_s: float) -> list[dict[str, Any]]:
        asked.append(promql)
        return [{"metric": pod if "kube_pod_labels" in promql else ns, "value": [at_s, "1"]}]

    w = WorkloadInfo("k8s:ns/p/c", namespace="ns", workload="p", facts={"k8s.namespace": "ns"})
    empty: dict[str, list[Any]] = {
        c: [] for c in ("device_id", "ts_ms", "metric", "value", "workload_key", "share")
    }
    batch = SampleBatch.from_columns(empty, [], [w, WorkloadInfo("hpc:7", workload="7")])
    out = KubeStateLabels(query).join(batch, 0, 3_600_000).workloads
    facts = out[0].facts
    assert len(facts) == 200 and "k8s.pod_label:a_long" not in facts and facts["k8s.pod_label:a_ok"] == "fine"
    assert facts["k8s.namespace"] == "ns" and "k8s.namespace_label:owner" not in facts  # pod labels filled it
    assert all(len(k) <= 300 and len(v) <= 300 for k, v in facts.items())
    assert out[1] == WorkloadInfo("hpc:7", workload="7")  # not a pod: untouched
    assert asked == [
        'last_over_time(kube_pod_labels{namespace=~"ns"}[3600s]) or '
        'last_over_time(kube_pod_labels{exported_namespace=~"ns"}[3600s])',
        'last_over_time(kube_namespace_labels{namespace=~"ns"}[3600s]) or '
        'last_over_time(kube_namespace_labels{exported_namespace=~"ns"}[3600s])',
    ]
