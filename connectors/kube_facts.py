"""Kubernetes: whose pods they are, from the API server — one watch per cluster, run by the service.

On a containerd or CRI-O node the node agent knows a pod's container only from its cgroup:
``k8s:<pod-uid>/<container-id[:12]>`` (``k8s:<pod-uid>`` for the pod's own cgroup). Rather than
every agent watching the API (the official client costs the agent ~60 MB, over issue 13's budget),
this facts connector (``[[connectors]] type = "kubernetes"``) lists and watches every pod,
namespace and node of the cluster once — ``connectors.kube_meta.KubeMetadata`` without a node: the
agent's own list+watch loops (paged lists, bookmarks, a relist on ``410 Gone``) — and describes,
per pod:

* ``k8s:<pod-uid>/<container-id[:12]>`` for each container id its statuses name (init and
  ephemeral containers, and the one a restart replaced), and ``k8s:<pod-uid>``;
* ``k8s:<namespace>/<pod>/<container>`` — what the agent names from cri-dockerd's labels or the
  kubelet's pod-resources answer, and dcgm-exporter from its pod labels: names, no labels.

Each with the facts the agent gives with the API on (``connectors.attribution.pod_facts``):
``k8s.namespace``, ``k8s.pod``, ``k8s.container`` (not on ``k8s:<pod-uid>``),
``k8s.pod_label:<key>``, ``k8s.namespace_label:<key>`` and, when the pod is scheduled,
``k8s.node_label:<key>`` of its node. The ingestor keeps them in ``workload_fact``; the rules read
them for the metrics sources' rows with those keys (service/facts_ingest.py).

A run returns only what the ledger has not saved yet: new pods, changed labels, and pods that
ended since (described as they were when they left: their namespace may be gone too). The
ingestor calls :meth:`KubernetesFactsConnector.saved` once a batch is committed; a run whose
save failed is answered again in full by the next. Every ``resync_s`` each live pod is described
again (so ``gpu-ledger prune`` never takes a running pod's facts). Memory: the live pods (names,
labels, container ids), a digest per saved key, and ended pods not saved yet — at most
``max_ended_pods``, the oldest dropped (counted in the run's ``skipped``). Ended pods' facts stay in
the ledger's ``workload_fact`` for the keys its rows carry, until pruned.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from connectors.attribution import pod_facts, pod_uid_key
from connectors.sdk import (
    ConfigurationError,
    ConnectorConfig,
    FactsConnectorConfig,
    RetriableError,
    WorkloadInfo,
)
from connectors.sdk.facts import FactsBatch

if TYPE_CHECKING:
    from connectors.kube_meta import KubeMetadata, PodMeta

log = logging.getLogger(__name__)


class KubernetesFactsConfig(FactsConnectorConfig):
    """``[[connectors]] type = "kubernetes"``. ``api``: ``"in-cluster"`` (the service's pod's
    service account: get/list/watch on pods, namespaces and nodes) or a kubeconfig file's path.
    ``sync_timeout_s``: how long a run waits for the first lists before it is retried.
    ``resync_s``: how often a live pod is described again though unchanged. ``max_ended_pods``:
    ended pods kept until saved. ``watch_timeout_s``: how long one watch stays open."""

    type: Literal["kubernetes"] = "kubernetes"
    interval_s: float = 60.0
    api: str = Field(default="in-cluster", min_length=1, max_length=1000)
    sync_timeout_s: float = Field(default=30.0, gt=0, le=600)
    resync_s: float = Field(default=6 * 3600.0, gt=0)
    max_ended_pods: int = Field(default=10_000, gt=0, le=1_000_000)
    watch_timeout_s: int = Field(default=300, ge=10, le=3600)


def pod_workloads(
    uid: str,
    pod: PodMeta,
    namespace_labels: Mapping[str, str],
    node_labels: Mapping[str, str],
) -> list[WorkloadInfo]:
    """The workload keys the metrics sources can give ``pod``'s containers, with its facts."""

    def info(key: str, container: str | None) -> WorkloadInfo:
        facts = pod_facts(pod.namespace, pod.name, container, pod.labels, namespace_labels, node_labels)
        return WorkloadInfo(key, namespace=pod.namespace, workload=pod.name, facts=facts)

    out = [info(pod_uid_key(uid), None)]
    out += [info(pod_uid_key(uid, cid), name) for cid, name in sorted(pod.containers.items())]
    out += [info(key, key.rsplit("/", 1)[1]) for key in _name_keys(pod)]
    return out


def _digest(w: WorkloadInfo) -> int:
    return hash(tuple(sorted(w.facts.items())))


