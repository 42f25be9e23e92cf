"""Which workload a GPU process belongs to: cgroup → container → Docker labels → mapping rules.

The NVML connector calls ``ProcessAttributor.workload(pid)`` for every PID a GPU reports. Workload
keys (``WorkloadInfo.workload_key``):

* ``k8s:<namespace>/<pod>/<container>`` — a pod's container whose names the runtime's labels give
  (``io.kubernetes.pod.namespace`` / ``.pod.name`` / ``.container.name``: Docker via cri-dockerd);
* ``k8s:<pod-uid>/<container-id[:12]>`` — a pod's container without those labels (containerd,
  CRI-O), ``k8s:<pod-uid>`` for a process in the pod's cgroup but in no container — unless the
  Kubernetes API (``pods``: ``connectors.kube_meta.KubeMetadata``) knows the pod's UID: then
  ``k8s:<namespace>/<pod>/<container>`` on any runtime, with the pod's labels as labels;
* ``docker:<container-id[:12]>`` — a Docker container (also one Docker knows under a bare cgroup);
* ``<runtime>:<id>`` — another runtime outside Kubernetes: ``containerd:<12hex>``, ``crio:<12hex>``,
  ``other:<12hex>`` (Podman, bare 64-hex cgroups), ``systemd:<machine>`` (systemd-nspawn);
* ``slurm:<jobid>`` — a process in a Slurm job's cgroup (``job_<id>``: an array task's or a
  heterogeneous component's own numeric id, what sacct calls ``JobIDRaw``); facts ``slurm.job``
  and ``unix.user``, so the ``slurm`` connector's account, partition and QOS facts for the same key
  name its owner (docs/slurm.md);
* ``proc:<user>/<comm>`` — a process in no container (SSH users on bare metal, Slurm without its
  cgroup plugins): ``user`` is the passwd name of its real uid, or the uid itself when passwd lacks
  it; fact ``unix.user``;
* ``proc:unknown/<pid>`` — the process could not be read (it exited between NVML's answer and our
  read, or ``/proc`` is mounted ``hidepid``); nothing else is known, so every label is None.

A pod's workload carries the facts ``k8s.namespace``, ``k8s.pod``, ``k8s.container`` and, from the
API, ``k8s.pod_label:<key>`` and ``k8s.namespace_label:<key>`` (bounded as the push API bounds
them: ``connectors.cloud_tags.facts``).

The reader must see the host's ``/proc`` (``hostPID``) and the host's ``/etc/passwd``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from connectors.cgroups import ContainerRef, parse_cgroup
from connectors.cloud_tags import MAX_FACTS, NODE_LABEL
from connectors.cloud_tags import facts as bounded_facts
from connectors.docker_api import ContainerDetails, DockerEngine
from connectors.sdk import WorkloadInfo

if TYPE_CHECKING:
    from connectors.attribution_config import MappingRule
    from connectors.kube_meta import PodMeta

log = logging.getLogger(__name__)

#: Container labels that name a workload's project, team and user directly (first present wins).
DEFAULT_LABEL_KEYS: Mapping[str, tuple[str, ...]] = {
    "project": ("gpu-ledger.project", "project"),
    "team": ("gpu-ledger.team", "team"),
    "user": ("gpu-ledger.user", "user"),
}
K8S_NAMESPACE, K8S_POD, K8S_CONTAINER = (
    "io.kubernetes.pod.namespace",
    "io.kubernetes.pod.name",
    "io.kubernetes.container.name",
)
_MATCH_KEYS = ("container_name", "image", "namespace", "pod", "unix_user", "command")
_SET_KEYS = ("project", "team", "user")
# `$$`, `$1`, `${1}`, `${name}` (a named group), `${label:key}`
_REF = re.compile(r"\$(?:(\$)|(\d+)|\{([^}]*)\})")


@dataclass(frozen=True)
class Rule:
    """One attribution rule: when every given match key matches, set fields.

    Match keys (regular expressions, full match; a key whose fact is unknown — no container name
    for a bare process, a missing label — does not match): ``container_name`` (the Kubernetes
    container name, else Docker's), ``image``, ``namespace``, ``pod``, ``label`` (label name →
    regex), ``unix_user`` (passwd name, or the uid), ``command`` (``/proc/PID/comm``, 15 chars).
    A rule without match keys matches every process (a catch-all at the end of the list).

    Set keys ``project``, ``team``, ``user``: literal text with references — ``$1`` / ``${1}`` to
    numbered groups, counted across the rule's regexes in the order above (labels in the order
    written), ``${name}`` to a named group, ``${label:team}`` to a label's value, ``$$`` for ``$``.
    A reference that has no value for a process (a label it lacks) makes the rule set nothing
    for that field, so a later rule can.

    Rules are tried in order; per field, the first matching rule that sets it wins. Labels named
    in ``DEFAULT_LABEL_KEYS`` come before any rule.

    Built from a validated table: ``connectors.attribution_config.MappingRule`` (pydantic) for the
    service, the node agent's own key checks (``service.agent.config``) in the agent, which loads
    no pydantic. A bad regex or reference raises ``ValueError`` naming the key.
    """

    container_name: str | None = None
    image: str | None = None
    namespace: str | None = None
    pod: str | None = None
    label: Mapping[str, str] = field(default_factory=dict)
    unix_user: str | None = None
    command: str | None = None
    project: str | None = None
    team: str | None = None
    user: str | None = None
    _patterns: list[tuple[str, re.Pattern[str]]] = field(
        default_factory=list, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        sources = [(k, getattr(self, k)) for k in _MATCH_KEYS[:4]]
        sources += [(f"label:{k}", v) for k, v in self.label.items()]
        sources += [(k, getattr(self, k)) for k in _MATCH_KEYS[4:]]
        for key, regex in sources:
            if regex is None:
                continue
            try:
                self._patterns.append((key, re.compile(regex)))
            except re.error as exc:
                raise ValueError(f"{key}: not a regular expression ({exc})") from exc
        if all(getattr(self, k) is None for k in _SET_KEYS):
            raise ValueError("a rule must set at least one of project, team, user")
        groups = sum(p.groups for _, p in self._patterns)
        names = {n for _, p in self._patterns for n in p.groupindex}
        for key in _SET_KEYS:
            for ref in _REF.finditer(getattr(self, key) or ""):
                inner = ref.group(2) or ref.group(3)
                if inner is None or inner.startswith("label:"):
                    continue
                if inner.isdigit() and not 1 <= int(inner) <= groups:
                    raise ValueError(f"{key}: ${inner} but the rule's regexes have {groups} group(s)")
                if not inner.isdigit() and inner not in names:
                    raise ValueError(f"{key}: no group named {inner!r}")

    def match(self, facts: Mapping[str, str | None]) -> tuple[list[str | None], dict[str, str]] | None:
        """The numbered and named groups when every match key matches ``facts``, else None."""
        numbered: list[str | None] = []
        named: dict[str, str] = {}
        for key, pattern in self._patterns:
            value = facts.get(key)
            m = pattern.fullmatch(value) if value is not None else None
            if m is None:
                return None
            numbered += m.groups()
            named |= {k: v for k, v in m.groupdict().items() if v is not None}
        return numbered, named

    def render(
        self, key: str, groups: tuple[list[str | None], dict[str, str]], labels: Mapping[str, str]
    ) -> str | None:
        """The value this rule sets for ``key`` (project/team/user), or None."""
        template = getattr(self, key)
        if template is None:
            return None
        numbered, named = groups
        missing = False

        def substitute(ref: re.Match[str]) -> str:
            nonlocal missing
            inner = ref.group(2) or ref.group(3)
            if ref.group(1):
                return "$"
            if inner.isdigit():  # checked against the group count when the rule was loaded
                value = numbered[int(inner) - 1]
            elif inner.startswith("label:"):
                value = labels.get(inner.removeprefix("label:"))
            else:
                value = named.get(inner)
            missing |= value is None
            return value or ""

        value = _REF.sub(substitute, template)
        return None if missing or not value else value


class PodDirectory(Protocol):
    """Pods by UID and namespaces' labels (``connectors.kube_meta.KubeMetadata``)."""

    def pod(self, uid: str) -> PodMeta | None: ...
    def find(self, namespace: str, name: str) -> PodMeta | None: ...
    def namespace_labels(self, namespace: str) -> Mapping[str, str]: ...


