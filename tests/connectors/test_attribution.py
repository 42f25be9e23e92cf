"""ProcessAttributor on a fake /proc tree, with a real HTTP server on a unix socket as the Docker
Engine (recorded `docker inspect` answers), and the mapping rules."""

from __future__ import annotations

import json
import logging
import socketserver
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pydantic
import pytest

from connectors.attribution import MappingRule, ProcessAttributor
from connectors.base import WorkloadInfo
from connectors.docker_api import ContainerDetails, DockerEngine

TRAIN = "9d5b1e3c7a2f4e6d8c0b1a2f3e4d5c6b7a8f9e0d1c2b3a4f5e6d7c8b9a0f1e2d"  # plain docker run
K8S = "4c8e2a6f0b3d5e7a9c1f2b4d6e8a0c2f4b6d8e0a2c4f6b8d0e2a4c6f8b0d2e4a"  # via cri-dockerd
GONE = "e1" * 32  # Docker never heard of it (removed, or containerd's)
CTRD = "a7" * 32  # a containerd container in a pod: Docker is never asked
POD = "8a2f7c1e-4b3d-4e9a-9c1d-2f5e8b7a6c3d"
POD_ = POD.replace("-", "_")
# A cri-dockerd pod's container: its names as attribution facts (issue 16).
BERT_FACTS = {"k8s.namespace": "ml-research", "k8s.pod": "bert-train-0", "k8s.container": "trainer"}

# Trimmed from `curl --unix-socket /var/run/docker.sock http://d/v1.43/containers/<id>/json` (Docker 24).
INSPECT = {
    TRAIN: {
        "Id": TRAIN,
        "Created": "2026-11-30T09:12:44.120391826Z",
        "Path": "python",
        "Args": ["train.py", "--epochs", "40"],
        "State": {"Status": "running", "Running": True, "Pid": 31337},
        "Name": "/llm-finetune-alice",
        "HostConfig": {"Runtime": "nvidia", "DeviceRequests": [{"Driver": "", "Count": -1}]},
        "Config": {
            "Hostname": "9d5b1e3c7a2f",
            "User": "1000:1000",
            "Env": ["PATH=/usr/local/sbin:/usr/bin", "NVIDIA_VISIBLE_DEVICES=all"],
            "Cmd": ["python", "train.py", "--epochs", "40"],
            "Image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "Labels": {
                "com.nvidia.volumes.needed": "nvidia_driver",
                "gpu-ledger.project": "llm",
                "org.opencontainers.image.version": "22.04",
            },
        },
    },
    K8S: {
        "Id": K8S,
        "Name": f"/k8s_trainer_bert-train-0_ml-research_{POD}_0",
        "Config": {
            "Image": "registry.example.com/ml/bert:2.1",
            "Labels": {
                "annotation.io.kubernetes.container.hash": "5c1e3a7b",
                "io.kubernetes.container.name": "trainer",
                "io.kubernetes.docker.type": "container",
                "io.kubernetes.pod.name": "bert-train-0",
                "io.kubernetes.pod.namespace": "ml-research",
                "io.kubernetes.pod.uid": POD,
                "team": "nlp",
            },
        },
    },
}


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class _DockerHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    requests: list[str]

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.requests.append(self.path)
        parts = self.path.split("/")  # /v1.43/containers/<id>/json
        if parts[1] != "v1.43":  # what Docker 24 says to a newer client
            too_new = f"client version {parts[1][1:]} is too new. Maximum supported API version is 1.43"
            status, body = 400, {"message": too_new}
        elif found := INSPECT.get(parts[3]):
            status, body = 200, found
        else:
            status, body = 404, {"message": f"No such container: {parts[3]}"}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # keep pytest output clean
        pass


@pytest.fixture
def docker_socket() -> Iterator[tuple[Path, list[str]]]:
    """A Docker Engine stand-in on a unix socket; yields (socket path, request paths seen)."""
    requests: list[str] = []
    handler = type("Handler", (_DockerHandler,), {"requests": requests})
    with tempfile.TemporaryDirectory(prefix="dk") as tmp:  # AF_UNIX paths are limited to ~107 bytes
        socket = Path(tmp) / "docker.sock"
        server = _UnixHTTPServer(str(socket), handler)
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        try:
            yield socket, requests
        finally:
            server.shutdown()
            server.server_close()
            thread.join()


