"""glibc's heap between large batches: keep freed memory for the next one.

NumPy's arrays come from glibc's ``malloc``. By default glibc serves an allocation above a dynamic
threshold (128 KiB at first, raised up to 32 MiB to the largest block freed) with its own
``mmap`` and gives the heap's free top back to the kernel once it exceeds twice that threshold.
A normalization of a day's read (1.56 M samples: arrays of 12.5 MB, ~100 MB at once) frees more
than that at its end, so every batch grows the heap again and the kernel zeroes each page on its
first touch: measured 11,000 page faults and 18–50 ms of system time per normalization next to
~80 ms of user time, and most of the spread between runs (BENCHMARKS.md (k)). Polars' own
allocator keeps freed pages already (``service/__init__.py``); this does the same for glibc's.

What stays: at most ``KEEP_TOP_BYTES`` of free memory at the heap's top, beyond what the process
already reached at its peak (nothing is reserved that was not used); blocks above
``MMAP_THRESHOLD_BYTES`` are still mapped and returned at once. An operator's own glibc setting
(``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TOP_PAD_`` or a
``glibc.malloc`` tunable) wins: then nothing is changed.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's own ceiling for its dynamic threshold
KEEP_TOP_BYTES = 128 << 20
_M_TRIM_THRESHOLD = -1  # <malloc.h>
_M_MMAP_THRESHOLD = -3
_OPERATOR_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_")


def operator_setting(environ: dict[str, str] | os._Environ[str]) -> bool:
    """Whether the environment already tells glibc's malloc how to trim or map."""
    return any(name in environ for name in _OPERATOR_SETTINGS) or "glibc.malloc." in environ.get(
        "GLIBC_TUNABLES", ""
    )


@functools.cache
def keep_freed() -> bool:
    """Set glibc's thresholds once per process (see the module docstring); whether they were
    set — not on another C library or platform, nor over an operator's setting."""
    if not sys.platform.startswith("linux") or operator_setting(os.environ):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 — glibc only: musl's mallopt does nothing
    except (OSError, AttributeError):
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, KEEP_TOP_BYTES)
    )
