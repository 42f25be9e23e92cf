"""A file built once per test run and shared by every xdist worker (a demo database, say)."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path

import pytest


def built_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """The run's one ``name``, written by ``build(path)``: the first worker to ask builds it under a
    file lock while the others wait, then all read it (copy it before writing to it). Under xdist
    each worker's base folder lies in the run's own, which the workers share."""
    base = factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    target = shared / name
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not target.exists():
                partial = target.with_suffix(".partial")
                partial.unlink(missing_ok=True)
                build(partial)
                partial.rename(target)  # whole or not at all: a killed build leaves no template
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target
