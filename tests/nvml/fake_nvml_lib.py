"""The fake ``libnvidia-ml.so.1`` (``fake_nvml.c``) for tests: build, load, drive.

* ``build_fake_libs(dir)`` compiles two variants with gcc: ``full`` and ``nogpm`` (no GPM symbols:
  pynvml raises ``NVMLError_FunctionNotFound``, as with a pre-Hopper driver). Each lands in its
  own folder as ``libnvidia-ml.so.1``, so a subprocess can also load it through
  ``LD_LIBRARY_PATH`` exactly as pynvml loads the real one (``CDLL("libnvidia-ml.so.1")``).
* ``load_pynvml(lib)`` gives a private copy of the real pynvml module whose documented global
  ``nvmlLib`` is the fake, set before its first ``nvmlInit`` (``_LoadNvmlLibrary`` keeps a loaded
  library). Private copies let both variants live in one test process without touching the
  ``pynvml`` every other test imports.
* ``make_fake(lib, tmp_path, monkeypatch)`` points ``$FAKE_NVML_STATE`` at a fresh state file;
  its ``FakeNvml`` writes the state file the library re-reads (atomically: a new inode each time) and
  reads the library's call counters.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pynvml
import pytest

SOURCE = Path(__file__).with_name("fake_nvml.c")
TRACES = Path(__file__).with_name("h200")
VARIANTS = {"full": [], "nogpm": ["-DNO_GPM"]}


@functools.cache
def build_fake_libs(out_dir: Path) -> dict[str, Path]:
    """Compile every variant into ``out_dir/<variant>/libnvidia-ml.so.1`` (once per process)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed: cannot build the fake libnvidia-ml.so.1")
    libs = {}
    for variant, flags in VARIANTS.items():
        lib = out_dir / variant / "libnvidia-ml.so.1"
        lib.parent.mkdir(parents=True, exist_ok=True)
        cmd = [gcc, "-O2", "-Wall", "-shared", "-fPIC", "-Wl,-soname,libnvidia-ml.so.1"]
        subprocess.run([*cmd, "-Wl,-Bsymbolic", *flags, "-o", str(lib), str(SOURCE)], check=True)
        libs[variant] = lib
    return libs


@functools.cache
def load_pynvml(lib: Path) -> ModuleType:
    """A fresh copy of pynvml bound to ``lib`` (its own error classes and function cache)."""
    name = f"_pynvml_fake_{lib.parent.name}"
    spec = importlib.util.spec_from_file_location(name, pynvml.__file__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # pynvml builds its error classes through sys.modules[__name__]
    spec.loader.exec_module(module)
    module.nvmlLib = ctypes.CDLL(str(lib))
    return module


class FakeNvml:
    """One fake NVML: the pynvml copy bound to it, and its state file."""

    def __init__(self, nvml: ModuleType, state_path: Path) -> None:
        self.nvml = nvml
        self.state_path = state_path
        self._calls = nvml.nvmlLib.fake_nvml_calls
        self._calls.restype = ctypes.c_long
        self._calls.argtypes = [ctypes.c_char_p]
        self._base: dict[str, int] = {}

    def write(self, state: dict[str, Any]) -> None:
        """Replace the state the library serves; the next NVML call sees it."""
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text("".join(f"{key}={value}\n" for key, value in state.items()))
        os.replace(tmp, self.state_path)

    def calls(self, symbol: str) -> int:
        """Calls of ``symbol`` since this FakeNvml was made (the counters are per process)."""
        return self._calls(symbol.encode()) - self._base.get(symbol, 0)

    def reset_calls(self, *symbols: str) -> None:
        self._base = {s: self._calls(s.encode()) for s in symbols}


def session_libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The compiled variants under the session's base temp dir (compiled on the first call)."""
    return build_fake_libs(tmp_path_factory.getbasetemp() / "fake_nvml_build")


def make_fake(lib: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    """A fake bound to ``lib``, serving ``tmp_path/nvml.state`` (no devices at first)."""
    state_path = tmp_path / "nvml.state"
    monkeypatch.setenv("FAKE_NVML_STATE", str(state_path))
    fake = FakeNvml(load_pynvml(lib), state_path)
    fake.write({"count": 0})
    return fake
