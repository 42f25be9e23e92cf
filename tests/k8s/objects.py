"""Kubernetes objects in the API's JSON shape (as ``kubectl get -o json`` prints them on a
containerd node with the NVIDIA device plugin), trimmed of fields nobody reads here."""

from __future__ import annotations

from typing import Any

NODE = "gpu-node-17"
TRAINER_ID = "3f1e9c0a7b5d4e2f8a6c1b3d5e7f9a0b2c4d6e8f0a1b3c5d7e9f1a3b5c7d9e0f"
SIDECAR_ID = "8b2d4f6a0c1e3a5b7d9f1b3d5f7a9c1e3b5d7f9a1c3e5b7d9f1a3c5e7b9d1f3a"
INIT_ID = "0e2c4a6b8d0f1e3c5a7b9d1f3e5c7a9b1d3f5e7c9a1b3d5f7e9c1a3b5d7f9e1c"
POD_UID = "5b0c2e1d-7a4f-4c3e-9b8a-1f2e3d4c5b6a"


def pod(
    name: str = "bert-train-0",
    namespace: str = "ml-research",
    uid: str = POD_UID,
    node: str = NODE,
    labels: dict[str, str] | None = None,
    containers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A running pod; ``containers`` is name → 64-hex container id."""
    containers = containers if containers is not None else {"trainer": TRAINER_ID, "log-shipper": SIDECAR_ID}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": "1",
            "creationTimestamp": "2026-12-01T08:14:03Z",
            "generateName": name.rsplit("-", 1)[0] + "-",
            "labels": labels
            if labels is not None
            else {
                "app.kubernetes.io/name": "bert",
                "team": "nlp",
                "controller-revision-hash": "bert-train-6b9c7d",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "name": name.rsplit("-", 1)[0],
                    "uid": "0d6f3a5e-1b2c-4d3e-8f9a-0b1c2d3e4f5a",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },  # fmt: skip
        "spec": {
            "nodeName": node,
            "schedulerName": "default-scheduler",
            "runtimeClassName": "nvidia",
            "containers": [
                {
                    "name": c,
                    "image": f"registry.example.com/ml/{c}:2.1",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}} if c == "trainer" else {},
                }
                for c in containers
            ],  # fmt: skip
        },
        "status": {
            "phase": "Running",
            "qosClass": "Burstable",
            "hostIP": "10.20.3.17",
            "podIP": "10.244.3.41",
            "startTime": "2026-12-01T08:14:03Z",
            "initContainerStatuses": [
                {
                    "name": "fetch-weights",
                    "image": "registry.example.com/ml/fetch:1.0",
                    "imageID": "",
                    "containerID": f"containerd://{INIT_ID}",
                    "ready": True,
                    "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
                }
            ],  # fmt: skip
            "containerStatuses": [
                {
                    "name": c,
                    "image": f"registry.example.com/ml/{c}:2.1",
                    "imageID": f"registry.example.com/ml/{c}@sha256:{'ab' * 32}",
                    "containerID": f"containerd://{cid}",
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": "2026-12-01T08:14:19Z"}},
                }
                for c, cid in containers.items()
            ],  # fmt: skip
        },
    }


def namespace(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "uid": "c2a4e6f8-0b1d-4f3a-8c5e-7a9b1c3d5e7f",
            "resourceVersion": "1",
            "creationTimestamp": "2026-06-02T10:00:00Z",
            "labels": {"kubernetes.io/metadata.name": name, **labels},
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def node(name: str = NODE, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": "7e9a1c3b-5d7f-4a2c-9e1b-3d5f7a9c1e3b",
            "resourceVersion": "1",
            "labels": labels
            if labels is not None
            else {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "p5e.48xlarge",
                "nvidia.com/gpu.product": "NVIDIA-H200",
                "nvidia.com/gpu.present": "true",
                "topology.kubernetes.io/zone": "us-east-1a",
            },
        },  # fmt: skip
        "spec": {"podCIDR": "10.244.3.0/24"},
        "status": {
            "nodeInfo": {"containerRuntimeVersion": "containerd://1.7.20", "kubeletVersion": "v1.31.4"}
        },
    }
