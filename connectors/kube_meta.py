"""Pod, namespace and node labels from the Kubernetes API, watched and cached (the node agent's view).

Three list+watch loops through the official ``kubernetes`` client, each on a daemon thread: this
node's pods (``fieldSelector=spec.nodeName=<node>``), every namespace, and this node
(``metadata.name=<node>``). Each lists (paged), then watches from the list's ``resourceVersion``
(with bookmarks), applies ``ADDED``/``MODIFIED``/``DELETED`` to its cache and watches again from
the last version seen when the server ends the stream; a ``410 Gone`` (the version was compacted
away) relists. An API that is unreachable or refuses (no RBAC) is logged once per outage and
retried with backoff; lookups meanwhile answer what was last cached (nothing before the first
list). Lookups never block and never raise.

A pod is found by the UID its cgroup names; its containers by the ids the runtime reports in
``status.containerStatuses[].containerID`` (``containerd://<64hex>``, ``cri-o://…``,
``docker://…``) — the ids the cgroup paths carry — including init and ephemeral containers.

The client is imported on first use (``KubeMetadata.connect``): only the ``k8s`` extra installs
it, and the node agent loads it only when ``kubernetes_api`` is set (issue 13's 60 MB).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from connectors.vgpu import HAMI_ALLOCATED_ANNOTATION, HamiAnnotationError, parse_hami_devices

log = logging.getLogger(__name__)

PAGE = 500  # objects per list request
_GONE = 410


@dataclass(frozen=True, slots=True)
class PodMeta:
    """What the agent needs of a pod: its names, labels, and container id → container name."""

    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    containers: Mapping[str, str] = field(default_factory=dict)
    #: container name → GPU UUID → the share of that GPU HAMi gave it (its cores / 100), from the
    #: ``hami.io/vgpu-devices-allocated`` annotation (docs/virtual-gpus.md); empty without HAMi.
    gpu_caps: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    #: ``spec.nodeName``: where it was scheduled (None while pending)
    node: str | None = None


def pod_meta(pod: Mapping[str, Any]) -> tuple[str, PodMeta] | None:
    """``(uid, PodMeta)`` of a pod in the API's JSON shape, or None for one without uid or names."""
    meta = pod.get("metadata") or {}
    uid, ns, name = meta.get("uid"), meta.get("namespace"), meta.get("name")
    if not (isinstance(uid, str) and isinstance(ns, str) and isinstance(name, str)):
        return None
    status = pod.get("status") or {}
    containers: dict[str, str] = {}
    for kind in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for c in status.get(kind) or ():
            cname = c.get("name")
            # the running container, and the one a restart replaced (its processes may linger)
            last = ((c.get("lastState") or {}).get("terminated") or {}).get("containerID")
            for cid in (last, c.get("containerID")):
                if isinstance(cid, str) and isinstance(cname, str) and "://" in cid:
                    containers[cid.split("://", 1)[1]] = cname
    spec = pod.get("spec") or {}
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    caps = _hami_caps(pod, f"{ns}/{name}")
    return uid, PodMeta(ns, name, _labels(meta), containers, caps, node if isinstance(node, str) else None)


def _hami_caps(pod: Mapping[str, Any], where: str) -> dict[str, dict[str, float]]:
    """HAMi's allocation per container name: the annotation lists containers in the order of
    ``spec.containers``; 0 cores (no cap) and a malformed annotation give nothing."""
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    value = annotations.get(HAMI_ALLOCATED_ANNOTATION) if isinstance(annotations, Mapping) else None
    if not isinstance(value, str) or not value:
        return {}
    try:
        devices = parse_hami_devices(value)
    except HamiAnnotationError as exc:
        log.warning("kubernetes: pod %s: %s; its GPU shares are measured instead", where, exc)
        return {}
    spec = pod.get("spec")
    listed = spec.get("containers") if isinstance(spec, Mapping) else None
    names = (
        [c.get("name") if isinstance(c, Mapping) else None for c in listed]
        if isinstance(listed, list)
        else []
    )
    caps: dict[str, dict[str, float]] = {}
    for device in devices:
        name = names[device.container_index] if device.container_index < len(names) else None
        fraction = device.fraction()
        if isinstance(name, str) and fraction is not None:
            caps.setdefault(name, {})[device.uuid] = fraction
    return caps


def _labels(meta: Mapping[str, Any]) -> dict[str, str]:
    labels = meta.get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