def pod_facts(
    namespace: str,
    pod: str,
    container: str | None,
    pod_labels: Mapping[str, str] = {},  # noqa: B006  (read only)
    namespace_labels: Mapping[str, str] = {},  # noqa: B006
    node_labels: Mapping[str, str] = {},  # noqa: B006
) -> dict[str, str]:
    """A pod's container as attribution facts (issue 16's source keys), at most ``MAX_FACTS``: the
    names first, then pod labels, then namespace labels, then its node's labels (the ``kubernetes``
    facts connector; the agent gives those as device tags), each in key order; a label too long
    to push whole is left out."""
    out = {"k8s.namespace": namespace, "k8s.pod": pod} | ({"k8s.container": container} if container else {})
    out |= bounded_facts(pod_labels.items(), "k8s.pod_label:")
    for labels, prefix in ((namespace_labels, "k8s.namespace_label:"), (node_labels, NODE_LABEL)):
        for key, value in bounded_facts(labels.items(), prefix).items():
            if len(out) >= MAX_FACTS:
                break
            out[key] = value
    return dict(list(out.items())[:MAX_FACTS])


def __getattr__(name: str) -> Any:
    if name == "MappingRule":  # pydantic's front of `Rule`, loaded only by who validates with it
        from connectors.attribution_config import MappingRule

        return MappingRule
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ProcessAttributor:
    """Maps a GPU process's PID to its workload (module docstring: key formats).

    ``rules``: ``[[attribution.rules]]`` in order. ``proc_root`` / ``passwd``: the host's
    ``/proc`` and passwd file. ``docker``: a ``DockerEngine`` for container names, images and
    labels; ``None`` means no Docker enrichment (keys still come from the cgroup path).
    ``cache_s``: how long Docker answers (including "unknown container" and "unreachable") and
    the passwd table are reused. PIDs themselves are not cached: PIDs are reused, and reading
    three small /proc files is cheap. ``pods``: the Kubernetes API's pods and namespaces (a pod's
    names, container names and labels where the runtime's own labels have none); None: not asked.
    """

    def __init__(
        self,
        rules: Sequence[Rule | MappingRule] = (),
        *,
        proc_root: Path = Path("/proc"),
        docker: DockerEngine | None = None,
        passwd: Path = Path("/etc/passwd"),
        cache_s: float = 60,
        label_keys: Mapping[str, tuple[str, ...]] = DEFAULT_LABEL_KEYS,
        clock: Callable[[], float] = time.monotonic,
        pods: PodDirectory | None = None,
    ) -> None:
        self.rules, self.pods = list(rules), pods
        self.proc_root, self.docker, self.passwd, self.cache_s = proc_root, docker, passwd, cache_s
        self.label_keys, self._clock = label_keys, clock
        self._containers: dict[str, tuple[float, ContainerDetails | None]] = {}
        self._users: tuple[float, dict[int, str]] | None = None

    def workload(self, pid: int) -> WorkloadInfo:
        """The workload a GPU process belongs to (module docstring: key formats); project, team
        and user from container labels, then rules; ``user_name`` falls back to the passwd name of
        the process's real uid — outside containers always, inside only for a non-root uid that
        passwd knows (root in a container, or a container uid, says nothing about a person)."""
        base = self.proc_root / str(pid)
        try:
            cgroup = (base / "cgroup").read_text()
            status = (base / "status").read_text()
            comm = (base / "comm").read_text().strip()
        except OSError:  # exited since NVML listed it, or hidden from us
            return WorkloadInfo(workload_key=f"proc:unknown/{pid}")
        uid = _real_uid(status)
        user_known = self._user_names().get(uid) if uid is not None else None
        unix_user = user_known or (str(uid) if uid is not None else None)
        ref = parse_cgroup(cgroup)
        details = self._details(ref)
        labels = details.labels if details else {}
        namespace, pod, container = labels.get(K8S_NAMESPACE), labels.get(K8S_POD), labels.get(K8S_CONTAINER)
        found = self._pod(ref) if not namespace else None
        if found is not None:  # containerd, CRI-O: the API names the pod its cgroup holds
            namespace, pod, labels = found.namespace, found.name, {**found.labels, **labels}
            container = found.containers.get(ref.container_id or "") if ref is not None else None
        facts: dict[str, str | None] = {
            "container_name": container or (details.name if details else None),
            "image": details.image if details else None,
            "namespace": namespace,
            "pod": pod,
            "unix_user": unix_user,
            "command": comm,
        }
        facts |= {f"label:{k}": v for k, v in labels.items()}
        values = self._fields(facts, labels)
        workload: str | None
        source_facts: dict[str, str] = {}
        if ref is None:
            key, workload, fallback_user = f"proc:{unix_user or 'unknown'}/{comm}", comm, unix_user
            source_facts = {"unix.user": unix_user} if unix_user else {}
        elif ref.runtime == "slurm" and ref.container_id is not None:
            # The job's owner started it: the process's real uid names a person, as outside containers.
            key, workload, fallback_user = f"slurm:{ref.container_id}", ref.container_id, unix_user
            source_facts = {"slurm.job": ref.container_id}
            source_facts |= {"unix.user": unix_user} if unix_user else {}
        else:
            key = _container_key(ref, details, namespace, pod, facts["container_name"])
            workload = pod if ref.pod_uid else (details.name if details else None)
            fallback_user = user_known if uid else None
            if ref.pod_uid and namespace and pod:
                pod_labels = found.labels if found is not None else {}
                ns_labels = self.pods.namespace_labels(namespace) if found is not None and self.pods else {}
                source_facts = pod_facts(namespace, pod, container, pod_labels, ns_labels)
        return WorkloadInfo(
            workload_key=key,
            project=values.get("project"),
            team=values.get("team"),
            user_name=values.get("user") or fallback_user,
            namespace=namespace if ref is not None and ref.pod_uid else None,
            workload=workload,
            facts=source_facts,
        )

    def _fields(self, facts: Mapping[str, str | None], labels: Mapping[str, str]) -> dict[str, str]:
        values: dict[str, str] = {}
        for key, names in self.label_keys.items():
            if found := next((labels[n] for n in names if labels.get(n)), None):
                values[key] = found
        for rule in self.rules:
            if all(k in values for k in _SET_KEYS):
                break
            if (groups := rule.match(facts)) is None:
                continue
            for key in _SET_KEYS:
                if key not in values and (value := rule.render(key, groups, labels)):
                    values[key] = value
        return values

    def pod_workload(self, namespace: str, pod: str, container: str) -> WorkloadInfo:
        """A pod's container known by its names alone — the kubelet's pod-resources answer for a
        device it holds, no process of it placed: named as a process in it would be (labels from
        ``pods`` when it knows the pod, then rules), without image, Unix user or command."""
        found = self.pods.find(namespace, pod) if self.pods is not None else None
        labels = dict(found.labels) if found is not None else {}
        facts: dict[str, str | None] = dict.fromkeys(_MATCH_KEYS)
        facts |= {"container_name": container, "namespace": namespace, "pod": pod}
        facts |= {f"label:{k}": v for k, v in labels.items()}
        values = self._fields(facts, labels)
        ns_labels = self.pods.namespace_labels(namespace) if found is not None and self.pods else {}
        return WorkloadInfo(
            workload_key=f"k8s:{namespace}/{pod}/{container}",
            project=values.get("project"),
            team=values.get("team"),
            user_name=values.get("user"),
            namespace=namespace,
            workload=pod,
            facts=pod_facts(namespace, pod, container, labels, ns_labels),
        )

    def gpu_cap(self, pid: int, device_id: str) -> float | None:
        """The share of GPU ``device_id`` HAMi gave the pod container ``pid`` runs in (its cores
        / 100, from the pod's annotation through ``pods``), or None: no HAMi, no cap, unknown."""
        try:
            ref = parse_cgroup((self.proc_root / str(pid) / "cgroup").read_text())
        except OSError:
            return None
        found = self._pod(ref)
        if found is None or ref is None or not found.gpu_caps:
            return None
        container = found.containers.get(ref.container_id or "")
        return found.gpu_caps.get(container or "", {}).get(device_id)

    def _pod(self, ref: ContainerRef | None) -> PodMeta | None:
        if self.pods is None or ref is None or ref.pod_uid is None:
            return None
        return self.pods.pod(ref.pod_uid)

    def _details(self, ref: ContainerRef | None) -> ContainerDetails | None:
        # containerd / CRI-O / nspawn containers are not Docker's: don't ask.
        if self.docker is None or ref is None or ref.container_id is None:
            return None
        if ref.runtime not in ("docker", "kubernetes", "other"):
            return None
        now = self._clock()
        cached = self._containers.get(ref.container_id)
        if cached is not None and cached[0] > now:
            return cached[1]
        if len(self._containers) > 4096:  # containers come and go: drop what expired
            self._containers = {k: v for k, v in self._containers.items() if v[0] > now}
        details = self.docker.inspect(ref.container_id)
        self._containers[ref.container_id] = (now + self.cache_s, details)
        return details

    def _user_names(self) -> dict[int, str]:
        now = self._clock()
        if self._users is None or self._users[0] <= now:
            self._users = (now + self.cache_s, _read_passwd(self.passwd))
        return self._users[1]


