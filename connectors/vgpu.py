"""Virtual GPUs as fractions of the physical GPU: MIG slices, NVIDIA vGPU profiles, HAMi and MPS.

Pure functions, no Polars or pydantic: the node agent (``connectors.nvml``) and the Prometheus /
dcgm-exporter path (``connectors.dcgm``) share them, so a MIG instance costs the same fraction
whichever path saw it (docs/virtual-gpus.md).

* **MIG**: a profile's leading ``Ng`` (``1g.6gb``) is N compute slices; a compute instance
  inside a GPU instance (``1c.2g.10gb``) holds its ``Nc``. The GPU has 7 slices (A100, H100,
  H200, B200, GH200), 4 on an A30 and the RTX PRO 6000 Blackwell. NVML says both exactly
  (``mig_device_slices_from_nvml``, ``mig_gpu_slices_from_nvml``); names are the fallback.
* **NVIDIA vGPU** (the hypervisor's virtual GPU types): ``A100-4C`` / ``GRID A100-4C`` is a
  time-sliced 4 GB vGPU of a 40 GB A100 → 4/40; ``A100-3-20C`` is MIG-backed, 3 slices → 3/7.
* **HAMi** (Kubernetes vGPU scheduler): its pod annotation ``hami.io/vgpu-devices-allocated``
  names each container's GPU UUID, MiB and core percentage; its device plugin puts the core
  percentage into the container as ``CUDA_DEVICE_SM_LIMIT``.
* **MPS**: a client started with ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=p`` may use p % of the SMs.

A capped workload (HAMi cores, MPS percentage) holds its cap as its share of the GPU while it is
present, as a MIG slice holds its fraction (``capped_shares``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Compute slices of a whole GPU where it is not 7 (NVIDIA MIG user guide, "Supported MIG
#: Profiles": A30 1g.6gb = 1/4; RTX PRO 6000 Blackwell: up to 4 instances).
_FOUR_SLICE_MODELS = re.compile(r"\bA30\b|RTX PRO 6000", re.IGNORECASE)
DEFAULT_MIG_SLICES = 7
#: ``[Nc.]Ng.<mem>gb[+me|-me|+gfx…]``, alone or at the end of a MIG device name
#: ("NVIDIA A30 MIG 1g.6gb").
_MIG_PROFILE = re.compile(r"(?:(?P<c>\d+)c\.)?(?P<g>\d+)g\.\d+gb(?:[+-][a-z0-9]+)*", re.IGNORECASE)


def mig_slices_total(model: str | None) -> int:
    """Compute slices of a whole GPU of ``model``: 4 on an A30 (and RTX PRO 6000), else 7."""
    return 4 if model and _FOUR_SLICE_MODELS.search(model) else DEFAULT_MIG_SLICES


def mig_profile_of(name: str | None) -> str | None:
    """The MIG profile inside a device name or label (``NVIDIA A30 MIG 1g.6gb`` → ``1g.6gb``)."""
    match = _MIG_PROFILE.search(name or "")
    return match.group(0) if match else None


def mig_profile_slices(profile: str | None) -> int | None:
    """Compute slices a profile holds: ``3g.40gb`` → 3, ``1c.2g.10gb`` → 1; None if no profile."""
    match = _MIG_PROFILE.search(profile or "")
    if match is None:
        return None
    return int(match.group("c") or match.group("g"))


def mig_fraction(profile: str | None, model: str | None, total_slices: int | None = None) -> float:
    """Compute slices of a MIG profile over the GPU's: ``3g.40gb`` → 3/7, ``1g.6gb`` of an A30 → 1/4.

    ``total_slices`` where the source knows it (NVML); else by ``model``. No profile → 1.0."""
    slices = mig_profile_slices(profile)
    if slices is None:
        return 1.0
    total = total_slices if total_slices and total_slices > 0 else mig_slices_total(model)
    return min(1.0, slices / total)


def mig_device_slices_from_nvml(nvml: Any, mig: Any) -> int | None:
    """Compute slices of the MIG device ``mig`` from NVML (``nvmlDeviceGetAttributes``:
    ``computeInstanceSliceCount`` — a compute instance may hold fewer slices than its GPU
    instance), or None where the driver refuses (then the caller falls back to the name)."""
    try:
        attrs = nvml.nvmlDeviceGetAttributes(mig)
    except nvml.NVMLError:
        return None
    return int(attrs.computeInstanceSliceCount or attrs.gpuInstanceSliceCount) or None


def mig_gpu_slices_from_nvml(nvml: Any, parent: Any) -> int | None:
    """The GPU's compute slices: the largest ``sliceCount`` of the GPU-instance profiles it offers
    (``nvmlDeviceGetGpuInstanceProfileInfo`` for every ``NVML_GPU_INSTANCE_PROFILE_*``: 7 on an
    H100, 4 on an A30); None where the driver refuses them all."""
    best = 0
    for profile in range(int(getattr(nvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0))):
        try:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(parent, profile)
        except nvml.NVMLError:  # a profile this GPU does not offer (NotSupported, InvalidArgument)
            continue
        best = max(best, int(info.sliceCount))
    return best or None


# -- NVIDIA vGPU (hypervisor virtual GPU types) --------------------------------------------------

#: ``[GRID |NVIDIA ]<board>-[<slices>-]<GB><series>``: the board (``A100``, ``A100D``, ``H100L``,
#: ``RTXPro6000D``…), MIG slices for a MIG-backed type, the frame buffer in GB, the series letter.
_VGPU = re.compile(
    r"^(?:GRID |NVIDIA )?(?P<board>[A-Za-z][A-Za-z0-9]*?)-(?:(?P<slices>\d+)-)?(?P<gb>\d+)(?P<series>[ABCQ])$"
)
#: Frame buffer (GB) of the boards NVIDIA names vGPU types after, for time-sliced types when the
#: caller does not pass the physical GPU's memory. ``D`` boards are the 80 GB A100s etc.
VGPU_BOARD_GB: Mapping[str, int] = {
    "A100": 40, "A100D": 80, "A100DX": 80, "A100X": 80, "A30": 24, "A30X": 24, "A40": 48, "A10": 24,
    "A16": 16, "A2": 16, "H100": 80, "H100D": 80, "H100L": 94, "H100XM": 80, "H200": 141,
    "H200X": 141, "H20": 96, "H800": 80, "L4": 24, "L40": 48, "L40S": 48, "L20": 48, "T4": 16,
    "V100": 16, "V100D": 32, "V100DX": 32, "V100L": 16, "V100S": 32, "B200": 180,
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class VgpuProfile:
    """A parsed vGPU type name and the fraction of the physical GPU it holds."""

    board: str
    framebuffer_gb: int
    series: str
    mig_slices: int | None
    fraction: float


def vgpu_profile(name: str, board_memory_gb: float | None = None) -> VgpuProfile | None:
    """``GRID A100-4C`` → 4 GB of a 40 GB A100: 1/10; ``A100-3-20C`` (MIG-backed) → 3/7;
    ``A30-1-6C`` → 1/4. ``board_memory_gb``: the physical GPU's memory where known (it wins
    over the board table). None for a name that is not a vGPU type or a board not known."""
    match = _VGPU.match(name.strip())
    if match is None:
        return None
    board, gb, series = match.group("board"), int(match.group("gb")), match.group("series")
    if match.group("slices") is not None:
        slices = int(match.group("slices"))
        total = mig_slices_total(board)
        return VgpuProfile(board, gb, series, slices, min(1.0, slices / total)) if slices else None
    memory = board_memory_gb or VGPU_BOARD_GB.get(board) or VGPU_BOARD_GB.get(board.upper())
    if not memory or gb <= 0:
        return None
    return VgpuProfile(board, gb, series, None, min(1.0, gb / memory))


# -- HAMi ----------------------------------------------------------------------------------------

HAMI_ALLOCATED_ANNOTATION = "hami.io/vgpu-devices-allocated"
HAMI_SM_LIMIT_ENV = "CUDA_DEVICE_SM_LIMIT"
MPS_PERCENTAGE_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
_MAX_ANNOTATION = 64 * 1024


class HamiAnnotationError(ValueError):
    """A malformed ``hami.io/vgpu-devices-allocated`` value (the message names the entry)."""


@dataclass(frozen=True, slots=True)
class HamiDevice:
    """One GPU a HAMi container holds: its UUID, HAMi's device type, MiB and core percentage."""

    container_index: int
    uuid: str
    device_type: str
    memory_mib: int
    cores_pct: int

    def fraction(self, total_cores: int = 100) -> float | None:
        """The share of the GPU: cores / the GPU's core total (100 unless HAMi's
        ``deviceCoreScaling`` raised it); None for 0 cores (no cap: HAMi's default)."""
        return core_fraction(self.cores_pct, total_cores)