class KubernetesFactsConnector:
    """``kubernetes``: a :class:`~connectors.sdk.facts.WorkloadFactsSource` over the cluster's
    pods (module docstring), through a ``KubeMetadata`` connected to ``config.api`` (``options``:
    more of its keyword arguments, for tests). The watch starts with the first run, so a replica
    that does not hold the scheduler lock never opens one. ``clock``: monotonic seconds."""

    kind: ClassVar[Literal["facts"]] = "facts"
    config_model: ClassVar[type[ConnectorConfig]] = KubernetesFactsConfig

    def __init__(
        self,
        config: KubernetesFactsConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self.config, self._clock = config, clock
        self._lock = threading.Lock()
        # uid → the pod's workloads as it was when it left, until a run with them is saved
        self._ended: OrderedDict[str, list[WorkloadInfo]] = OrderedDict()
        self._dropped = 0  # ended pods dropped unsaved (max_ended_pods) since the last run
        self._saved: dict[str, tuple[int, float]] = {}  # key → (digest, when) of what was saved
        self._pending: tuple[dict[str, int], set[str], dict[str, list[str]]] | None = None
        self._started = False
        try:
            from connectors.kube_meta import KubeMetadata
        except ImportError as exc:
            raise ConfigurationError(
                f"kubernetes: {exc.name} is not installed (pip install 'gpu-ledger[k8s]')"
            ) from None
        try:
            self.meta: KubeMetadata = KubeMetadata.connect(
                config.api,
                None,
                watch_timeout_s=config.watch_timeout_s,
                on_pod_removed=self._ended_pod,
                **(options or {}),
            )
        except Exception as exc:  # noqa: BLE001  (the client's ConfigException, an unreadable kubeconfig)
            raise ConfigurationError(f"kubernetes api {config.api!r}: {exc}") from None

    def _ended_pod(self, uid: str, pod: PodMeta) -> None:
        """A pod left the API's view (watch thread, under the pods cache's lock): keep what it was."""
        described = pod_workloads(uid, pod, self.meta.namespace_labels(pod.namespace), self._node_labels(pod))
        with self._lock:
            self._ended[uid] = described
            self._ended.move_to_end(uid)
            while len(self._ended) > self.config.max_ended_pods:
                self._ended.popitem(last=False)
                self._dropped += 1

    def _node_labels(self, pod: PodMeta) -> Mapping[str, str]:
        return self.meta.node_labels(pod.node) if pod.node else {}

    def facts(self, start: dt.datetime, end: dt.datetime) -> FactsBatch:
        """What changed since the last saved run (module docstring); the window is not used: the
        API knows the present, and ended pods since the last run."""
        if not self._started:
            self.meta.start()
            self._started = True
        deadline = self._clock() + self.config.sync_timeout_s
        while not all(e.is_set() for e in self.meta.synced.values()):
            if self._clock() >= deadline:
                waiting = sorted(k for k, e in self.meta.synced.items() if not e.is_set())
                why = "; ".join(f"{k}: {v}" for k, v in sorted(self.meta.last_error.items()) if v)
                raise RetriableError(
                    f"kubernetes api: {', '.join(waiting)} not listed within "
                    f"{self.config.sync_timeout_s:g} s" + (f" ({why})" if why else "")
                )
            self.meta.stop_event.wait(0.05)
        pods = self.meta.pods()
        with self._lock:
            ended = dict(self._ended)
            dropped, self._dropped = self._dropped, 0
        if dropped:
            log.warning("kubernetes: %d ended pods dropped before a run saved them (max_ended_pods)", dropped)
        now = self._clock()
        changed: dict[str, WorkloadInfo] = {}
        digests: dict[str, int] = {}
        keys_of: dict[str, list[str]] = {}
        pods_changed = 0
        # ended first: a live pod that took an ended one's name (a StatefulSet's) wins its names' keys
        described = [(uid, ws) for uid, ws in ended.items()]
        described += [
            (uid, pod_workloads(uid, p, self.meta.namespace_labels(p.namespace), self._node_labels(p)))
            for uid, p in pods.items()
        ]
        for uid, workloads in described:
            keys_of[uid] = [w.workload_key for w in workloads]
            fresh = False
            for w in workloads:
                digest = _digest(w)
                saved = self._saved.get(w.workload_key)
                if saved is None or saved[0] != digest or now - saved[1] >= self.config.resync_s:
                    changed[w.workload_key] = w
                    digests[w.workload_key] = digest
                    fresh = True
            pods_changed += fresh
        self._pending = (digests, set(ended), keys_of)
        unchanged = len(described) - pods_changed
        return FactsBatch(
            workloads=list(changed.values()),
            read=len(described) + dropped,
            accepted=pods_changed,
            skipped={
                **({"pods unchanged since saved": unchanged} if unchanged else {}),
                **({"ended pods dropped unsaved (max_ended_pods)": dropped} if dropped else {}),
            },
        )

    def saved(self, batch: FactsBatch) -> None:
        """The last run's batch is committed: remember what was saved, forget ended pods."""
        if self._pending is None:
            return
        digests, ended, keys_of = self._pending
        self._pending = None
        now = self._clock()
        self._saved |= {key: (digest, now) for key, digest in digests.items()}
        with self._lock:
            for uid in ended:
                self._ended.pop(uid, None)
        if not ended:
            return
        live = self.meta.pods()
        # a names key a live pod (same name, new uid) still has stays remembered
        live_keys = {k for uid, p in live.items() for k in _name_keys(p)}
        for uid in ended - live.keys():
            for key in keys_of.get(uid, ()):
                if key not in live_keys:
                    self._saved.pop(key, None)

    def close(self) -> None:
        self.meta.stop()


def _name_keys(pod: PodMeta) -> list[str]:
    return [f"k8s:{pod.namespace}/{pod.name}/{name}" for name in sorted(set(pod.containers.values()))]
