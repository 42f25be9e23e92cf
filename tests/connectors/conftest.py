"""Fixtures the NVML sampler tests share: the fake libnvidia-ml.so.1 variants (compiled once a
session) and a fake bound to the full one, serving this test's state file."""

from __future__ import annotations

from pathlib import Path

import pytest
from nvml.fake_nvml_lib import FakeNvml, make_fake, session_libs


@pytest.fixture(scope="session")
def nvml_libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return session_libs(tmp_path_factory)


@pytest.fixture
def fake_nvml(nvml_libs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    return make_fake(nvml_libs["full"], tmp_path, monkeypatch)