class _Cache:
    """One kind's objects by key, replaced by a list and changed by watch events. ``on_remove(key,
    value)`` hears of each object that left: deleted, or absent from a new list (a relist after
    410 Gone misses the deletions in between) — called under the lock, so it must not block."""

    def __init__(
        self,
        key: Callable[[Mapping[str, Any]], tuple[str, Any] | None],
        on_remove: Callable[[str, Any], None] | None = None,
    ) -> None:
        self.key, self.lock, self.on_remove = key, threading.Lock(), on_remove
        self.items: dict[str, Any] = {}

    def replace(self, objects: list[Mapping[str, Any]]) -> None:
        items = dict(filter(None, map(self.key, objects)))
        with self.lock:
            if self.on_remove is not None:
                for key in self.items.keys() - items.keys():
                    self.on_remove(key, self.items[key])
            self.items = items

    def apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        entry = self.key(obj)
        if entry is None:
            return
        with self.lock:
            if kind == "DELETED":
                gone = self.items.pop(entry[0], None)
                if gone is not None and self.on_remove is not None:
                    self.on_remove(entry[0], gone)
            else:
                self.items[entry[0]] = entry[1]

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return dict(self.items)

    def get(self, key: str) -> Any:
        with self.lock:
            return self.items.get(key)


def _named(obj: Mapping[str, Any]) -> tuple[str, dict[str, str]] | None:
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    return (name, _labels(meta)) if isinstance(name, str) else None


