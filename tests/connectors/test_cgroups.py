"""parse_cgroup on real /proc/PID/cgroup shapes: one recorded file per runtime, driver and QoS."""

from __future__ import annotations

import pytest

from connectors.cgroups import ContainerRef, parse_cgroup

CID = "3f1d2c7be2b04cbd8a1e50d8c4b1f3a7a98e0c1c7f2e4d6b8a0c2e4f6a8b0c2d"
POD = "8a2f7c1e-4b3d-4e9a-9c1d-2f5e8b7a6c3d"
POD_ = POD.replace("-", "_")  # the systemd driver writes the UID with underscores
STATIC_POD = "0b6a9c8c8c8f0a3e2e5b1e4a3c1d2f3e"  # a static pod's UID is a config hash

# Docker, cgroupfs driver, cgroup v1 (Ubuntu 18.04, CentOS 7): every controller names the container.
DOCKER_V1 = f"""12:pids:/docker/{CID}
11:hugetlb:/docker/{CID}
10:net_cls,net_prio:/docker/{CID}
9:perf_event:/docker/{CID}
8:cpuset:/docker/{CID}
7:devices:/docker/{CID}
6:freezer:/docker/{CID}
5:blkio:/docker/{CID}
4:rdma:/
3:memory:/docker/{CID}
2:cpu,cpuacct:/docker/{CID}
1:name=systemd:/docker/{CID}
"""
# Hybrid host (systemd's unified line beside v1 controllers): the 0:: line names a service, the
# controllers the container; some controllers sit at the root. The container wins.
MIXED_V1 = f"""13:misc:/
12:rdma:/
11:devices:/docker/{CID}
10:cpuset:/docker/{CID}
9:hugetlb:/docker/{CID}
8:pids:/docker/{CID}
7:blkio:/docker/{CID}
6:perf_event:/
5:freezer:/docker/{CID}
4:net_cls,net_prio:/
3:memory:/docker/{CID}
2:cpu,cpuacct:/docker/{CID}
1:name=systemd:/docker/{CID}
0::/system.slice/containerd.service
"""
DOCKER_V2 = f"0::/system.slice/docker-{CID}.scope\n"
ROOTLESS_DOCKER_V2 = f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/docker-{CID}.scope\n"
K8S_CGROUPFS_V1 = f"""12:pids:/kubepods/burstable/pod{POD}/{CID}
11:cpuset:/kubepods/burstable/pod{POD}/{CID}
10:memory:/kubepods/burstable/pod{POD}/{CID}
9:devices:/kubepods/burstable/pod{POD}/{CID}
3:cpu,cpuacct:/kubepods/burstable/pod{POD}/{CID}
1:name=systemd:/kubepods/burstable/pod{POD}/{CID}
"""
K8S_GUARANTEED_CGROUPFS_V1 = f"11:memory:/kubepods/pod{POD}/{CID}\n1:name=systemd:/kubepods/pod{POD}/{CID}\n"
K8S_CONTAINERD_V2 = (
    "0::/kubepods.slice/kubepods-burstable.slice/"
    f"kubepods-burstable-pod{POD_}.slice/cri-containerd-{CID}.scope\n"
)
K8S_GUARANTEED_V2 = f"0::/kubepods.slice/kubepods-pod{POD_}.slice/cri-containerd-{CID}.scope\n"
K8S_CRIO_BESTEFFORT_V2 = (
    f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{POD_}.slice/crio-{CID}.scope\n"
)
K8S_CRI_DOCKERD_V2 = (
    f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_}.slice/docker-{CID}.scope\n"
)
K8S_STATIC_POD_V2 = (
    "0::/kubepods.slice/kubepods-burstable.slice/"
    f"kubepods-burstable-pod{STATIC_POD}.slice/cri-containerd-{CID}.scope\n"
)
CRIO_STANDALONE_V2 = f"0::/machine.slice/crio-{CID}.scope\n"
PODMAN_V2 = f"0::/machine.slice/libpod-{CID}.scope\n"
NSPAWN_V2 = "0::/machine.slice/machine-build\\x2dbox.scope/payload\n"
GITHUB_RUNNER_V1 = f"12:pids:/actions_job/{CID}\n0::/\n"
# Slurm (docs/slurm.md): cgroup/v2 as a compute node shows it, a batch script's step, an ssh session
# pam_slurm_adopt placed in the job's extern step, slurmstepd itself, --enable-multiple-slurmd's
# node-prefixed scope; cgroup/v1 (only the controllers Slurm's plugins use name the job).
SLURM_V2 = "0::/system.slice/slurmstepd.scope/job_1392969/step_0/user/task_0\n"
SLURM_V2_BATCH = "0::/system.slice/slurmstepd.scope/job_4711/step_batch/user/task_special\n"
SLURM_V2_EXTERN = "0::/system.slice/slurmstepd.scope/job_42/step_extern/user\n"
SLURM_V2_STEPD = "0::/system.slice/slurmstepd.scope/job_3385/step_interactive/slurm\n"
SLURM_V2_MULTI = "0::/system.slice/gamba1_slurmstepd.scope/job_3385/step_0/user/task_3\n"
SLURM_V1 = """11:freezer:/slurm/uid_2101171/job_280678/step_interactive/task_0
10:devices:/slurm/uid_2101171/job_280678/step_interactive/task_0
7:memory:/slurm/uid_2101171/job_280678/step_interactive/task_0
6:pids:/system.slice/slurmd.service
1:name=systemd:/system.slice/slurmd.service
"""
SLURM_V1_MULTI = "4:cpuset:/slurm_node07/uid_1000/job_17/step_0\n"
# Not containers.
SLURM_V2_IDLE = "0::/system.slice/slurmstepd.scope/system\n"  # `slurmstepd infinity`, no job
SLURM_V2_SLURMD = "0::/system.slice/slurmstepd.scope/slurmd\n"  # slurmd started by hand
NOT_SLURM_JOB = "0::/user.slice/job_123/step_0\n"  # a `job_<n>` directory of somebody else
SLURM_V1_NO_UID = "4:cpuset:/slurm/job_17/step_0\n"
SLURM_V2_BAD_ID = "0::/system.slice/slurmstepd.scope/job_12a/step_0\n"
SSH_SESSION_V2 = "0::/user.slice/user-1000.slice/session-3.scope\n"
H200_PROBE = "0::/process_api/add5941bd36bf0c8a930b6f2d1575377\n"  # nvml_probe.json child_cgroup
CRIO_CONMON_V2 = f"0::/machine.slice/crio-conmon-{CID}.scope\n"  # CRI-O's monitor, not the container
NAMESPACED = "0::/\n"  # read from inside a private cgroup namespace: nothing to see


