"""Which container a process runs in, read from its ``/proc/PID/cgroup`` (pure parsing, no I/O).

Path shapes understood (cgroup v1 or v2, cgroupfs or systemd driver; docs/design.md §2):

* Docker: ``/docker/<64hex>`` (cgroupfs) and ``…/docker-<64hex>.scope`` (systemd, also rootless
  Docker under ``/user.slice/…``).
* Kubernetes: ``/kubepods[/<qos>]/pod<uid>/<64hex>`` (cgroupfs) and
  ``/kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid_with_underscores>.slice/
  <runtime>-<64hex>.scope`` (systemd); no QoS level means ``guaranteed``.
* CRI-O ``crio-<64hex>[.scope]``, containerd ``cri-containerd-<64hex>.scope`` / nerdctl
  ``nerdctl-<64hex>.scope``, Podman ``libpod-<64hex>.scope``, systemd-nspawn
  ``/machine.slice/machine-<name>.scope``, and a bare ``<64hex>`` directory anywhere (Docker
  ``--cgroup-parent``, CI runners).
* Slurm jobs (Slurm's cgroup plugins, docs/slurm.md): cgroup/v2
  ``/system.slice/[<node>_]slurmstepd.scope/job_<id>/step_<step>/{user/task_<n>|slurm}`` (the node
  name prefix with ``--enable-multiple-slurmd``; ``slurmstepd.scope/system`` holds slurmstepd's
  idle process, no job), cgroup/v1 ``/slurm[_<node>]/uid_<uid>/job_<id>/step_<step>/task_<n>``.
  ``<id>`` is the job's numeric id (an array task's or a heterogeneous component's own id, sacct's
  ``JobIDRaw``).

Anything else (``/user.slice/user-1000.slice/session-3.scope``, ``/process_api/<32hex>``, ``/``) is
not a container. The parser must see the *host's* view: a process inside a private cgroup
namespace reads ``0::/``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Runtime = Literal["docker", "containerd", "crio", "kubernetes", "systemd", "slurm", "other"]

_HEX64 = r"[0-9a-f]{64}"
# `<prefix>-<64hex>[.scope]`: the runtime that made the scope, named by its prefix.
_SCOPE = re.compile(rf"^(docker|cri-containerd|crio|libpod|nerdctl)-({_HEX64})(?:\.scope)?$")
_SCOPE_RUNTIME: dict[str, Runtime] = {
    "docker": "docker",
    "cri-containerd": "containerd",
    "nerdctl": "containerd",
    "crio": "crio",
    "libpod": "other",  # Podman: not one of the runtimes the ledger names
}
_BARE = re.compile(rf"^{_HEX64}$")
# `pod<uid>` (cgroupfs) or `kubepods[-<qos>]-pod<uid_with_underscores>.slice` (systemd). Static
# pods have a 32-hex UID without dashes.
_POD = re.compile(
    r"^(?:kubepods(?:-(?:burstable|besteffort))?-)?pod"
    r"([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32})"
    r"(?:\.slice)?$"
)
_QOS = re.compile(r"^(?:kubepods-)?(burstable|besteffort)(?:\.slice)?$")
_NSPAWN = re.compile(r"^machine-(.+)\.scope$")
# Slurm: the stepd scope (v2) or the `slurm` root and `uid_<uid>` level (v1), then `job_<id>`. Job
# ids are 32-bit unsigned integers.
_SLURM_V2_SCOPE = re.compile(r"^(?:.+_)?slurmstepd\.scope$")
_SLURM_V1_ROOT = re.compile(r"^slurm(?:_.+)?$")
_SLURM_V1_UID = re.compile(r"^uid_\d+$")
_SLURM_JOB = re.compile(r"^job_(\d{1,10})$")


@dataclass(frozen=True, slots=True)
class ContainerRef:
    """The container a process belongs to, as its cgroup path names it.

    ``runtime`` is the runtime the path names (``docker-…scope`` → docker, ``cri-containerd-…`` →
    containerd, ``crio-…`` → crio); ``kubernetes`` when the path is a pod's but does not say which
    runtime made the container (the cgroupfs driver's bare ``pod<uid>/<64hex>``). A pod is known
    by ``pod_uid`` whatever the runtime. ``systemd`` is a systemd-nspawn machine (its name is the
    ``container_id``); ``slurm`` is a Slurm job (its numeric job id is the ``container_id``);
    ``other`` is Podman or a bare 64-hex directory.
    """

    runtime: Runtime
    container_id: str | None  # 64-hex (or as the runtime names it)
    pod_uid: str | None  # Kubernetes pod UID (dashes restored: 8-4-4-4-12)
    qos: str | None  # guaranteed | burstable | besteffort (Kubernetes)
    cgroup_path: str  # the v2 path (or the v1 line chosen), for diagnostics


def _rank(controllers: str) -> int:
    """Which line of a v1 (or hybrid) file to believe first: the unified line, then the
    controllers every runtime places containers in, so the answer never depends on line order."""
    names = set(controllers.split(","))
    for rank, wanted in enumerate(("", "pids", "memory", "cpu", "name=systemd")):
        if wanted in names:  # the v2 line's controller field is empty: {""}
            return rank
    return 5


def parse_path(path: str) -> ContainerRef | None:
    """One cgroup path (``/kubepods/burstable/pod…/…``) → its container, or None."""
    segments = [s for s in path.split("/") if s]
    if (job := _slurm_job(segments)) is not None:
        return ContainerRef(runtime="slurm", container_id=job, pod_uid=None, qos=None, cgroup_path=path)
    in_pod = any(s.startswith("kubepods") for s in segments)
    pod_uid = qos = None
    runtime: Runtime | None = None
    container_id = None
    for i, seg in enumerate(segments):
        if in_pod and (m := _POD.match(seg)):
            pod_uid = m.group(1).replace("_", "-")
        elif in_pod and (m := _QOS.match(seg)):
            qos = m.group(1)
        elif m := _SCOPE.match(seg):
            runtime, container_id = _SCOPE_RUNTIME[m.group(1)], m.group(2)
        elif _BARE.match(seg):
            parent = segments[i - 1] if i else ""
            runtime = "docker" if parent == "docker" else "kubernetes" if in_pod else "other"
            container_id = seg
        elif (m := _NSPAWN.match(seg)) and i and segments[i - 1] == "machine.slice":
            runtime, container_id = "systemd", m.group(1)
    if pod_uid is not None:
        return ContainerRef(
            runtime=runtime or "kubernetes",
            container_id=container_id,
            pod_uid=pod_uid,
            qos=qos or "guaranteed",
            cgroup_path=path,
        )
    if runtime is None:
        return None
    return ContainerRef(runtime=runtime, container_id=container_id, pod_uid=None, qos=None, cgroup_path=path)


def _slurm_job(segments: list[str]) -> str | None:
    """The job id of a Slurm job's cgroup path (module docstring), or None. Only Slurm's own layouts:
    a ``job_<n>`` directory elsewhere is somebody else's."""
    for i, seg in enumerate(segments[:-1]):
        v2 = _SLURM_V2_SCOPE.match(seg) is not None
        v1 = i == 0 and _SLURM_V1_ROOT.match(seg) is not None and _SLURM_V1_UID.match(segments[1]) is not None
        job = segments[i + 1] if v2 else segments[i + 2] if v1 and len(segments) > 2 else ""
        if (m := _SLURM_JOB.match(job)) is not None:
            return m.group(1)
        if v2 or v1:
            return None
    return None


def parse_cgroup(text: str) -> ContainerRef | None:
    """Content of /proc/PID/cgroup (v1 or v2, systemd or cgroupfs driver) → the container, or None for a
    process outside any container.

    Each line is ``hierarchy-id:controllers:path``. Lines are tried in a fixed order — the v2 line
    (``0::``), then ``pids``, ``memory``, ``cpu``, ``name=systemd``, then the rest — and the first
    that names a container wins; ``cgroup_path`` is that line's path. Malformed lines are skipped.
    """
    lines = []
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) == 3 and parts[2].startswith("/"):
            lines.append((_rank(parts[1]), parts[2]))
    for _, path in sorted(lines, key=lambda rank_path: rank_path[0]):
        if (ref := parse_path(path)) is not None:
            return ref
    return None