def core_fraction(cores: float, total_cores: float = 100.0) -> float | None:
    """A HAMi core allocation as a share of its GPU: ``cores / total_cores``, at most 1; None for 0
    cores (HAMi's ``defaultCores``: no cap) or no total. The agent (the pod annotation) and the
    Prometheus path (the scheduler's ``hami_vgpu_core_allocated_ratio``) both price by it."""
    if cores <= 0 or total_cores <= 0:
        return None
    return min(1.0, cores / total_cores)


def parse_hami_devices(value: str) -> list[HamiDevice]:
    """HAMi's pod annotation: containers split by ``;``, a container's GPUs by ``:``, each GPU
    ``UUID,Type,MiB,cores`` (HAMi ``EncodePodSingleDevice``); e.g.
    ``GPU-8d…,NVIDIA,4000,30:;`` is container 0 with 4000 MiB and 30 % of the cores."""
    if len(value) > _MAX_ANNOTATION:
        raise HamiAnnotationError(
            f"{HAMI_ALLOCATED_ANNOTATION}: {len(value)} characters (at most {_MAX_ANNOTATION})"
        )
    out: list[HamiDevice] = []
    containers = value.split(";")
    if containers and containers[-1] == "":  # the encoder ends every container with ';'
        containers.pop()
    for index, container in enumerate(containers):
        for entry in container.split(":"):
            if entry == "":
                continue
            fields = entry.split(",")
            if len(fields) < 4:
                raise HamiAnnotationError(
                    f"{HAMI_ALLOCATED_ANNOTATION}: container {index}: {entry[:80]!r}: "
                    "want UUID,Type,MiB,cores"
                )
            uuid, kind, mem, cores = (f.strip() for f in fields[:4])
            if not uuid or not mem.isdigit() or not cores.isdigit():
                raise HamiAnnotationError(
                    f"{HAMI_ALLOCATED_ANNOTATION}: container {index}: {entry[:80]!r}: "
                    "UUID must be set, MiB and cores whole numbers"
                )
            out.append(HamiDevice(index, uuid, kind, int(mem), int(cores)))
    return out