def ref(runtime, path, cid=CID, pod=None, qos=None) -> ContainerRef:
    return ContainerRef(runtime=runtime, container_id=cid, pod_uid=pod, qos=qos, cgroup_path=path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(DOCKER_V1, ref("docker", f"/docker/{CID}"), id="docker-cgroupfs-v1"),
        pytest.param(MIXED_V1, ref("docker", f"/docker/{CID}"), id="mixed-v1-picks-pids"),
        pytest.param(DOCKER_V2, ref("docker", f"/system.slice/docker-{CID}.scope"), id="docker-systemd-v2"),
        pytest.param(ROOTLESS_DOCKER_V2, ref("docker", ROOTLESS_DOCKER_V2[3:-1]), id="docker-user-slice"),
        pytest.param(
            K8S_CGROUPFS_V1,
            ref("kubernetes", f"/kubepods/burstable/pod{POD}/{CID}", pod=POD, qos="burstable"),
            id="k8s-cgroupfs-v1",
        ),
        pytest.param(
            K8S_GUARANTEED_CGROUPFS_V1,
            ref("kubernetes", f"/kubepods/pod{POD}/{CID}", pod=POD, qos="guaranteed"),
            id="k8s-guaranteed-cgroupfs-v1",
        ),
        pytest.param(
            K8S_CONTAINERD_V2,
            ref("containerd", K8S_CONTAINERD_V2[3:-1], pod=POD, qos="burstable"),
            id="k8s-containerd-systemd-v2",
        ),
        pytest.param(
            K8S_GUARANTEED_V2,
            ref("containerd", K8S_GUARANTEED_V2[3:-1], pod=POD, qos="guaranteed"),
            id="k8s-guaranteed-systemd-v2",
        ),
        pytest.param(
            K8S_CRIO_BESTEFFORT_V2,
            ref("crio", K8S_CRIO_BESTEFFORT_V2[3:-1], pod=POD, qos="besteffort"),
            id="k8s-crio-besteffort-v2",
        ),
        pytest.param(
            K8S_CRI_DOCKERD_V2,
            ref("docker", K8S_CRI_DOCKERD_V2[3:-1], pod=POD, qos="burstable"),
            id="k8s-cri-dockerd-v2",
        ),
        pytest.param(
            K8S_STATIC_POD_V2,
            ref("containerd", K8S_STATIC_POD_V2[3:-1], pod=STATIC_POD, qos="burstable"),
            id="k8s-static-pod",
        ),
        pytest.param(CRIO_STANDALONE_V2, ref("crio", CRIO_STANDALONE_V2[3:-1]), id="crio-standalone"),
        pytest.param(PODMAN_V2, ref("other", PODMAN_V2[3:-1]), id="podman"),
        pytest.param(NSPAWN_V2, ref("systemd", NSPAWN_V2[3:-1], cid="build\\x2dbox"), id="nspawn"),
        pytest.param(GITHUB_RUNNER_V1, ref("other", f"/actions_job/{CID}"), id="bare-64hex"),
        pytest.param(SSH_SESSION_V2, None, id="ssh-session"),
        pytest.param(SLURM_V2, ref("slurm", SLURM_V2[3:-1], cid="1392969"), id="slurm-v2-step"),
        pytest.param(SLURM_V2_BATCH, ref("slurm", SLURM_V2_BATCH[3:-1], cid="4711"), id="slurm-v2-batch"),
        pytest.param(SLURM_V2_EXTERN, ref("slurm", SLURM_V2_EXTERN[3:-1], cid="42"), id="slurm-v2-extern"),
        pytest.param(SLURM_V2_STEPD, ref("slurm", SLURM_V2_STEPD[3:-1], cid="3385"), id="slurm-v2-stepd"),
        pytest.param(SLURM_V2_MULTI, ref("slurm", SLURM_V2_MULTI[3:-1], cid="3385"), id="slurm-v2-multi"),
        pytest.param(
            SLURM_V1,
            ref("slurm", "/slurm/uid_2101171/job_280678/step_interactive/task_0", cid="280678"),
            id="slurm-v1",
        ),
        pytest.param(SLURM_V1_MULTI, ref("slurm", SLURM_V1_MULTI[9:-1], cid="17"), id="slurm-v1-multi"),
        pytest.param(SLURM_V2_IDLE, None, id="slurm-stepd-idle"),
        pytest.param(SLURM_V2_SLURMD, None, id="slurm-slurmd"),
        pytest.param(NOT_SLURM_JOB, None, id="job-dir-outside-slurm"),
        pytest.param(SLURM_V1_NO_UID, None, id="slurm-v1-no-uid"),
        pytest.param(SLURM_V2_BAD_ID, None, id="slurm-bad-job-id"),
        pytest.param(H200_PROBE, None, id="h200-process-api"),
        pytest.param(CRIO_CONMON_V2, None, id="crio-conmon"),
        pytest.param(NAMESPACED, None, id="private-cgroupns"),
        pytest.param("", None, id="empty"),
        pytest.param("garbage\n3:memory\n", None, id="malformed"),
    ],
)
def test_parse_cgroup(text: str, expected: ContainerRef | None) -> None:
    assert parse_cgroup(text) == expected


def test_line_order_does_not_matter() -> None:
    # v1 line order differs between kernels; the chosen line must not.
    lines = MIXED_V1.splitlines()
    assert parse_cgroup("\n".join(reversed(lines))) == parse_cgroup(MIXED_V1)


def test_v1_prefers_pids_over_other_controllers() -> None:
    # A (contrived) disagreement between controllers: the ranking, not the line order, decides.
    other = "b" * 64
    text = f"7:devices:/docker/{other}\n3:memory:/docker/{other}\n12:pids:/docker/{CID}\n"
    assert parse_cgroup(text) == ref("docker", f"/docker/{CID}")
