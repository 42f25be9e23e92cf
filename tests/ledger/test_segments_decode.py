"""Day segments decoded side by side (``segments.DECODE_THREADS``) give what one by one gives.

A month's usage export decodes its 30 day segments in a small thread pool: the frames must be the
very same (values, Enum dictionaries, order of days), and so must the Arrow file an export writes
from them, byte for byte, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import io
import threading

import polars as pl
import pytest
from ledger_rows import at, rebuild_days, row
from sqlalchemy import Engine
from sqlmodel import Session

from service.analytics.access import ALL
from service.export.arguments import parse_args
from service.export.formats import Format
from service.export.questions import QUESTIONS, ExportContext, export_frame
from service.ledger import segments

DAYS = 5
COLUMNS = ["hour_index", "device_id", "project", "default_metric", "gpu_busy_s", "energy_j"]


@pytest.fixture
def month(engine: Engine) -> None:
    """Five days whose dictionaries differ (a device and a project join on day 2, one leaves on
    day 4), a folded device-hour (two workloads) on day 1."""
    rows = []
    for day in range(DAYS):
        devices = ["GPU-a", "GPU-b"] + (["GPU-c"] if 2 <= day < 4 else [])
        for h in range(0, 24, 5):
            for n, device in enumerate(devices):
                project = "beta" if day >= 2 and device == "GPU-c" else "alpha"
                rows.append(
                    row(day * 24 + h, device, f"job-{day}-{n}", project=project,
                        busy_s=60.0 * (day + n + h), idle_s=30.0, energy_j=1000.0 * (h + 1))
                )  # fmt: skip
    extra = row(24 + 5, "GPU-a", "job-x", project="alpha", busy_s=10.0, present_s=600.0, observed_s=600.0)
    rows.append(extra)
    with Session(engine) as session:
        session.add_all(rows)
        session.commit()
    rebuild_days(engine)


def _days() -> list[int]:
    first = int(at(0).timestamp()) // 86400
    return list(range(first, first + DAYS))


def _export(engine: Engine) -> bytes:
    params = {
        "start": [at(0).isoformat()],
        "end": [at(24 * DAYS).isoformat()],
        "granularity": ["HOUR"],
        "groupBy": ["DEVICE"],
    }
    question = QUESTIONS["usage"]
    args = parse_args(question, params, access=ALL, max_window_days=400)
    with engine.connect() as conn:
        frame = export_frame(conn, question, args, ExportContext(ledger_threshold_pct=5.0), max_rows=None)
    sink = io.BytesIO()
    Format.ARROW.write(frame, sink, compression="lz4")
    return sink.getvalue()


def test_side_by_side_decoding_gives_the_same_frames_and_export_bytes(
    engine: Engine, month: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    decode = segments.decode

    def recorded(data: bytes, columns: list[str] | None = None) -> pl.DataFrame:
        threads.append(threading.current_thread().name)
        return decode(data, columns)

    monkeypatch.setattr(segments, "decode", recorded)
    monkeypatch.setattr(segments, "DECODE_THREADS", 1)
    with engine.connect() as conn:
        one_by_one = list(segments.load(conn, _days(), COLUMNS))
    serial_export = _export(engine)
    assert threads and not any(t.startswith("segment-decode") for t in threads)

    threads.clear()
    monkeypatch.setattr(segments, "DECODE_THREADS", 4)
    with engine.connect() as conn:
        side_by_side = list(segments.load(conn, _days(), COLUMNS))
    parallel_export = _export(engine)
    assert threads and all(t.startswith("segment-decode") for t in threads)

    assert len(one_by_one) == len(side_by_side) == DAYS
    for a, b in zip(one_by_one, side_by_side, strict=True):
        assert a.schema == b.schema and a.equals(b)
    # in day order: each frame holds its own day's hours
    assert [f["hour_index"].to_list()[0] // 24 for f in side_by_side] == _days()
    # the days' dictionaries differ: GPU-c only on days 2 and 3
    assert [len(f.schema["device_id"].categories) for f in side_by_side] == [2, 2, 3, 3, 2]  # type: ignore[attr-defined]
    assert parallel_export == serial_export
    exported = pl.read_ipc_stream(io.BytesIO(parallel_export))
    assert exported.height == 2 * 5 * DAYS + 2 * 5  # GPU-c's two days; the folded hour is one row
    folded = exported.filter(pl.col("device") == "GPU-a", pl.col("period_start") == at(29))
    assert folded["effective_gpu_hours"].to_list() == [(60.0 * (1 + 0 + 5) + 10.0) / 3600]


def test_one_segment_is_decoded_in_the_calling_thread(
    engine: Engine, month: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    decode = segments.decode

    def recorded(data: bytes, columns: list[str] | None = None) -> pl.DataFrame:
        threads.append(threading.current_thread().name)
        return decode(data, columns)

    monkeypatch.setattr(segments, "decode", recorded)
    monkeypatch.setattr(segments, "DECODE_THREADS", 4)
    with engine.connect() as conn:
        (frame,) = segments.load(conn, _days()[:1], COLUMNS)
    assert threads == [threading.current_thread().name]
    assert frame.height == 2 * 5