def percentage_from_environ(environ: bytes) -> tuple[str, float] | None:
    """(variable, fraction) of a process's SM cap from its ``/proc/<pid>/environ`` bytes:
    ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` (MPS) first, else ``CUDA_DEVICE_SM_LIMIT`` (HAMi).
    None when neither is set to a number in (0, 100); 100 is no cap at all."""
    found: dict[str, bytes] = {}
    for item in environ.split(b"\0"):
        key, sep, raw = item.partition(b"=")
        if sep and key in (b"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", b"CUDA_DEVICE_SM_LIMIT"):
            found[key.decode()] = raw
    for variable in (MPS_PERCENTAGE_ENV, HAMI_SM_LIMIT_ENV):
        value = found.get(variable)
        if value is None:
            continue
        try:
            pct = float(value.decode("ascii", "replace").strip())
        except ValueError:
            continue
        if 0 < pct < 100:
            return variable, pct / 100.0
    return None


def capped_shares(
    capped: Mapping[str, float], measured: Mapping[str, float], uncapped: Sequence[str]
) -> tuple[dict[str, float], float]:
    """Shares of one device at one reading: each capped workload holds its cap; what the caps
    leave goes to the ``uncapped`` workloads by ``measured`` weight (evenly when none reads
    above 0); with no uncapped workload it stays unallocated. Caps adding to more than 1 are
    scaled down to add to 1, and uncapped workloads beside caps taking the whole GPU get no share
    (they are not listed). Returns (shares, the unallocated rest)."""
    shares = {key: max(0.0, cap) for key, cap in capped.items()}
    total = sum(shares.values())
    if total > 1.0:
        shares = {key: cap / total for key, cap in shares.items()}
        total = 1.0
    rest = 1.0 - total
    if not uncapped or rest <= 0:
        return shares, max(0.0, rest)
    weights = {key: max(0.0, measured.get(key, 0.0)) for key in uncapped}
    weight = sum(weights.values())
    for key in uncapped:
        shares[key] = rest * (weights[key] / weight if weight > 0 else 1.0 / len(uncapped))
    return shares, 0.0