@pytest.fixture
def docker(docker_socket: tuple[Path, list[str]]) -> Iterator[DockerEngine]:
    with DockerEngine(docker_socket[0]) as engine:
        yield engine


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fake_host(root: Path) -> tuple[Path, Path]:
    """A /proc with one process per case and an /etc/passwd; returns (proc_root, passwd)."""
    processes = {
        101: ("0::/user.slice/user-1000.slice/session-3.scope\n", 1000, "python3"),
        102: ("0::/system.slice/slurmstepd.scope/job_4711/step_0/user/task_0\n", 1001, "pt_main_thread"),
        103: ("0::/user.slice/user-4242.slice/session-9.scope\n", 4242, "a.out"),
        104: ("0::/process_api/add5941bd36bf0c8a930b6f2d1575377\n", 0, "python"),
        105: (
            "11:memory:/slurm/uid_5005/job_280678/step_batch/task_0\n"
            "10:devices:/slurm/uid_5005/job_280678/step_batch/task_0\n"
            "2:pids:/system.slice/slurmd.service\n"
            "1:name=systemd:/system.slice/slurmd.service\n",
            5005,
            "python",
        ),
        106: ("0::/system.slice/slurmstepd.scope/system\n", 0, "slurmstepd"),
        201: (f"0::/system.slice/docker-{TRAIN}.scope\n", 1000, "python"),
        202: (f"0::/system.slice/docker-{TRAIN}.scope\n", 0, "python"),
        203: (f"12:pids:/docker/{GONE}\n1:name=systemd:/docker/{GONE}\n", 0, "python"),
        301: (
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_}.slice/"
            f"docker-{K8S}.scope\n",
            0,
            "python",
        ),
        302: (
            f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{POD_}.slice/"
            f"cri-containerd-{CTRD}.scope\n",
            1000,
            "python",
        ),
        303: (f"11:memory:/kubepods/burstable/pod{POD}/{GONE}\n", 0, "python"),
    }
    proc = root / "proc"
    for pid, (cgroup, uid, comm) in processes.items():
        d = proc / str(pid)
        d.mkdir(parents=True)
        (d / "cgroup").write_text(cgroup)
        (d / "comm").write_text(comm + "\n")
        (d / "status").write_text(
            f"Name:\t{comm}\nUmask:\t0022\nState:\tR (running)\nTgid:\t{pid}\nPid:\t{pid}\n"
            f"PPid:\t1\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
        )
    passwd = root / "etc" / "passwd"
    passwd.parent.mkdir()
    passwd.write_text(
        "root:x:0:0:root:/root:/bin/bash\n"
        "# a comment line\n"
        "alice:x:1000:1000:Alice,,,:/home/alice:/bin/bash\n"
        "bob:x:1001:1001::/home/bob:/bin/zsh\n"
    )
    return proc, passwd


@pytest.fixture
def host(tmp_path: Path) -> tuple[Path, Path]:
    return fake_host(tmp_path)


def attributor(host: tuple[Path, Path], rules=(), **kw) -> ProcessAttributor:
    return ProcessAttributor(rules, proc_root=host[0], passwd=host[1], **kw)


# --- processes outside containers -----------------------------------------------------------------


def proc(key: str, user: str, comm: str, **kw) -> WorkloadInfo:
    return WorkloadInfo(
        key, user_name=kw.pop("user_name", user), workload=comm, facts={"unix.user": user}, **kw
    )


def test_bare_metal_processes_are_keyed_by_user_and_command(host) -> None:
    a = attributor(host)
    assert a.workload(101) == proc("proc:alice/python3", "alice", "python3")
    assert a.workload(103) == proc("proc:4242/a.out", "4242", "a.out")
    assert a.workload(104) == proc("proc:root/python", "root", "python")


def test_slurm_jobs_are_keyed_by_job_id(host) -> None:
    # cgroup/v2 (Slurm >= 22.05) and cgroup/v1 with a uid passwd lacks: the job, its owner as a fact.
    a = attributor(host)
    assert a.workload(102) == WorkloadInfo(
        "slurm:4711",
        user_name="bob",
        workload="4711",
        facts={"slurm.job": "4711", "unix.user": "bob"},
    )
    assert a.workload(105) == WorkloadInfo(
        "slurm:280678",
        user_name="5005",
        workload="280678",
        facts={"slurm.job": "280678", "unix.user": "5005"},
    )
    # slurmstepd's own idle process sits in the scope but in no job: a bare process.
    assert a.workload(106) == proc("proc:root/slurmstepd", "root", "slurmstepd")


