"""service/heap.py: glibc keeps a batch's freed arrays for the next one (fresh interpreters)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from service import heap

ROOT = Path(__file__).resolve().parents[1]

# Six 12 MiB arrays at once, freed, three times: how far the heap's top (the program break) falls
# each time they are freed. glibc's default gives the 72 MiB back after the first cycle (its
# dynamic trim threshold is then 24 MiB); kept, the break stays and the next cycle reuses it.
PROBE = """
import ctypes, sys
import numpy as np
libc = ctypes.CDLL("libc.so.6")
libc.sbrk.restype = ctypes.c_void_p
if sys.argv[1] == "keep":
    from service import heap
    print(heap.keep_freed())
for _ in range(3):
    arrays = [np.ones(12 << 17) for _ in range(6)]
    peak = libc.sbrk(0)
    del arrays
    print((peak - libc.sbrk(0)) >> 20)
"""

glibc_linux = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
    reason="glibc's malloc only",
)


def _probe(mode: str, **env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if not heap.operator_setting({k: v})}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        cwd=ROOT,
        env={**clean, **env},
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return out.split()


@glibc_linux
def test_freed_arrays_stay_in_the_heap() -> None:
    assert _probe("keep") == ["True", "0", "0", "0"]


@glibc_linux
def test_glibc_default_gives_them_back() -> None:
    # What keep_freed changes: without it the later cycles return their 72 MiB and fault them in again.
    assert _probe("default") == ["0", "72", "72"]


@glibc_linux
def test_an_operator_setting_wins() -> None:
    assert _probe("keep", MALLOC_TRIM_THRESHOLD_="1048576")[0] == "False"
    assert _probe("keep", GLIBC_TUNABLES="glibc.malloc.trim_threshold=1048576")[0] == "False"


def test_operator_setting() -> None:
    assert not heap.operator_setting({})
    assert not heap.operator_setting({"GLIBC_TUNABLES": "glibc.pthread.rseq=0", "MALLOC_ARENA_MAX": "2"})
    assert heap.operator_setting({"MALLOC_TOP_PAD_": "0"})
    assert heap.operator_setting({"MALLOC_MMAP_THRESHOLD_": "65536"})
    assert heap.operator_setting({"GLIBC_TUNABLES": "glibc.pthread.rseq=0:glibc.malloc.mmap_threshold=1"})
