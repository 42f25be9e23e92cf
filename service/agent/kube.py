"""The node agent on Kubernetes: the kubelet's pod-resources API and the API server (docs/agent.md).

Off unless configured: ``kubernetes_api`` (``"in-cluster"`` or a kubeconfig path) starts
``connectors.kube_meta.KubeMetadata`` (pods of ``kubernetes_node``, namespaces, the node), which the
attributor asks for a pod's names and labels by the UID its cgroup holds — so containerd and CRI-O
pods get ``k8s:<ns>/<pod>/<container>`` — and whose node labels become every device's
``k8s.node_label:<key>`` tags. ``pod_resources_socket`` reads the kubelet's allocations
(``connectors.kube_podresources.PodResources``), which :class:`KubeSampler` applies to each reading:

* a device with no process but allocated to containers belongs to them (equal shares), as
  dcgm-exporter labels it: an idle GPU a pod holds is that pod's cost, not the unallocated pool's;
* a process the attributor could only key by pod UID (no API, or a pod the API has not shown yet)
  on a device allocated to exactly one container is that container.

The gRPC and Kubernetes client libraries (the ``k8s`` extra) are imported only when configured.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from connectors.cloud_tags import NODE_LABEL
from connectors.cloud_tags import facts as bounded_facts
from connectors.sdk.metrics import DeviceInfo, SampleBatch, WorkloadInfo

if TYPE_CHECKING:
    from connectors.kube_meta import KubeMetadata
    from connectors.kube_podresources import PodResources
    from service.agent.config import AgentSettings


def start_kube(settings: AgentSettings) -> tuple[KubeMetadata | None, PodResources | None]:
    """The API watcher (started) and the pod-resources reader that ``settings`` ask for; a
    ``ValueError`` naming the key when the ``k8s`` extra is missing or the API's config is unusable."""
    meta = resources = None
    if settings.kubernetes_api is not None:
        try:
            from connectors.kube_meta import KubeMetadata

            meta = KubeMetadata.connect(settings.kubernetes_api, settings.kubernetes_node)
        except ImportError as exc:
            raise ValueError(
                f"kubernetes_api: {exc.name} is not installed (pip install 'gpu-ledger[k8s]')"
            ) from None
        except Exception as exc:  # noqa: BLE001  (the client's ConfigException, an unreadable kubeconfig)
            raise ValueError(f"kubernetes_api {settings.kubernetes_api!r}: {exc}") from None
        meta.start()
    if settings.pod_resources_socket is not None:
        # Checked now, not imported (the first List loads them): a missing extra is a start error.
        for module in ("grpc", "google.protobuf"):
            if importlib.util.find_spec(module) is None:
                raise ValueError(
                    f"pod_resources_socket: {module} is not installed (pip install 'gpu-ledger[k8s]')"
                )
        from connectors.kube_podresources import PodResources

        resources = PodResources(settings.pod_resources_socket, every_s=settings.pod_resources_every_s)
    return meta, resources


def _default_describe(namespace: str, pod: str, container: str) -> WorkloadInfo:
    from connectors.attribution import pod_facts

    return WorkloadInfo(
        workload_key=f"k8s:{namespace}/{pod}/{container}",
        namespace=namespace,
        workload=pod,
        facts=pod_facts(namespace, pod, container),
    )


class KubeSampler:
    """A sampler's readings with Kubernetes applied (module docstring). ``describe(namespace, pod,
    container)`` names a holder (``ProcessAttributor.pod_workload``: labels and rules as for its
    processes)."""

    def __init__(
        self,
        inner: Any,
        *,
        meta: KubeMetadata | None = None,
        pod_resources: PodResources | None = None,
        describe: Callable[[str, str, str], WorkloadInfo] | None = None,
    ) -> None:
        self.inner, self.meta, self.pod_resources = inner, meta, pod_resources
        self.describe = describe or _default_describe

    def __getattr__(self, name: str) -> Any:  # pci_bus_id, metrics_available, attributor, close …
        return getattr(self.inner, name)

    def devices(self) -> list[DeviceInfo]:
        return self._tagged(self.inner.devices())

    def sample(self) -> SampleBatch:
        batch = self.inner.sample()
        devices = self._tagged(batch.devices)
        if self.pod_resources is None:
            return SampleBatch.from_columns(batch.columns, devices, batch.workloads)
        columns, workloads = self._held(batch)
        return SampleBatch.from_columns(columns, devices, workloads)

    def _tagged(self, devices: list[DeviceInfo]) -> list[DeviceInfo]:
        labels: Mapping[str, str] = self.meta.node_labels() if self.meta is not None else {}
        if not labels:
            return devices
        tags = bounded_facts(labels.items(), NODE_LABEL)
        return [dataclasses.replace(d, tags={**tags, **d.tags}) for d in devices]

    def _held(self, batch: SampleBatch) -> tuple[dict[str, list[Any]], list[WorkloadInfo]]:
        """The rows with pod-resources' holders applied; rows that end up the same (device, time,
        metric, workload) are one row with their shares added."""
        assert self.pod_resources is not None
        cols = batch.columns
        known = {w.workload_key: w for w in batch.workloads}
        keys_on: dict[str, set[str]] = {}
        for device, key in zip(cols["device_id"], cols["workload_key"], strict=True):
            keys_on.setdefault(device, set()).add(key)
        # (device, old key) → [(new workload, fraction of the old share)]
        moves: dict[tuple[str, str], list[tuple[WorkloadInfo, float]]] = {}
        for device, keys in keys_on.items():
            holders = self.pod_resources.holders(device)
            if not holders:
                continue
            if keys == {""}:  # allocated, no process: its holders own it
                named = [self.describe(h.namespace, h.pod, h.container) for h in holders]
                moves[(device, "")] = [(w, 1.0 / len(named)) for w in named]
            elif len(holders) == 1:
                for key in keys:
                    info = known.get(key)
                    if key.startswith("k8s:") and info is not None and info.namespace is None:
                        (h,) = holders
                        moves[(device, key)] = [(self.describe(h.namespace, h.pod, h.container), 1.0)]
        if not moves:
            return cols, batch.workloads
        workloads = dict(known)
        rows: dict[tuple[Any, ...], list[Any]] = {}  # (device, ts, metric, key) → [value, share]
        names = ("device_id", "ts_ms", "metric", "value", "workload_key", "share")
        for device, ts, metric, value, key, share in zip(*(cols[n] for n in names), strict=True):
            for info, part in moves.get((device, key), [(None, 1.0)]):
                new_key = key if info is None else info.workload_key
                if info is not None:
                    workloads.setdefault(new_key, info)
                row = rows.setdefault((device, ts, metric, new_key), [value, 0.0])
                row[1] += share * part
        out: dict[str, list[Any]] = {name: [] for name in cols}
        for (device, ts, metric, key), (value, share) in rows.items():
            out["device_id"].append(device)
            out["ts_ms"].append(ts)
            out["metric"].append(metric)
            out["value"].append(value)
            out["workload_key"].append(key)
            out["share"].append(share)
        used = set(out["workload_key"])
        return out, [w for k, w in workloads.items() if k in used]
