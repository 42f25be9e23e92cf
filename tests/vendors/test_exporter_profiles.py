"""The exporter-profile abstraction (connectors.exporter_profile): DCGM is one profile among others,
names are matched as each profile says, and a connector refuses a profile nobody registered."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from connectors import dcgm, exporter_profiles
from connectors.exporter_profile import Series
from connectors.prom_raw import stored_fields
from connectors.prometheus import PrometheusConfig


def _series(name: str) -> Series:
    return Series(name, {"UUID": "GPU-1"}, np.array([0], np.int64), np.array([1.0]))


def test_dcgm_is_the_default_profile_and_matches_names_in_any_case() -> None:
    config = PrometheusConfig(name="p", url="http://p")
    profile = config.exporter_profile()
    assert profile is dcgm.PROFILE and profile.vendor == "nvidia"
    assert profile.field_of("dcgm_fi_dev_gpu_util") == "DCGM_FI_DEV_GPU_UTIL"
    assert profile.field_of("DCGM_FI_DEV_GPU_UTIL") == "DCGM_FI_DEV_GPU_UTIL"
    assert profile.field_of("DCGM_FI_DEV_GPU_UTILX") is None
    assert profile.field_of("node_cpu_seconds_total") is None
    # the exporter's own spellings win over case variants stored beside them
    stored = ["dcgm_fi_dev_gpu_util", "DCGM_FI_DEV_GPU_UTIL", "up"]
    assert stored_fields(stored, profile) == ["DCGM_FI_DEV_GPU_UTIL"]
    assert stored_fields(["dcgm_fi_dev_gpu_util", "up"], profile) == ["dcgm_fi_dev_gpu_util"]
    assert config.stamp().exporter_pod_pattern == "dcgm-exporter"  # the profile's default


def test_a_prefix_is_dropped_and_other_names_are_not_the_profiles() -> None:
    profile = dcgm.PROFILE.with_prefix("site_")
    assert profile.stored_names[0] == "site_DCGM_FI_DEV_GPU_UTIL"
    assert profile.field_of("site_DCGM_FI_DEV_POWER_USAGE") == "DCGM_FI_DEV_POWER_USAGE"
    assert profile.field_of("DCGM_FI_DEV_POWER_USAGE") is None  # unprefixed: another exporter's
    renamed = profile.canonical([_series("site_dcgm_fi_dev_gpu_temp"), _series("other")])
    assert [s.field for s in renamed] == ["DCGM_FI_DEV_GPU_TEMP"]


def test_an_unknown_profile_or_a_bad_prefix_is_a_configuration_error() -> None:
    with pytest.raises(ValidationError, match="unknown exporter profile: one of dcgm"):
        PrometheusConfig(name="p", url="http://p", exporter="nvidia-smi")
    with pytest.raises(ValidationError, match="metric_prefix"):
        PrometheusConfig(name="p", url="http://p", metric_prefix='x"} or vector(1)')
    with pytest.raises(ValueError, match="unknown exporter profile 'x'"):
        exporter_profiles.profile("x")
    configured = PrometheusConfig(name="p", url="http://p", exporter_pod_pattern="")
    assert configured.stamp().exporter_pod_pattern == ""  # '' still turns the rule off
