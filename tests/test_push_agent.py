"""The agent's shipper against the real push endpoint: a refused batch is kept, never lost."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import polars as pl
import structlog
from push_client import NOW, NOW_MS, counts, post, push_client
from sqlalchemy import Engine

from connectors.base import SAMPLE_SCHEMA, DeviceInfo, SampleBatch
from service.agent.ship import Shipper
from service.agent.spool import Spool


def _spool(tmp_path: Path, batches: int, start_ms: int) -> Spool:
    spool = Spool(tmp_path / "spool", "host1", "node-a", fsync=False)
    for b in range(batches):
        samples = pl.DataFrame(
            {"device_id": ["GPU-1"], "ts_ms": [start_ms + b * 60_000], "metric": ["gpu_util"],
             "value": [50.0], "workload_key": [""], "share": [1.0]},
            schema=SAMPLE_SCHEMA,
        )  # fmt: skip
        spool.append(SampleBatch(samples, [DeviceInfo("GPU-1", "onprem")], []))
        spool.seal()
    return spool


def test_a_reused_batch_id_is_quarantined_loudly_and_the_next_batch_ships(
    engine: Engine, tmp_path: Path
) -> None:
    spool = _spool(tmp_path, 2, NOW_MS - 600_000)
    with push_client(engine) as client:
        first = spool.payload(spool.pending()[0])
        first["samples"]["value"] = [51.0]  # the service already holds host1:1, with other content
        assert post(client, first).status_code == 200
        with structlog.testing.capture_logs() as logs:
            result = Shipper(client, "/api/v1/batches", "a" * 32).ship(spool)
    assert (result.shipped, result.rejected, result.failed) == (1, 1, False)
    assert spool.pending() == []
    kept = tmp_path / "spool" / "rejected" / "000000000001.batch"
    assert kept.exists()  # nothing is lost: the readings stay on the node for a person
    reason = kept.with_suffix(".reason").read_text()
    assert reason.startswith("HTTP 409: ") and "BATCH_ID_CONFLICT" in reason
    errors = [e["event"] for e in logs if e["log_level"] == "error"]
    assert errors[0] == "batch rejected by the service; quarantined"
    assert errors[1].startswith("batch id reused: the service stored other content under it")
    assert counts(engine)["pushed_batch"] == 2


def test_a_batch_older_than_backfill_is_quarantined_with_the_reason(engine: Engine, tmp_path: Path) -> None:
    spool = _spool(tmp_path, 1, NOW_MS - 2 * 86_400_000)  # the node was cut off for two days
    with push_client(engine, NOW, backfill_days=1) as client:
        result = Shipper(client, "/api/v1/batches", "a" * 32).ship(spool)
    assert (result.shipped, result.rejected) == (0, 1)
    reason = (tmp_path / "spool" / "rejected" / "000000000001.reason").read_text()
    assert reason.startswith("HTTP 400: ") and '"field":"samples.ts_ms.0"' in reason
    assert "raise backfill_days" in reason
    # Raised, the same file is accepted when a person moves it back into the spool.
    (tmp_path / "spool" / "rejected" / "000000000001.batch").rename(tmp_path / "spool" / "000000000001.batch")
    with push_client(engine, NOW + dt.timedelta(minutes=1), backfill_days=3) as client:
        assert Shipper(client, "/api/v1/batches", "a" * 32).ship(spool).shipped == 1
