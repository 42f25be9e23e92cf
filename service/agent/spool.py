"""The agent's spool: every reading is on disk before anything is sent, and sent in order.

Layout of ``spool_dir``:

* ``NEXT_SEQ`` — the next batch sequence number (written atomically; it survives restarts, so a
  batch id ``<agent_id>:<seq>`` is never reused even when the spool is empty).
* ``<seq:012d>.open`` — the batch being filled: a header line ``{"batch_id", "agent"}``, then one
  JSON line per sampling tick (columnar samples, devices, workloads), appended and fsync'd.
* ``<seq:012d>.batch`` — sealed batches (an atomic rename of the ``.open`` file), waiting to be
  shipped; deleted only after the service answered 2xx (a duplicate included).
* ``rejected/`` — batches the service refused (400, 409, 413, 422): kept for a person, never
  retried, never deleted by the agent.

Why one append-only file per batch whose name fixes its sequence number: a crash at any point
leaves either an ``.open`` file (sealed on restart, same id) or a ``.batch`` file (shipped on
restart, same id) — the service's idempotency by batch id then makes "nothing lost, nothing
counted twice" hold. A torn last line (crash mid-append) is skipped when the batch is read.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from connectors.sdk.metrics import SAMPLE_COLUMNS, SampleBatch

SEQ_FILE = "NEXT_SEQ"
COLUMNS = SAMPLE_COLUMNS


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    _fsync_dir(path.parent)


def tick_record(batch: SampleBatch) -> dict[str, Any]:
    """One tick as a spool line: readings without a usable value are dropped here (the ledger
    would reject them, and JSON has no NaN), null workload/share get their defaults.

    A tick is a few dozen readings; plain lists cost a tenth of a Polars query plan here, and the
    agent's CPU budget is 1 % of a core (measured on the H200: docs/h200-validation.md).
    """
    cols = batch.columns
    rows = zip(
        cols["device_id"], cols["ts_ms"], cols["metric"], cols["value"], cols["workload_key"], cols["share"],
        strict=True,
    )  # fmt: skip
    out: dict[str, list[Any]] = {name: [] for name in SAMPLE_COLUMNS}
    for device_id, ts_ms, metric, value, workload_key, share in rows:
        if device_id is None or ts_ms is None or metric is None or value is None or math.isnan(value):
            continue
        out["device_id"].append(device_id)
        out["ts_ms"].append(int(ts_ms))
        out["metric"].append(metric)
        out["value"].append(float(value))
        out["workload_key"].append(workload_key or "")
        out["share"].append(1.0 if share is None else float(share))
    return {
        "devices": [asdict(d) for d in batch.devices],
        "workloads": [asdict(w) for w in batch.workloads],
        "samples": out,
    }


class Spool:
    """Batches on disk in sequence order (see the module docstring)."""

    def __init__(self, directory: Path, agent_id: str, agent: str, *, fsync: bool = True):
        self.dir, self.agent_id, self.agent, self.fsync = Path(directory), agent_id, agent, fsync
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "rejected").mkdir(exist_ok=True)
        for tmp in self.dir.glob("*.tmp"):  # a write that never completed: its rename never happened
            tmp.unlink()
        self._open: Path | None = None
        for path in sorted(self.dir.glob("*.open")):  # a previous run's batch in progress
            self._seal(path)

    # --- sequence ---

    def _seqs(self) -> list[int]:
        return [
            int(p.stem) for p in self.dir.iterdir() if p.suffix in (".open", ".batch") and p.stem.isdigit()
        ]

    def next_seq(self) -> int:
        """The sequence number the next batch gets (never one used before)."""
        path = self.dir / SEQ_FILE
        stored = int(path.read_text().strip()) if path.exists() else 1
        return max([stored, *(s + 1 for s in self._seqs())])

    def batch_id(self, seq: int) -> str:
        return f"{self.agent_id}:{seq}"

    # --- writing ---

    def append(self, batch: SampleBatch) -> None:
        """Append one tick to the open batch (opening one first if needed), durably."""
        if self._open is None:
            seq = self.next_seq()
            _write_atomic(self.dir / SEQ_FILE, f"{seq + 1}\n".encode())
            self._open = self.dir / f"{seq:012d}.open"
            header = {"batch_id": self.batch_id(seq), "agent": self.agent}
            self._append_line(self._open, header)
            _fsync_dir(self.dir)
        self._append_line(self._open, tick_record(batch))

    def _append_line(self, path: Path, record: dict[str, Any]) -> None:
        with path.open("ab") as f:
            f.write(json.dumps(record, separators=(",", ":"), allow_nan=False).encode() + b"\n")
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())

    def seal(self) -> Path | None:
        """Close the open batch for shipping; None when nothing was appended since the last seal."""
        if self._open is None:
            return None
        path, self._open = self._open, None
        return self._seal(path)

    def _seal(self, path: Path) -> Path:
        sealed = path.with_suffix(".batch")
        path.replace(sealed)
        _fsync_dir(self.dir)
        return sealed

    # --- reading and retiring ---

    def pending(self) -> list[Path]:
        """Sealed batches, oldest first."""
        return sorted(self.dir.glob("*.batch"))

    def payload(self, path: Path) -> dict[str, Any]:
        """The wire body of a sealed batch (``service.push``): its ticks merged, columns joined."""
        header: dict[str, Any] | None = None
        columns: dict[str, list[Any]] = {c: [] for c in COLUMNS}
        devices: dict[str, dict[str, Any]] = {}
        workloads: dict[str, dict[str, Any]] = {}
        for line in path.read_bytes().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a torn last line: its tick was never completely written
            if header is None:
                header = record
                continue
            devices.update((d["device_id"], d) for d in record["devices"])
            workloads.update((w["workload_key"], w) for w in record["workloads"])
            for c in COLUMNS:
                columns[c].extend(record["samples"][c])
        if header is None:
            raise ValueError(f"{path}: no header line")
        return {**header, "devices": list(devices.values()), "workloads": list(workloads.values()),
                "samples": columns}  # fmt: skip

    def delete(self, path: Path) -> None:
        path.unlink(missing_ok=True)

    def quarantine(self, path: Path, reason: str) -> Path:
        target = self.dir / "rejected" / path.name
        path.replace(target)
        target.with_suffix(".reason").write_text(reason + "\n")
        return target
