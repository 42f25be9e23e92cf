"""Running a vendor's command-line tool (``xpu-smi``, ``npu-smi``, ``amd-smi``) for the node agent,
and what its samplers share (options, process attribution, sample rows) — standard library only:
the agent must stay small (no pydantic, no Polars; tests/agent/test_agent_imports.py).

A tool that is missing is a ``ConfigurationError`` naming it and the ``binary`` option; one that
exits non-zero, hangs past ``timeout_s`` or prints more than ``max_output_b`` is a
``RetriableError`` quoting the start of what it said (standard output, then error). The agent
logs either and tries again next period; nothing here kills the agent.
"""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import IO, Any, Protocol

from connectors.sdk import ConfigurationError, RetriableError, WorkloadInfo

ENVIRONMENTS = ("onprem", "aws", "gcp", "azure")
MAX_OUTPUT_B = 4 * 1024 * 1024  # a 64-device node prints ~20 KB


@dataclass(frozen=True, slots=True)
class SmiOptions:
    """``[agent.source_options]`` of a CLI sampler.

    ``binary``: the tool's path or name on PATH; ``timeout_s``: how long one call may take;
    ``node``: the node's name (default: the hostname); ``environment``/``region``/``cluster``:
    stamped on every device; ``processes``: attribute readings to the processes the tool lists
    (default true). ``name``/``type`` are the agent's.
    """

    name: str = "smi"
    type: str = ""
    binary: str = ""
    timeout_s: float = 10.0
    node: str = ""
    environment: str = "onprem"
    region: str | None = None
    cluster: str | None = None
    processes: bool = True

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | SmiOptions, *, binary: str) -> SmiOptions:
        """Checked options from the agent's table: unknown keys and wrong types are errors naming
        the key."""
        if isinstance(raw, SmiOptions):
            return raw
        try:
            return cls._checked(raw, binary)
        except ValueError as exc:
            raise ValueError(f"[agent.source_options] of the {binary} sampler: {exc}") from None

    @classmethod
    def _checked(cls, raw: Mapping[str, Any], binary: str) -> SmiOptions:
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
        if not isinstance(values.get("processes", True), bool):
            raise ValueError(f"processes: expected true or false, got {values['processes']!r}")
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


class Attributor(Protocol):
    def workload(self, pid: int) -> WorkloadInfo: ...


class ProcessWorkloads:
    """The distinct workloads of a device's processes, by the agent's attributor (else a
    ``ProcessAttributor`` made at the first process: its import is not needed without one)."""

    def __init__(self, attributor: Attributor | None) -> None:
        self._attributor = attributor

    def __call__(self, pids: list[int]) -> list[WorkloadInfo]:
        if pids and self._attributor is None:
            from connectors.attribution import ProcessAttributor

            self._attributor = ProcessAttributor()
        found: dict[str, WorkloadInfo] = {}
        for pid in pids:
            assert self._attributor is not None
            info = self._attributor.workload(pid)
            found.setdefault(info.workload_key, info)
        return list(found.values())


def add_readings(
    cols: dict[str, list[Any]],
    device_id: str,
    ts_ms: int,
    values: Mapping[str, float],
    holders: list[WorkloadInfo],
) -> None:
    """One device's readings as sample rows in ``cols``, split evenly between the workloads
    ``holders`` (none: one unattributed row a metric, share 1)."""
    for key, share in [(w.workload_key, 1.0 / len(holders)) for w in holders] or [("", 1.0)]:
        for metric, value in values.items():
            cols["device_id"].append(device_id)
            cols["ts_ms"].append(ts_ms)
            cols["metric"].append(metric)
            cols["value"].append(value)
            cols["workload_key"].append(key)
            cols["share"].append(share)


def run_tool(argv: list[str], timeout_s: float, max_output_b: int = MAX_OUTPUT_B) -> str:
    """The tool's standard output as text. Its standard error (warnings such as xpu-smi's "elevated
    privileges required", printed beside a good answer) is kept apart and quoted only when the
    tool fails; both are bounded."""
    shown = " ".join(argv)
    try:
        pipe = subprocess.PIPE
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=pipe, stderr=pipe)
    except FileNotFoundError:
        raise ConfigurationError(f"{argv[0]}: not found (install it, or set binary = its path)") from None
    except OSError as exc:
        raise ConfigurationError(f"{argv[0]}: cannot run it: {exc.strerror or exc}") from None
    out, err = _Drain(proc.stdout, max_output_b), _Drain(proc.stderr, 64 * 1024)
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise RetriableError(f"`{shown}` did not finish in {timeout_s:g} s") from None
    finally:
        out.close()
        err.close()
    if out.seen > max_output_b:
        raise RetriableError(f"`{shown}` printed more than {max_output_b} bytes; not read")
    text = out.text()
    if code != 0:
        said = " ".join((text + " " + err.text()).split())[:200] or "nothing"
        raise RetriableError(f"`{shown}` exited with status {code}: {said}")
    return text


class _Drain:
    """Reads a pipe to its end on a thread (so the tool never blocks on a full pipe), keeping the
    first ``limit`` + 1 bytes."""

    def __init__(self, stream: IO[bytes] | None, limit: int) -> None:
        self._stream, self._limit = stream, limit
        self._kept: list[bytes] = []
        self.seen = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if self._stream is None:
            return
        while chunk := self._stream.read1(65536):  # type: ignore[attr-defined]  # a BufferedReader
            if self.seen <= self._limit:
                self._kept.append(chunk[: self._limit + 1 - self.seen])
            self.seen += len(chunk)

    def close(self) -> None:
        self._thread.join(timeout=5)
        if self._stream is not None:
            self._stream.close()

    def text(self) -> str:
        return b"".join(self._kept).decode("utf-8", "replace")
