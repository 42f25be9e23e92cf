"""Running a vendor's command-line tool (``xpu-smi``, ``npu-smi``) for the node agent, and the
options its samplers share — standard library only: the agent must stay small (no pydantic, no
Polars; tests/agent/test_agent_imports.py).

A tool that is missing is a ``ConfigurationError`` naming it and the ``binary`` option; one that
exits non-zero, hangs past ``timeout_s`` or prints more than ``max_output_b`` is a
``RetriableError`` quoting the start of what it said. The agent logs either and tries again next
period; nothing here kills the agent.
"""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from connectors.sdk import ConfigurationError, RetriableError

ENVIRONMENTS = ("onprem", "aws", "gcp", "azure")
MAX_OUTPUT_B = 4 * 1024 * 1024  # a 64-device node prints ~20 KB


@dataclass(frozen=True, slots=True)
class SmiOptions:
    """``[agent.source_options]`` of a CLI sampler.

    ``binary``: the tool's path or name on PATH; ``timeout_s``: how long one call may take;
    ``node``: the node's name (default: the hostname); ``environment``/``region``/``cluster``:
    stamped on every device. ``name``/``type`` are the agent's.
    """

    name: str = "smi"
    type: str = ""
    binary: str = ""
    timeout_s: float = 10.0
    node: str = ""
    environment: str = "onprem"
    region: str | None = None
    cluster: str | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | SmiOptions, *, binary: str) -> SmiOptions:
        """Checked options from the agent's table: unknown keys and wrong types are errors naming
        the key."""
        if isinstance(raw, SmiOptions):
            return raw
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(
                f"unknown option(s) {', '.join(unknown)}; expected some of {', '.join(sorted(known))}"
            )
        values = dict(raw)
        for key in ("name", "type", "binary", "node"):
            if key in values and not isinstance(values[key], str):
                raise ValueError(f"{key}: expected a string, got {values[key]!r}")
        for key in ("region", "cluster"):
            if values.get(key) is not None and not isinstance(values[key], str):
                raise ValueError(f"{key}: expected a string, got {values[key]!r}")
        timeout = values.get("timeout_s", 10.0)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 300:
            raise ValueError(f"timeout_s: expected seconds in (0, 300], got {timeout!r}")
        if values.get("environment", "onprem") not in ENVIRONMENTS:
            raise ValueError(
                f"environment: expected one of {', '.join(ENVIRONMENTS)}, got {values['environment']!r}"
            )
        values["timeout_s"] = float(timeout)
        values["binary"] = values.get("binary") or binary
        values["node"] = values.get("node") or socket.gethostname()
        return cls(**values)


def run_tool(argv: list[str], timeout_s: float, max_output_b: int = MAX_OUTPUT_B) -> str:
    """The tool's standard output (and error, merged: these tools print errors on stdout), as text."""
    shown = " ".join(argv)
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
    except FileNotFoundError:
        raise ConfigurationError(f"{argv[0]}: not found (install it, or set binary = its path)") from None
    except OSError as exc:
        raise ConfigurationError(f"{argv[0]}: cannot run it: {exc.strerror or exc}") from None
    kept: list[bytes] = []
    seen = [0]

    def drain() -> None:  # keeps reading so the tool never blocks on a full pipe, keeps the first bytes
        assert proc.stdout is not None
        while chunk := proc.stdout.read1(65536):  # type: ignore[attr-defined]  # a BufferedReader
            if seen[0] <= max_output_b:
                kept.append(chunk[: max_output_b + 1 - seen[0]])
            seen[0] += len(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise RetriableError(f"`{shown}` did not finish in {timeout_s:g} s") from None
    finally:
        reader.join(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()
    if seen[0] > max_output_b:
        raise RetriableError(f"`{shown}` printed more than {max_output_b} bytes; not read")
    text = b"".join(kept).decode("utf-8", "replace")
    if code != 0:
        said = " ".join(text.split())[:200] or "nothing"
        raise RetriableError(f"`{shown}` exited with status {code}: {said}")
    return text
