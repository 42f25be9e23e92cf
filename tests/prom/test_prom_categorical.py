"""The Prometheus path hands normalization Categorical text columns, and the ledger is the same.

``connectors.dcgm.to_batch`` builds ``device_id``, ``metric`` and ``workload_key`` from per-series
codes (issue 13: no string hashed per sample). Here the same Prometheus answers — full GPUs with
a pod change and an outage, a time-shared GPU, a MIG GPU with two instances — are decoded as the
connector decodes them, and the batch goes through validation and normalization once as the
connector hands it over and once with those columns cast to String: the ledger rows must be
identical, bit for bit. The ingestor concatenates the batches of a day (and the context held
from the day before) whose dictionaries differ; that is done here too.
"""

from __future__ import annotations

import numpy as np
import orjson
import polars as pl
from polars.testing import assert_frame_equal

from connectors.dcgm import Series, Stamp, to_batch
from connectors.prom_decode import decode_matrix
from connectors.sdk import SAMPLE_COLUMNS, SAMPLE_TEXT_COLUMNS, sample_dtype_ok
from service.ledger.normalize import Window, normalize
from service.ledger.validate import validate_samples

H = 3_600_000
STEP = 60_000
T0 = 1_764_547_200_000  # 2025-12-01T00:00Z; windows below are relative to it
GPU = {"modelName": "NVIDIA H100 80GB HBM3", "Hostname": "node-1"}


def _pod(name: str) -> dict[str, str]:
    return {"pod": name, "namespace": "team-a", "container": "main"}


def _body(series: list[tuple[dict[str, str], np.ndarray, np.ndarray]]) -> bytes:
    """A matrix answer framed as Prometheus writes it (the decoder's fast path)."""
    parts = []
    for labels, ts_ms, values in series:
        pairs = ",".join(f'[{t / 1000:.3f},"{v:g}"]' for t, v in zip(ts_ms, values, strict=True))
        parts.append(b'{"metric":' + orjson.dumps(labels) + b',"values":[' + pairs.encode() + b"]}")
    return b'{"status":"success","data":{"resultType":"matrix","result":[' + b",".join(parts) + b"]}}"


def _answers(first_ms: int, end_ms: int) -> list[Series]:
    """The series of fields GPU_UTIL, POWER_USAGE, TOTAL_ENERGY_CONSUMPTION and FB_USED/FREE over
    ``[first_ms, end_ms)``, each field decoded from its own answer."""
    rng = np.random.default_rng(first_ms)
    ts = np.arange(first_ms, end_ms, STEP, dtype=np.int64) + T0
    outage = (ts - T0 < 100 * STEP) | (ts - T0 >= 110 * STEP)  # GPU-b stops reporting for 10 min
    change = T0 + 90 * STEP  # GPU-a's pod changes at 01:30
    mig_a = {**GPU, "UUID": "GPU-m", "GPU_I_ID": "1", "GPU_I_PROFILE": "3g.40gb", **_pod("m1")}
    mig_b = {**GPU, "UUID": "GPU-m", "GPU_I_ID": "2", "GPU_I_PROFILE": "4g.40gb", **_pod("m2")}
    holders: list[tuple[dict[str, str], np.ndarray]] = [
        ({**GPU, "UUID": "GPU-a", **_pod("p1")}, ts < change),
        ({**GPU, "UUID": "GPU-a", **_pod("p2")}, ts >= change),
        ({**GPU, "UUID": "GPU-b"}, outage),
        ({**GPU, "UUID": "GPU-s"}, ts == ts),  # time-shared: the device's own line and two pods
        ({**GPU, "UUID": "GPU-s", **_pod("s1"), "vgpu": "0"}, ts == ts),
        ({**GPU, "UUID": "GPU-s", **_pod("s2"), "vgpu": "1"}, ts == ts),
        (mig_a, ts == ts),
        (mig_b, ts == ts),
    ]
    fields = {
        "DCGM_FI_DEV_GPU_UTIL": lambda n: rng.integers(0, 101, n).astype(float),
        "DCGM_FI_DEV_POWER_USAGE": lambda n: np.round(rng.uniform(60, 700, n), 3),
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": lambda n: np.cumsum(rng.integers(1, 40_000_000, n)).astype(
            float
        ),
        "DCGM_FI_DEV_FB_USED": lambda n: rng.integers(0, 40_000, n).astype(float),
        "DCGM_FI_DEV_FB_FREE": lambda n: rng.integers(0, 40_000, n).astype(float),
    }
    found: list[Series] = []
    for name, values in fields.items():
        body = _body([(labels, ts[mask], values(int(mask.sum()))) for labels, mask in holders])
        matrix = decode_matrix(body)
        for i, labels in enumerate(matrix.labels):
            lo, hi = matrix.offsets[i], matrix.offsets[i + 1]
            found.append(Series(name, labels, matrix.ts_ms[lo:hi], matrix.values[lo:hi]))
    return found


def test_categorical_columns_from_prometheus_give_the_string_ledger() -> None:
    window = Window(start_ms=T0 + H, end_ms=T0 + 3 * H, max_gap_ms=2 * STEP, presence_gap_ms=H)
    # Two reads (the second has no pod p1, so the dictionaries differ): the day's batches,
    # concatenated as the ingestor does.
    batches = [to_batch(_answers(0, 2 * H), Stamp()), to_batch(_answers(2 * H, 4 * H), Stamp())]
    for batch in batches:
        schema = batch.samples.schema
        assert all(schema[c] == pl.Categorical() for c in SAMPLE_TEXT_COLUMNS)
        assert all(sample_dtype_ok(c, schema[c]) for c in SAMPLE_COLUMNS)
    devices = sorted({d.device_id for b in batches for d in b.devices})
    assert devices == ["GPU-a", "GPU-b", "GPU-s", "MIG-GPU-m-1", "MIG-GPU-m-2"]
    categorical = pl.concat([b.samples for b in batches], how="vertical_relaxed")
    assert categorical.schema["device_id"] == pl.Categorical()
    strings = categorical.with_columns(pl.col(SAMPLE_TEXT_COLUMNS).cast(pl.String))

    def ledger(samples: pl.DataFrame) -> pl.DataFrame:
        checked = validate_samples(samples, devices)
        assert checked.rejected == 0
        return normalize(checked.accepted, window)

    expected = ledger(strings)
    assert expected.height > 0
    assert set(expected["device_id"].to_list()) == set(devices)
    assert {"k8s:team-a/p1/main", "k8s:team-a/p2/main", "k8s:team-a/s1/main", ""} <= set(
        expected["workload_key"].to_list()
    )
    assert_frame_equal(ledger(categorical), expected, check_exact=True)
    # A String batch beside Categorical ones (another connector's, or the empty context) too.
    mixed = pl.concat([batches[0].samples, strings.slice(batches[0].samples.height)], how="vertical_relaxed")
    assert_frame_equal(ledger(mixed), expected, check_exact=True)