def test_a_vanished_process_is_unknown(host) -> None:
    assert attributor(host).workload(999) == WorkloadInfo("proc:unknown/999")


def test_half_vanished_process_is_unknown(host) -> None:
    (host[0] / "101" / "status").unlink()  # exited between our reads
    assert attributor(host).workload(101) == WorkloadInfo("proc:unknown/101")


def test_missing_passwd_names_users_by_uid(host, caplog) -> None:
    a = ProcessAttributor(proc_root=host[0], passwd=host[0] / "nope")
    assert a.workload(101) == proc("proc:1000/python3", "1000", "python3")
    assert "users are named by uid" in caplog.text


# --- containers -----------------------------------------------------------------------------------


def test_containers_without_docker(host) -> None:
    a = attributor(host)
    assert a.workload(201) == WorkloadInfo(f"docker:{TRAIN[:12]}", user_name="alice")
    assert a.workload(202) == WorkloadInfo(f"docker:{TRAIN[:12]}")  # root in a container: nobody
    assert a.workload(301) == WorkloadInfo(f"k8s:{POD}/{K8S[:12]}")
    assert a.workload(302) == WorkloadInfo(f"k8s:{POD}/{CTRD[:12]}", user_name="alice")
    assert a.workload(303) == WorkloadInfo(f"k8s:{POD}/{GONE[:12]}")


def test_docker_enriches_names_and_labels(host, docker) -> None:
    a = attributor(host, docker=docker)
    assert a.workload(201) == WorkloadInfo(
        f"docker:{TRAIN[:12]}", project="llm", user_name="alice", workload="llm-finetune-alice"
    )
    assert a.workload(301) == WorkloadInfo(
        "k8s:ml-research/bert-train-0/trainer",
        team="nlp",
        namespace="ml-research",
        workload="bert-train-0",
        facts=BERT_FACTS,
    )
    # Docker does not know it: the cgroup path's key, no labels; bare `/docker/<id>` is Docker's.
    assert a.workload(203) == WorkloadInfo(f"docker:{GONE[:12]}")
    assert a.workload(303) == WorkloadInfo(f"k8s:{POD}/{GONE[:12]}")


def test_docker_answers_are_cached_per_container(host, docker, docker_socket) -> None:
    clock = Clock()
    a = attributor(host, docker=docker, cache_s=60, clock=clock)
    for pid in (201, 202, 203, 302, 201, 203):
        a.workload(pid)
    # One ask per container, 404s included; containerd's container is never asked for.
    assert docker_socket[1] == [f"/v1.43/containers/{TRAIN}/json", f"/v1.43/containers/{GONE}/json"]
    clock.now += 61
    a.workload(201)
    assert len(docker_socket[1]) == 3


def test_docker_client_reads_inspect(docker) -> None:
    assert docker.inspect(TRAIN) == ContainerDetails(
        container_id=TRAIN,
        name="llm-finetune-alice",
        image="nvcr.io/nvidia/pytorch:24.05-py3",
        labels=INSPECT[TRAIN]["Config"]["Labels"],
    )
    assert docker.inspect(GONE) is None


def test_docker_refusing_the_api_version_is_logged_once(docker_socket, caplog) -> None:
    with DockerEngine(docker_socket[0], api_version="v1.99") as engine:
        assert engine.inspect(TRAIN) is None
        assert engine.inspect(TRAIN) is None
    warnings = [r.getMessage() for r in caplog.records if r.name == "connectors.docker_api"]
    assert warnings == [
        f"Docker Engine at {docker_socket[0]} answered 400 "
        '{"message": "client version 1.99 is too new. Maximum supported API version is 1.43"}: '
        "no container names or labels"
    ]