class KubeMetadata:
    """This node's pods, every namespace's labels and this node's labels (module docstring).

    ``api_client``: a ``kubernetes.client.ApiClient``. ``node``: this node's name; None: every
    pod and every node of the cluster (the ``kubernetes`` facts connector, connectors/kube_facts.py).
    ``on_pod_removed(uid, PodMeta)``: told of each pod that left the cache (``_Cache``).
    ``watch_timeout_s``: how long the server keeps one watch open before we watch again.
    ``backoff_s``: (first, most) seconds between tries while the API fails.
    """

    def __init__(
        self,
        api_client: Any,
        node: str | None,
        *,
        watch_timeout_s: int = 300,
        request_timeout_s: float = 10.0,
        backoff_s: tuple[float, float] = (1.0, 60.0),
        on_pod_removed: Callable[[str, PodMeta], None] | None = None,
    ) -> None:
        from kubernetes import client

        self.node = node
        self._api = client.CoreV1Api(api_client)
        self._watch_timeout_s, self._request_timeout_s, self._backoff_s = (
            watch_timeout_s,
            request_timeout_s,
            backoff_s,
        )
        self._pods = _Cache(pod_meta, on_pod_removed)
        self._namespaces = _Cache(_named)
        self._nodes = _Cache(_named)
        self.stop_event = threading.Event()
        self.synced = {"pods": threading.Event(), "namespaces": threading.Event(), "nodes": threading.Event()}
        #: per kind, why its loop last failed (None once it lists again)
        self.last_error: dict[str, str | None] = dict.fromkeys(self.synced)
        self._threads: list[threading.Thread] = []

    @classmethod
    def connect(cls, api: str, node: str | None, **options: Any) -> KubeMetadata:
        """``api``: ``"in-cluster"`` (the pod's service account) or the path of a kubeconfig file.
        Raises the client's ``ConfigException`` (or ``OSError``) when that configuration is unusable."""
        from kubernetes import client, config

        configuration = client.Configuration()
        if api == "in-cluster":
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(config_file=str(Path(api)), client_configuration=configuration)
        configuration.retries = 0  # urllib3 would retry and log each try; the loops back off themselves
        return cls(client.ApiClient(configuration), node, **options)

    # -- lookups (never block on the API) ---------------------------------------------------

    def pod(self, uid: str) -> PodMeta | None:
        found: PodMeta | None = self._pods.get(uid)
        return found

    def find(self, namespace: str, name: str) -> PodMeta | None:
        """This node's pod by its names (a node runs at most a few hundred: a scan is enough)."""
        with self._pods.lock:
            pods = list(self._pods.items.values())
        return next((p for p in pods if p.namespace == namespace and p.name == name), None)

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        return self._namespaces.get(namespace) or {}

    def node_labels(self, node: str | None = None) -> Mapping[str, str]:
        """``node``'s labels (this node's when None)."""
        name = node if node is not None else self.node
        return (self._nodes.get(name) if name is not None else None) or {}

    def pods(self) -> dict[str, PodMeta]:
        """Every cached pod by UID (a copy)."""
        return self._pods.snapshot()

    # -- the watch loops --------------------------------------------------------------------

    def start(self) -> None:
        api = self._api
        pods: dict[str, str] = {} if self.node is None else {"field_selector": f"spec.nodeName={self.node}"}
        nodes: dict[str, str] = {} if self.node is None else {"field_selector": f"metadata.name={self.node}"}
        loops = [
            ("pods", api.list_pod_for_all_namespaces, pods, self._pods),
            ("namespaces", api.list_namespace, {}, self._namespaces),
            ("nodes", api.list_node, nodes, self._nodes),
        ]
        for name, call, selector, cache in loops:
            thread = threading.Thread(
                target=self._run, args=(name, call, selector, cache), name=f"kube-{name}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self.stop_event.set()

    def _run(self, kind: str, call: Callable[..., Any], selector: dict[str, str], cache: _Cache) -> None:
        failing: str | None = None
        delay = self._backoff_s[0]
        while not self.stop_event.is_set():
            try:
                version = self._list(call, selector, cache)
                self.synced[kind].set()
                if failing is not None:
                    log.info("kubernetes api: %s listed again", kind)
                    failing, delay = None, self._backoff_s[0]
                    self.last_error[kind] = None
                self._watch(kind, call, selector, cache, version)  # returns on 410: relist
            except Exception as exc:  # noqa: BLE001  (unreachable, 403, garbage: never fatal)
                why = _describe(exc)
                if failing is None:
                    log.warning("kubernetes api: %s: %s; labels stay as last seen, retrying", kind, why)
                failing = self.last_error[kind] = why
                self.stop_event.wait(delay)
                delay = min(delay * 2, self._backoff_s[1])

    def _list(self, call: Callable[..., Any], selector: dict[str, str], cache: _Cache) -> str:
        objects: list[Mapping[str, Any]] = []
        token: str | None = None
        while True:
            page = call(
                **selector,
                limit=PAGE,
                _continue=token,
                _preload_content=False,
                _request_timeout=self._request_timeout_s,
            )
            body = _json(page.data)
            items = body.get("items")
            if not isinstance(items, list):
                raise ValueError("a list answer without items")
            objects += [o for o in items if isinstance(o, Mapping)]
            meta = body.get("metadata") or {}
            token = meta.get("continue") or None
            if token is None:
                break
        cache.replace(objects)
        version = meta.get("resourceVersion")
        if not isinstance(version, str) or not version:
            raise ValueError("a list answer without metadata.resourceVersion")
        return version

    def _watch(
        self, kind: str, call: Callable[..., Any], selector: dict[str, str], cache: _Cache, version: str
    ) -> None:
        from kubernetes.client.exceptions import ApiException

        while not self.stop_event.is_set():
            stream = _raw_watch()
            try:
                for event in stream.stream(
                    call,
                    **selector,
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=self._watch_timeout_s,
                    _request_timeout=self._watch_timeout_s + self._request_timeout_s,
                ):
                    if not isinstance(event, Mapping):  # a line that is no JSON: the client hands None
                        continue
                    obj, change = event.get("raw_object"), event.get("type")
                    if not isinstance(obj, Mapping):
                        continue
                    if change in ("ADDED", "MODIFIED", "DELETED"):
                        cache.apply(change, obj)
                    seen = (obj.get("metadata") or {}).get("resourceVersion")  # bookmarks carry one too
                    version = seen if isinstance(seen, str) and seen else version
                    if self.stop_event.is_set():
                        stream.stop()
            except ApiException as exc:
                if exc.status == _GONE:
                    log.info("kubernetes api: %s: watch from %s expired (410); listing again", kind, version)
                    return
                raise


def _raw_watch() -> Any:
    """The client's ``Watch``, handing each event's object over as the API's JSON (``raw_object``)
    without building the client's models from it: those refuse an object that lacks a field
    they require, which would stop the watch on one odd object; the cache reads a few fields."""
    from kubernetes import watch

    class RawWatch(watch.Watch):
        def get_return_type(self, func: Any) -> None:
            return None

        def unmarshal_event(self, data: str, return_type: Any) -> dict[str, Any] | None:
            # The client's own trips on a line that is JSON but no event (a list, no "type"):
            # such a line is skipped here, as one that is no JSON is.
            try:
                event = json.loads(data)
            except ValueError:
                return None
            if not (isinstance(event, dict) and isinstance(event.get("type"), str)):
                return None
            if not isinstance(event.get("object"), dict):
                return None
            event["raw_object"] = event["object"]
            return event

    return RawWatch()


def _json(data: bytes) -> dict[str, Any]:
    body = json.loads(data)
    if not isinstance(body, dict):
        raise ValueError("a list answer that is not a JSON object")
    return body


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None)
    if status is not None:
        return f"HTTP {status} {reason or ''}".strip()
    return f"{type(exc).__name__}: {exc}"[:300]
