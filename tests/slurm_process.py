"""A node's GPU process inside a Slurm job, as the node agent's attributor sees it: a /proc with
the process in job 4711's cgroup (Slurm's cgroup/v2 layout), run by bob (uid 1001)."""

from __future__ import annotations

from pathlib import Path

from connectors.attribution import ProcessAttributor
from connectors.sdk import WorkloadInfo


def job_4711_process(root: Path) -> WorkloadInfo:
    """What ProcessAttributor says of pid 31337 under ``root`` (``proc/`` and ``passwd`` are
    written there)."""
    proc = root / "proc" / "31337"
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text("0::/system.slice/slurmstepd.scope/job_4711/step_0/user/task_0\n")
    (proc / "comm").write_text("pt_main_thread\n")
    (proc / "status").write_text("Name:\tpt_main_thread\nUid:\t1001\t1001\t1001\t1001\n")
    passwd = root / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\nbob:x:1001:1001::/home/bob:/bin/zsh\n")
    return ProcessAttributor(proc_root=root / "proc", passwd=passwd).workload(31337)