def short_container_id(container_id: str | None) -> str | None:
    """A container id as workload keys carry it: a runtime's 64-hex id cut to 12, as Docker shows
    it; any other id whole."""
    return container_id[:12] if container_id and len(container_id) == 64 else container_id


def pod_uid_key(pod_uid: str, container_id: str | None = None) -> str:
    """The key of a pod's container known only from its cgroup (containerd, CRI-O):
    ``k8s:<pod-uid>/<container-id[:12]>``, or ``k8s:<pod-uid>`` for the pod's own cgroup. The
    ``kubernetes`` facts connector (connectors/kube_facts.py) describes the same keys."""
    short = short_container_id(container_id)
    return f"k8s:{pod_uid}/{short}" if short else f"k8s:{pod_uid}"


def _container_key(
    ref: ContainerRef,
    details: ContainerDetails | None,
    namespace: str | None,
    pod: str | None,
    container: str | None,
) -> str:
    if ref.pod_uid is not None:
        if namespace and pod and container:
            return f"k8s:{namespace}/{pod}/{container}"
        return pod_uid_key(ref.pod_uid, ref.container_id)
    runtime = "docker" if details is not None else ref.runtime
    return f"{runtime}:{short_container_id(ref.container_id)}"


def _real_uid(status: str) -> int | None:
    # `Uid:\t<real>\t<effective>\t<saved>\t<fs>`: the real uid is who started the process.
    for line in status.splitlines():
        if line.startswith("Uid:"):
            fields = line.split()
            return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
    return None


def _read_passwd(path: Path) -> dict[int, str]:
    users: dict[int, str] = {}
    try:
        text = path.read_text()
    except OSError:
        log.warning("cannot read %s: users are named by uid", path)
        return users
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and fields[2].isdigit() and not line.startswith("#"):
            users.setdefault(int(fields[2]), fields[0])
    return users
