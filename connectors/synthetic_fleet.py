"""The synthetic fleet as data: pools of nodes, what runs where, and the incidents of a cycle.

``connectors.synthetic`` turns these tables into samples; nothing here draws random numbers.
Identities (device ids, instance ids, pod names) are stable hashes of names, so the same fleet
comes back for every seed and every scale; ``scale`` only adds copies of each pool's nodes.

Incidents (outages, the counter reset, the stopped instance) happen at a day and time of the
28-day cycle the whole fleet repeats on (see ``connectors.synthetic``), so a month-long demo
window always contains them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Literal

from connectors.sdk import MEASURED_METRICS, DeviceInfo, Metric, WorkloadInfo

MIB = 1 << 20
BLOCK_S = 300  # the fleet changes state (jobs, load levels, outages) on 5-minute blocks
BLOCKS_PER_DAY = 86_400 // BLOCK_S


@dataclass(frozen=True, slots=True)
class Gpu:
    model: str
    mem_total_b: int
    idle_w: float  # no process on the device
    ctx_w: float  # extra draw while a process holds a context (docs/design.md §2: 79 W → 120 W on an H200)
    tdp_w: float
    temp_c_per_w: float  # die temperature above a 30 °C inlet, per watt


H100 = Gpu("NVIDIA H100 80GB HBM3", 81_559 * MIB, 70.0, 45.0, 700.0, 0.062)
H200 = Gpu("NVIDIA H200", 143_771 * MIB, 79.0, 41.0, 700.0, 0.060)
A10G = Gpu("NVIDIA A10G", 23_028 * MIB, 20.0, 10.0, 150.0, 0.30)

#: MIG profile → (compute slices out of 7, memory MiB) on an H100 80GB.
MIG_PROFILES: dict[str, tuple[int, int]] = {
    "3g.40gb": (3, 40_448),
    "2g.20gb": (2, 20_096),
    "1g.10gb": (1, 9_856),
}

ONPREM = tuple(m.value for m in MEASURED_METRICS)  # DCGM exporter: everything
MIG = tuple(m for m in ONPREM if m != Metric.GPU_UTIL)  # NVML has no "GPU util" for a MIG instance
CLOUD = (Metric.GPU_UTIL.value, Metric.MEM_USED_B.value, Metric.MEM_TOTAL_B.value, Metric.POWER_W.value)
CLOUD_DCGM = (*CLOUD, Metric.SM_ACTIVE.value)  # an instance whose DCGM pipeline forwards SM activity


@dataclass(frozen=True, slots=True)
class Pool:
    key: str
    environment: Literal["onprem", "aws", "gcp", "azure"]
    provider: str | None
    account: str | None
    region: str | None
    cluster: str | None
    instance_type: str
    gpu: Gpu
    gpus_per_node: int
    nodes: int  # at scale 1
    node_name: str  # format string of the 1-based node number ``n``
    metrics: tuple[str, ...]
    resource_group: str | None = None  # Azure only


AZURE_SUB = "8f3c2a71-5d4e-4b0a-9c61-2e7d4f1a9b35"
POOLS: tuple[Pool, ...] = (
    Pool(
        "dc1-h100", "onprem", None, None, "dc1", "k8s-dc1", "DGX H100", H100, 8, 4, "dgx-h100-{n:03d}", ONPREM
    ),
    Pool(
        "dc1-h200", "onprem", None, None, "dc1", "k8s-dc1", "DGX H200", H200, 8, 2, "dgx-h200-{n:03d}", ONPREM
    ),
    Pool(
        "aws-p5-dcgm",
        "aws",
        "aws",
        "418295710364",
        "us-east-1",
        None,
        "p5.48xlarge",
        H100,
        8,
        1,
        "p5-llm-{n:02d}",
        CLOUD_DCGM,
    ),
    Pool(
        "aws-p5",
        "aws",
        "aws",
        "418295710364",
        "us-east-1",
        None,
        "p5.48xlarge",
        H100,
        8,
        1,
        "p5-ranker-{n:02d}",
        CLOUD,
    ),
    Pool(
        "aws-g5",
        "aws",
        "aws",
        "736102948551",
        "us-west-2",
        None,
        "g5.12xlarge",
        A10G,
        4,
        2,
        "g5-serve-{n:02d}",
        CLOUD,
    ),
    Pool(
        "gcp-a3",
        "gcp",
        "gcp",
        "acme-ml-research",
        "us-central1",
        None,
        "a3-highgpu-8g",
        H100,
        8,
        1,
        "a3-vision-{n:02d}",
        CLOUD,
    ),
    Pool(
        "azure-nd",
        "azure",
        "azure",
        AZURE_SUB,
        "eastus",
        None,
        "Standard_ND96isr_H100_v5",
        H100,
        8,
        1,
        "ndh100-chat-{n:02d}",
        CLOUD,
        resource_group="rg-ml-prod",
    ),
)


@dataclass(frozen=True, slots=True)
class Profile:
    """How a kind of workload behaves. ``kind`` picks the load model in ``connectors.synthetic``."""

    kind: str  # train | infer | notebook | launch | batch
    job_h: tuple[float, float]  # length of one job / pod, hours
    gap_h: tuple[float, float]  # time between jobs, hours (0: replaced at once)
    level: tuple[float, float]  # per-job load level, % (meaning depends on kind)
    mem: tuple[float, float]  # per-job memory used, fraction of the device


PROFILES: dict[str, Profile] = {
    "train": Profile("train", (8, 60), (0.15, 0.75), (75, 92), (0.82, 0.95)),
    "infer": Profile("infer", (30, 120), (0, 0.1), (50, 60), (0.45, 0.65)),
    "infer_light": Profile("infer", (20, 90), (0, 0.1), (25, 35), (0.15, 0.25)),
    "notebook": Profile("notebook", (24, 140), (2, 30), (25, 70), (0.15, 0.45)),
    "launch": Profile("launch", (4, 30), (0.5, 2), (70, 90), (0.06, 0.18)),
    "batch": Profile("batch", (0.3, 1.6), (0.1, 0.7), (40, 90), (0.3, 0.8)),
}

# Workload keys: ``{h}`` a job's hash, ``{p}`` a pod's hash, ``{rank}`` the node's rank in the job.
JOB = "k8s:{ns}/{name}-{h}-worker-{rank}/main"
DEPLOY = "k8s:{ns}/{name}-{h}-{p}/server"
NOTEBOOK = "k8s:{ns}/{name}/notebook"  # JupyterHub: one pod name per user, session after session
VM = "vm:{instance}"  # a whole cloud VM belongs to one team


@dataclass(frozen=True, slots=True)
class Placement:
    """A workload on some GPUs of some nodes (1-based, as at scale 1). Two placements on one GPU
    time-slice it; ``mig`` names a MIG instance of a partitioned GPU."""

    pool: str
    nodes: tuple[int, ...]
    gpus: tuple[int, ...]
    profile: str
    name: str  # unique in the table: seeds this placement's job schedule
    project: str
    team: str
    user: str | None = None
    namespace: str | None = None
    key: str = JOB
    mig: int | None = None


ALL8 = tuple(range(8))
PLACEMENTS: tuple[Placement, ...] = (
    Placement(
        "dc1-h100",
        (1, 2),
        ALL8,
        "train",
        "llama-70b-pretrain",
        "llm-pretrain",
        "research",
        "mchen",
        "llm-pretrain",
    ),
    Placement(
        "dc1-h100",
        (3,),
        (0, 1, 2, 3),
        "infer",
        "chat-api",
        "chat-serving",
        "product",
        "svc-chat",
        "chat-serving",
        DEPLOY,
    ),
    Placement(
        "dc1-h100",
        (3,),
        (4,),
        "notebook",
        "jupyter-akumar",
        "notebooks",
        "research",
        "akumar",
        "jupyter",
        NOTEBOOK,
    ),
    Placement(
        "dc1-h100",
        (3,),
        (5,),
        "notebook",
        "jupyter-jsmith",
        "notebooks",
        "ads",
        "jsmith",
        "jupyter",
        NOTEBOOK,
    ),
    # One GPU time-sliced by two services of different teams.
    Placement(
        "dc1-h100",
        (3,),
        (6,),
        "infer",
        "query-embedder",
        "search-ranking",
        "ads",
        "svc-search",
        "search-ranking",
        DEPLOY,
    ),
    Placement(
        "dc1-h100",
        (3,),
        (6,),
        "infer_light",
        "ctr-shadow",
        "ads-targeting",
        "ads",
        "svc-ads",
        "ads-targeting",
        DEPLOY,
    ),
    # GPU 7 of dgx-h100-003 is MIG-partitioned (MIG_LAYOUTS); its fourth instance stays free.
    Placement("dc1-h100", (3,), (7,), "batch", "clip-eval", "vision", "research", "tnguyen", "vision", mig=0),
    Placement(
        "dc1-h100",
        (3,),
        (7,),
        "infer_light",
        "moderation",
        "chat-serving",
        "product",
        "svc-chat",
        "chat-serving",
        DEPLOY,
        mig=1,
    ),
    Placement(
        "dc1-h100",
        (3,),
        (7,),
        "notebook",
        "jupyter-lwang",
        "notebooks",
        "research",
        "lwang",
        "jupyter",
        NOTEBOOK,
        mig=2,
    ),
    # High "GPU util", no SM activity: tiny kernels and host syncs (docs/design.md §2).
    Placement(
        "dc1-h100",
        (4,),
        (0, 1, 2, 3),
        "launch",
        "rl-rollout",
        "robotics-rl",
        "research",
        "pgarcia",
        "robotics",
    ),
    Placement("dc1-h100", (4,), (4, 5), "batch", "image-embed", "vision", "research", "tnguyen", "vision"),
    Placement("dc1-h200", (1,), ALL8, "train", "ranker-train", "search-ranking", "ads", "rpatel", "ads-ml"),
    Placement(
        "dc1-h200",
        (2,),
        (0, 1, 2, 3),
        "infer",
        "chat-api-xl",
        "chat-serving",
        "product",
        "svc-chat",
        "chat-serving",
        DEPLOY,
    ),
    Placement("dc1-h200", (2,), (4, 5), "train", "vit-finetune", "vision", "research", "tnguyen", "vision"),
    Placement(
        "dc1-h200",
        (2,),
        (6,),
        "notebook",
        "jupyter-egarcia",
        "notebooks",
        "product",
        "egarcia",
        "jupyter",
        NOTEBOOK,
    ),
    Placement("aws-p5-dcgm", (1,), ALL8, "train", "llm-burst", "llm-pretrain", "research", key=VM),
    Placement("aws-p5", (1,), ALL8, "train", "ranker-cloud", "search-ranking", "ads", key=VM),
    Placement("aws-g5", (1,), (0, 1, 2, 3), "infer", "ctr-serving", "ads-targeting", "ads", key=VM),
    Placement("aws-g5", (2,), (0, 1, 2, 3), "notebook", "vision-devbox", "vision", "research", key=VM),
    Placement("gcp-a3", (1,), ALL8, "train", "vision-pretrain", "vision", "research", key=VM),
    Placement("azure-nd", (1,), ALL8, "infer", "chat-api-azure", "chat-serving", "product", key=VM),
)

#: (pool, node, gpu) → MIG instances: the parent GPU is not itself a device.
MIG_LAYOUTS: dict[tuple[str, int, int], tuple[str, ...]] = {
    ("dc1-h100", 3, 7): ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"),
}


@dataclass(frozen=True, slots=True)
class Absence:
    """No samples from a node: ``minutes`` from ``start`` (UTC, HH:MM) on ``day`` of the cycle."""

    pool: str
    node: int
    day: int
    start: str
    minutes: int
    why: str


ABSENCES: tuple[Absence, ...] = (
    Absence("dc1-h100", 3, 5, "10:40", 20, "DCGM exporter crash-looped"),
    Absence("dc1-h200", 1, 17, "01:00", 180, "node-exporter network partition"),
    Absence("aws-g5", 2, 9, "08:00", 6 * 1440 + 600, "dev box stopped over a vacation"),
)

#: (pool, node, gpu, day of cycle, HH:MM): a driver reload; the energy counter restarts near 0.
COUNTER_RESETS: tuple[tuple[str, int, int, int, str], ...] = (("dc1-h100", 4, 2, 11, "14:25"),)


def block_of(day: int, hhmm: str) -> int:
    """The block of the cycle that starts at ``hhmm`` on ``day`` (both as in the tables above)."""
    hours, minutes = (int(x) for x in hhmm.split(":"))
    return day * BLOCKS_PER_DAY + (hours * 60 + minutes) * 60 // BLOCK_S


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """One device of the expanded fleet and everything the generator needs about it."""

    pool: str
    info: DeviceInfo
    metrics: tuple[str, ...]
    lanes: tuple[tuple[Placement, int, int], ...]  # (placement, node rank in it, replica); 2 = time-sliced
    idle_w: float
    ctx_w: float
    tdp_w: float
    temp_c_per_w: float
    mem_total_b: int
    scrape_frac: float  # fixed offset of this node's scrapes, as a fraction of the sample period
    absences: tuple[tuple[int, int], ...]  # [first, last) blocks of the cycle without samples
    reset_block: int  # block of the cycle where the energy counter restarts; -1: never


def digest(*parts: object) -> bytes:
    return hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=16).digest()


def token(*parts: object, n: int = 5) -> str:
    """A Kubernetes-style random-looking suffix, stable for its parts."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    value = int.from_bytes(digest(*parts), "big")
    return "".join(alphabet[(value // len(alphabet) ** i) % len(alphabet)] for i in range(n))


def _uuid(*parts: object) -> str:
    h = digest(*parts).hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _instance_id(pool: Pool, node: str) -> str | None:
    if pool.provider == "aws":
        return "i-0" + digest(pool.key, node).hex()[:16]
    if pool.provider == "gcp":
        return str(10**18 + int.from_bytes(digest(pool.key, node)[:8], "big") % (9 * 10**18))
    if pool.provider == "azure":
        return (
            f"/subscriptions/{pool.account}/resourceGroups/{pool.resource_group}"
            f"/providers/Microsoft.Compute/virtualMachines/{node}"
        )
    return None


def build_fleet(scale: int = 1) -> list[DeviceSpec]:
    """Every device, pool by pool; ``scale`` copies each pool's nodes (incidents stay on the first copy)."""
    specs: list[DeviceSpec] = []
    for pool in POOLS:
        for replica in range(scale):
            for base in range(1, pool.nodes + 1):
                specs.extend(_node_devices(pool, base, replica))
    return specs


def _node_devices(pool: Pool, base: int, replica: int) -> list[DeviceSpec]:
    node = pool.node_name.format(n=base + replica * pool.nodes)
    instance_id = _instance_id(pool, node)
    absences = tuple(
        (block_of(a.day, a.start), block_of(a.day, a.start) + a.minutes * 60 // BLOCK_S)
        for a in ABSENCES
        if replica == 0 and (a.pool, a.node) == (pool.key, base)
    )
    frac = 0.0 if pool.provider else (digest(node)[0] / 256) * 0.5  # clouds report on the minute
    out = []
    for gpu in range(pool.gpus_per_node):
        uuid = "GPU-" + _uuid(pool.key, node, gpu)
        if pool.provider == "azure":
            device_id = f"{node}/gpu{gpu}"
        else:
            device_id = f"{instance_id}/gpu{gpu}" if instance_id else uuid
        gpu_info = DeviceInfo(
            device_id=device_id,
            environment=pool.environment,
            provider=pool.provider,
            account=pool.account,
            region=pool.region,
            cluster=pool.cluster,
            node=node,
            instance_id=instance_id,
            instance_type=pool.instance_type,
            gpu_model=pool.gpu.model,
            gpu_index=gpu,
        )
        resets = [
            block_of(day, hhmm)
            for key, n, g, day, hhmm in COUNTER_RESETS
            if replica == 0 and (key, n, g) == (pool.key, base, gpu)
        ]
        reset_block = resets[0] if resets else -1
        parts = MIG_LAYOUTS.get((pool.key, base, gpu))
        for mig, profile in enumerate(parts or (None,)):
            fraction, mem_b, metrics = 1.0, pool.gpu.mem_total_b, pool.metrics
            info_id, parent_id = device_id, None
            if profile is not None:
                slices, mem_mib = MIG_PROFILES[profile]
                fraction, mem_b, metrics = slices / 7, mem_mib * MIB, MIG
                info_id = "MIG-" + _uuid(uuid, mig)
                parent_id = uuid
            lanes = tuple(
                (p, p.nodes.index(base), replica)
                for p in PLACEMENTS
                if p.pool == pool.key
                and base in p.nodes
                and gpu in p.gpus
                and p.mig == (mig if profile is not None else None)
            )
            info = replace(
                gpu_info,
                device_id=info_id,
                parent_device_id=parent_id,
                mig_profile=profile,
                gpu_fraction=fraction,
                tdp_w=pool.gpu.tdp_w,  # the board's: the TCO estimate scales it by gpu_fraction itself
            )
            gpu_hw = pool.gpu
            out.append(
                DeviceSpec(
                    pool.key,
                    info,
                    metrics,
                    lanes,
                    gpu_hw.idle_w * fraction,
                    gpu_hw.ctx_w * fraction,
                    gpu_hw.tdp_w * fraction,
                    gpu_hw.temp_c_per_w / fraction,
                    mem_b,
                    frac,
                    absences,
                    reset_block,
                )
            )
    return out


def workload_info(spec: DeviceSpec, lane: int, job: int, cycle: int, seed: int) -> WorkloadInfo:
    """Who ran job ``job`` of ``lane`` on this device in cycle ``cycle``."""
    placement, rank, replica = spec.lanes[lane]
    name = placement.name if replica == 0 else f"{placement.name}-{replica}"  # copies made by ``scale``
    h = token(seed, placement.name, replica, cycle, job, n=8 if placement.key == DEPLOY else 5)
    key = placement.key.format(
        ns=placement.namespace,
        name=name,
        h=h,
        p=token(h, spec.info.device_id),
        rank=rank,
        instance=spec.info.instance_id,
    )
    workload = key.split("/")[1] if key.startswith("k8s:") else spec.info.node
    return WorkloadInfo(key, placement.project, placement.team, placement.user, placement.namespace, workload)