def test_missing_docker_socket_is_logged_once(host, tmp_path, caplog) -> None:
    clock = Clock()
    with DockerEngine(tmp_path / "no-docker.sock") as engine:
        a = attributor(host, docker=engine, cache_s=0, clock=clock)
        with caplog.at_level(logging.WARNING, logger="connectors.docker_api"):
            for _ in range(3):
                assert a.workload(201) == WorkloadInfo(f"docker:{TRAIN[:12]}", user_name="alice")
                clock.now += 1
    warnings = [r for r in caplog.records if r.name == "connectors.docker_api"]
    assert len(warnings) == 1
    assert warnings[0].getMessage() == (
        f"no Docker Engine socket at {tmp_path / 'no-docker.sock'} (missing): no container names or labels"
    )


# --- rules ----------------------------------------------------------------------------------------


def rule(**kw) -> MappingRule:
    return MappingRule.model_validate(kw)


def test_rules_each_kind_of_match(host, docker) -> None:
    rules = [
        rule(container_name=r"llm-(\w+)-.*", project="gen-$1"),  # container name → project
        rule(image=r"nvcr\.io/nvidia/(?P<fw>[a-z]+):.*", team="${fw}-users"),  # image → team
        rule(namespace="ml-(.*)", project="$1"),  # namespace → project
        rule(label={"io.kubernetes.container.name": "train.*"}, team="${label:team}-ops"),  # label → team
        rule(unix_user="bob", user="robert"),  # unix user → user
        rule(command="pt_main_thread", project="slurm"),
    ]
    a = attributor(host, rules, docker=docker)
    # A label beats a rule (gpu-ledger.project=llm); the image rule names the team.
    assert a.workload(201) == WorkloadInfo(
        f"docker:{TRAIN[:12]}",
        project="llm",
        team="pytorch-users",
        user_name="alice",
        workload="llm-finetune-alice",
    )
    # The `team` label beats the label rule too; the namespace rule names the project.
    assert a.workload(301) == WorkloadInfo(
        "k8s:ml-research/bert-train-0/trainer",
        project="research",
        team="nlp",
        namespace="ml-research",
        workload="bert-train-0",
        facts=BERT_FACTS,
    )
    assert a.workload(102) == WorkloadInfo(
        "slurm:4711",
        project="slurm",
        user_name="robert",
        workload="4711",
        facts={"slurm.job": "4711", "unix.user": "bob"},
    )
    assert a.workload(101) == proc("proc:alice/python3", "alice", "python3")


def test_first_matching_rule_wins_per_field(host, docker) -> None:
    rules = [
        rule(label={"io.kubernetes.pod.name": "bert-.*"}, project="bert"),
        rule(label={"io.kubernetes.pod.name": "(.*)"}, project="$1", team="${label:owner}"),  # no owner label
        rule(namespace=".*", project="other", team="platform"),
        rule(user="$$nobody"),  # catch-all
    ]
    a = ProcessAttributor(rules, proc_root=host[0], passwd=host[1], docker=docker, label_keys={})
    assert a.workload(301) == WorkloadInfo(
        "k8s:ml-research/bert-train-0/trainer",
        project="bert",
        team="platform",
        user_name="$nobody",
        namespace="ml-research",
        workload="bert-train-0",
        facts=BERT_FACTS,
    )
    # A process outside Kubernetes: namespace is unknown, so only the catch-all matches.
    assert a.workload(101) == proc("proc:alice/python3", "alice", "python3", user_name="$nobody")


def test_no_rule_matches_labels_only(host, docker) -> None:
    a = attributor(
        host, [rule(image="docker.io/.*", project="x"), rule(unix_user="carol", user="c")], docker=docker
    )
    assert a.workload(301) == WorkloadInfo(
        "k8s:ml-research/bert-train-0/trainer",
        team="nlp",
        namespace="ml-research",
        workload="bert-train-0",
        facts=BERT_FACTS,
    )


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"image": ".*", "projekt": "x"}, "projekt"),  # a typo is an error that names the key
        ({"image": "(", "project": "x"}, "image: not a regular expression"),
        ({"label": {"team": "[a-"}, "team": "x"}, "label:team: not a regular expression"),
        ({"image": "(.*)", "project": "$2"}, "$2 but the rule's regexes have 1 group"),
        ({"image": "(?P<a>.*)", "project": "${b}"}, "no group named 'b'"),
        ({"image": ".*"}, "must set at least one"),
    ],
)
def test_bad_rules_are_rejected(table, message) -> None:
    with pytest.raises(pydantic.ValidationError, match=message.replace("$", r"\$")):
        MappingRule.model_validate(table)
