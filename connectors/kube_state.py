"""kube-state-metrics' pod and namespace labels as attribution facts, for the Prometheus path.

A site that scrapes kube-state-metrics has ``kube_pod_labels{namespace, pod, uid, label_<key>…}``
and ``kube_namespace_labels{namespace, label_<key>…}`` beside dcgm-exporter's series. For the pods
a chunk's GPU series name, :class:`KubeStateLabels` asks Prometheus for those two series over the
chunk (``last_over_time(…[chunk])`` at its end, so a backfill reads the labels of its own day) and
adds ``k8s.pod_label:<key>`` and ``k8s.namespace_label:<key>`` to the pods' ``WorkloadInfo.facts``.

The keys are as kube-state-metrics writes them: it sanitizes a label's name into a Prometheus
label (``app.kubernetes.io/name`` → ``label_app_kubernetes_io_name``), so the fact is
``k8s.pod_label:app_kubernetes_io_name`` and a rule must use that spelling on this path (the node
agent reads the API and keeps the original key). kube-state-metrics exports no label unless told
(``--metric-labels-allowlist=pods=[team,app.kubernetes.io/name],namespaces=[*]``). A series that
Prometheus relabelled with its scrape target's own ``namespace``/``pod`` keeps the pod's in
``exported_namespace``/``exported_pod``, which win. A pod with several label sets in the chunk
(labels changed, two kube-state-metrics replicas) gets their union, the later series in label
order winning a key. Facts are bounded as the push API bounds them (``connectors.cloud_tags``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from connectors.cloud_tags import MAX_FACTS
from connectors.cloud_tags import facts as bounded_facts
from connectors.sdk import ConnectorError, SampleBatch, WorkloadInfo

POD_LABELS, NAMESPACE_LABELS = "kube_pod_labels", "kube_namespace_labels"
POD_FACT, NAMESPACE_FACT = "k8s.pod_label:", "k8s.namespace_label:"
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # RFC 1123 label: no regex metacharacter
#: A query's namespace matcher lists at most this many; more asks for every namespace.
MAX_NAMESPACES_IN_QUERY = 200

#: ``query(promql, at_s) -> result``: an instant query's ``data.result`` (a vector).
Query = Callable[[str, float], list[Mapping[str, Any]]]


def _subject(labels: Mapping[str, str], name: str) -> str | None:
    return labels.get(f"exported_{name}") or labels.get(name) or None


def _labels(series: Iterable[Mapping[str, str]], *names: str) -> dict[tuple[str, ...], dict[str, str]]:
    """(subject names) → the union of its series' ``label_<key>`` labels, keys without the prefix."""
    out: dict[tuple[str, ...], dict[str, str]] = {}
    for labels in sorted(series, key=lambda s: sorted(s.items())):
        subject = tuple(_subject(labels, n) or "" for n in names)
        if not all(subject):
            continue
        found = out.setdefault(subject, {})
        found |= {k.removeprefix("label_"): v for k, v in labels.items() if k.startswith("label_") and v}
    return out


class KubeStateLabels:
    """Adds kube-state-metrics' labels to a batch's pods (module docstring). ``selector``: PromQL
    matchers for the kube-state-metrics series (``job="kube-state-metrics"``), or ''."""

    def __init__(self, query: Query, selector: str = "") -> None:
        self._query, self._selector = query, selector.strip().strip("{}").strip()

    def join(self, batch: SampleBatch, first_ms: int, end_ms: int) -> SampleBatch:
        pods = {(w.namespace, w.workload) for w in batch.workloads if _is_pod(w)}
        if not pods:
            return batch
        namespaces = sorted({ns for ns, _ in pods if ns})
        at_s, span_s = end_ms / 1000, max(1, (end_ms - first_ms + 999) // 1000)
        pod_labels = _labels(self._series(POD_LABELS, namespaces, at_s, span_s), "namespace", "pod")
        ns_labels = _labels(self._series(NAMESPACE_LABELS, namespaces, at_s, span_s), "namespace")
        workloads = []
        for w in batch.workloads:
            if _is_pod(w):
                assert w.namespace is not None and w.workload is not None
                facts = dict(w.facts)  # the names first, then pod labels, then namespace labels
                for more in (
                    bounded_facts(pod_labels.get((w.namespace, w.workload), {}).items(), POD_FACT),
                    bounded_facts(ns_labels.get((w.namespace,), {}).items(), NAMESPACE_FACT),
                ):
                    facts |= dict(list(more.items())[: max(0, MAX_FACTS - len(facts))])
                w = dataclasses.replace(w, facts=facts)
            workloads.append(w)
        batch.workloads = workloads
        return batch

    def _series(self, name: str, namespaces: list[str], at_s: float, span_s: int) -> list[dict[str, str]]:
        base = [self._selector] if self._selector else []
        selectors = ["{" + ", ".join(base) + "}" if base else ""]
        listed = [ns for ns in namespaces if _NAMESPACE.match(ns)]
        if listed and len(listed) == len(namespaces) and len(listed) <= MAX_NAMESPACES_IN_QUERY:
            wanted = "|".join(listed)  # RFC 1123 names: nothing to escape
            # the pod's namespace, or exported_namespace where Prometheus relabelled the series
            selectors = ["{" + ", ".join([*base, f'{label}=~"{wanted}"']) + "}"
                         for label in ("namespace", "exported_namespace")]  # fmt: skip
        query = " or ".join(f"last_over_time({name}{s}[{span_s}s])" for s in selectors)
        series = []
        for item in self._query(query, at_s):
            metric = item.get("metric") if isinstance(item, Mapping) else None
            if not isinstance(metric, Mapping):
                raise ConnectorError(f"{name}: a result without its labels")
            series.append({str(k): str(v) for k, v in metric.items()})
        return series


def _is_pod(w: WorkloadInfo) -> bool:
    return w.workload_key.startswith("k8s:") and bool(w.namespace) and bool(w.workload)
