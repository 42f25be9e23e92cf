"""connectors.vgpu: MIG slice counts, NVIDIA vGPU types, HAMi annotations, MPS/HAMi caps, shares."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connectors.vgpu import (
    HamiAnnotationError,
    HamiDevice,
    capped_shares,
    mig_fraction,
    mig_profile_of,
    mig_profile_slices,
    mig_slices_total,
    parse_hami_devices,
    percentage_from_environ,
    vgpu_profile,
)


def test_mig_slices_by_model_and_profile() -> None:
    assert mig_slices_total("NVIDIA A30") == 4
    assert mig_slices_total("NVIDIA RTX PRO 6000 Blackwell Server Edition") == 4
    assert mig_slices_total("NVIDIA H100 80GB HBM3") == 7
    assert mig_slices_total("NVIDIA A300") == 7  # not an A30
    assert mig_slices_total(None) == 7
    assert mig_fraction("1g.6gb", "NVIDIA A30") == 1 / 4
    assert mig_fraction("2g.12gb+me", "NVIDIA A30") == 2 / 4
    assert mig_fraction("1g.10gb", "NVIDIA H100 80GB HBM3") == 1 / 7
    assert mig_fraction("3g.71gb", "NVIDIA H200") == 3 / 7
    assert mig_fraction("1c.3g.40gb", "NVIDIA A100-SXM4-80GB") == 1 / 7  # a compute instance: its 1 slice
    assert mig_fraction("1g.5gb", None, total_slices=8) == 1 / 8  # what NVML counted wins
    assert mig_fraction("7g.80gb", "NVIDIA H100") == 1.0
    assert mig_fraction("9g.99gb", "NVIDIA A30") == 1.0  # never above the whole GPU
    assert mig_fraction(None, "NVIDIA A30") == 1.0
    assert mig_fraction("not-a-profile", "NVIDIA A30") == 1.0
    assert mig_profile_of("NVIDIA A30 MIG 1g.6gb") == "1g.6gb"
    assert mig_profile_of("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me") == "1g.10gb+me"
    assert mig_profile_of("NVIDIA H100 80GB HBM3") is None
    assert mig_profile_slices("1c.2g.20gb") == 1


@pytest.mark.parametrize(
    ("name", "memory_gb", "fraction", "slices"),
    [
        ("GRID A100-4C", None, 4 / 40, None),  # 4 GB of a 40 GB A100
        ("NVIDIA A100-4C", None, 4 / 40, None),
        ("A100D-20C", None, 20 / 80, None),  # D: the 80 GB A100
        ("A100D-80C", None, 1.0, None),
        ("A100-3-20C", None, 3 / 7, 3),  # MIG-backed: 3 of 7 slices
        ("A30-1-6C", None, 1 / 4, 1),  # MIG-backed on an A30: 1 of 4
        ("H100-10C", 80.0, 10 / 80, None),
        ("L40S-12Q", None, 12 / 48, None),
        ("A16-2B", 16.0, 2 / 16, None),
        ("H100-10C", 94.0, 10 / 94, None),  # the physical GPU's memory wins over the table
    ],
)
def test_vgpu_profiles(name: str, memory_gb: float | None, fraction: float, slices: int | None) -> None:
    profile = vgpu_profile(name, memory_gb)
    assert profile is not None
    assert profile.fraction == pytest.approx(fraction, rel=1e-12)
    assert profile.mig_slices == slices


@pytest.mark.parametrize(
    "name", ["", "A100", "GRID A100-4X", "ZZ9000-4C", "A100-0-0C", "A100-4C; DROP TABLE"]
)
def test_not_a_vgpu_type(name: str) -> None:
    assert vgpu_profile(name) is None


def test_hami_annotation_as_hami_encodes_it() -> None:
    # EncodePodSingleDevice: each container's devices end in ':', each container in ';' — a
    # container without GPUs is an empty entry, so indices follow the pod's containers.
    value = (
        "GPU-8d8b6a4c-7d8e-4c61-9d5e-0a1b2c3d4e5f,NVIDIA,4000,30:;"
        ";"
        "GPU-11111111-2222-3333-4444-555555555555,NVIDIA,20000,0:GPU-66666666-7777-8888-9999-000000000000,NVIDIA,1024,100:;"
    )
    assert parse_hami_devices(value) == [
        HamiDevice(0, "GPU-8d8b6a4c-7d8e-4c61-9d5e-0a1b2c3d4e5f", "NVIDIA", 4000, 30),
        HamiDevice(2, "GPU-11111111-2222-3333-4444-555555555555", "NVIDIA", 20000, 0),
        HamiDevice(2, "GPU-66666666-7777-8888-9999-000000000000", "NVIDIA", 1024, 100),
    ]
    devices = parse_hami_devices(value)
    assert [d.fraction() for d in devices] == [0.3, None, 1.0]  # 0 cores: no cap (HAMi's default)
    assert devices[0].fraction(total_cores=200) == 0.15  # deviceCoreScaling 2
    assert parse_hami_devices("") == []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("GPU-a,NVIDIA,4000:;", "container 0: 'GPU-a,NVIDIA,4000': want UUID,Type,MiB,cores"),
        (";GPU-a,NVIDIA,lots,30:;", "container 1: 'GPU-a,NVIDIA,lots,30': UUID must be set"),
        (",NVIDIA,1,30:;", "UUID must be set"),
        ("GPU-a,NVIDIA,1,-30:;", "MiB and cores whole numbers"),
        ("x" * 70_000, "70000 characters (at most 65536)"),
    ],
)
def test_hami_annotation_refused_with_reason(value: str, message: str) -> None:
    with pytest.raises(HamiAnnotationError, match="hami.io/vgpu-devices-allocated") as err:
        parse_hami_devices(value)
    assert message in str(err.value)


def test_caps_from_a_process_environment() -> None:
    env = b"PATH=/usr/bin\0CUDA_DEVICE_SM_LIMIT=30\0HOME=/root\0"
    assert percentage_from_environ(env) == ("CUDA_DEVICE_SM_LIMIT", 0.3)
    both = b"CUDA_DEVICE_SM_LIMIT=30\0CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=70\0"
    assert percentage_from_environ(both) == ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", 0.7)
    assert percentage_from_environ(b"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=12.5") == (
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
        0.125,
    )
    for env in (b"", b"CUDA_DEVICE_SM_LIMIT=100", b"CUDA_DEVICE_SM_LIMIT=0", b"CUDA_DEVICE_SM_LIMIT=abc",
                b"CUDA_DEVICE_SM_LIMIT=-5", b"CUDA_DEVICE_SM_LIMIT=\xff\xfe", b"XCUDA_DEVICE_SM_LIMIT=30",
                b"CUDA_DEVICE_SM_LIMIT=nan", b"CUDA_DEVICE_SM_LIMIT=inf"):  # fmt: skip
        assert percentage_from_environ(env) is None, env


def test_capped_shares_by_hand() -> None:
    # A HAMi pod at 30 % alone: it holds 0.3, the rest is nobody's.
    assert capped_shares({"hami": 0.3}, {}, []) == ({"hami": 0.3}, pytest.approx(0.7))
    # MPS clients at 70 and 30: all of it.
    assert capped_shares({"a": 0.7, "b": 0.3}, {}, []) == ({"a": 0.7, "b": 0.3}, 0.0)
    # Caps adding to 1.3 are scaled to add to 1.
    shares, rest = capped_shares({"a": 0.7, "b": 0.6}, {}, [])
    assert shares == {"a": pytest.approx(0.7 / 1.3), "b": pytest.approx(0.6 / 1.3)} and rest == 0.0
    # A 40 % cap and two uncapped processes measured at 30 and 10: they split the 60 % 3:1.
    shares, rest = capped_shares({"c": 0.4}, {"u1": 30.0, "u2": 10.0}, ["u1", "u2"])
    assert shares == {"c": 0.4, "u1": pytest.approx(0.45), "u2": pytest.approx(0.15)} and rest == 0.0
    # Nothing measured: evenly.
    assert capped_shares({}, {}, ["u1", "u2"]) == ({"u1": 0.5, "u2": 0.5}, 0.0)


@given(
    st.dictionaries(st.text(min_size=1, max_size=3), st.floats(0, 1.5), max_size=4),
    st.dictionaries(st.text(min_size=1, max_size=3), st.floats(0, 100), max_size=4),
)
def test_capped_shares_add_to_one(capped: dict[str, float], measured: dict[str, float]) -> None:
    uncapped = [k for k in measured if k not in capped]
    shares, rest = capped_shares(capped, measured, uncapped)
    left = 1.0 - min(1.0, sum(capped.values()))
    # An uncapped workload shares only what the caps leave: none of a GPU they reserve whole.
    assert set(shares) == set(capped) | (set(uncapped) if left > 0 else set())
    assert all(0.0 <= v <= 1.0 + 1e-12 for v in shares.values()) and 0.0 <= rest <= 1.0
    assert sum(shares.values()) + rest == pytest.approx(1.0)
    if uncapped:
        assert rest == 0.0
