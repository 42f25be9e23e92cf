"""Hostile and broken push bodies: each gets its exact answer, and nothing is written.

Every case starts from a service that already holds one batch (``host1:1``) and the connector's
watermark, sends one body with the agent's valid token, and asserts the HTTP status, the
``code``, the ``field`` named, a fragment of the message, and that ``pushed_batch``,
``pushed_sample``, ``pushed_device``, ``pushed_workload`` and ``connector_state`` are unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from push_client import NOW, NOW_MS, batch, counts, post, push_client
from sqlalchemy import Engine, insert, select

from service.models import ConnectorState, PushedSample
from service.push_batch import MAX_COMMAS, MAX_DEVICES, MAX_SAMPLES

MB10 = "x" * 10_000_000


def good(seq: int = 2) -> dict[str, Any]:
    return batch(seq=seq, n=3)


def with_(path: str, value: Any, body: dict[str, Any] | None = None) -> Callable[[], bytes]:
    """``good()`` with the value at dotted ``path`` replaced (json.dumps writes NaN/Infinity)."""

    def build() -> bytes:
        b = body if body is not None else good()
        *parents, last = path.split(".")
        node: Any = b
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        node[int(last) if last.isdigit() else last] = value
        return json.dumps(b).encode()

    return build


def edit(change: Callable[[dict[str, Any]], None]) -> Callable[[bytes], bytes] | Callable[[], bytes]:
    def build() -> bytes:
        b = good()
        change(b)
        return json.dumps(b).encode()

    return build


def raw(data: bytes) -> Callable[[], bytes]:
    return lambda: data


def _repeat_row(b: dict[str, Any]) -> None:
    b["samples"]["ts_ms"][2] = b["samples"]["ts_ms"][0]


def _reuse_id(b: dict[str, Any]) -> None:
    b["batch_id"], b["samples"]["value"][0] = "host1:1", 1.0


def _million_devices() -> bytes:
    device = b'{"device_id":"G","environment":"onprem"}'  # 39 MiB in all: under the body limit
    head, tail = json.dumps(good()).encode().split(b'"devices": [', 1)
    return head + b'"devices": [' + b",".join([device] * 1_000_000) + b"," + tail


def _comma_bomb() -> bytes:
    return (
        b'{"batch_id":"host1:2","agent":"node-a","devices":[],"samples":{"value":['
        + b"0," * MAX_COMMAS
        + b"0]}}"
    )


def _nested(depth: int) -> bytes:
    b = good()
    b["workloads"][0]["team"] = "NEST"
    return json.dumps(b).encode().replace(b'"NEST"', b"[" * depth + b"]" * depth)


CASES: list[tuple[str, Callable[[], bytes], int, str, str]] = [
    # (id, body, status, field, message fragment)
    ("nan-value", with_("samples.value.1", float("nan")), 400, "samples.value.1", "finite number"),
    ("inf-share", with_("samples.share.0", float("inf")), 400, "samples.share.0", "finite number"),
    ("neg-inf-tdp", with_("devices.0.tdp_w", float("-inf")), 400, "devices.0.tdp_w", "finite number"),
    ("nan-gpu-fraction", with_("devices.0.gpu_fraction", float("nan")), 400, "devices.0.gpu_fraction",
     "finite number"),
    ("1e400", lambda: json.dumps(good()).replace("[0.0,", "[1e400,").encode(), 400, "samples.value.0",
     "finite number"),
    ("value-1e16", with_("samples.value.0", 1e16), 400, "samples.value.0",
     "less than or equal to 1000000000000000"),
    ("ts-zero", with_("samples.ts_ms.0", 0), 400, "samples.ts_ms.0",
     "0 (1970-01-01T00:00:00Z) is before 2000-01-01"),
    ("ts-negative", with_("samples.ts_ms.1", -86_400_000), 400, "samples.ts_ms.1", "is before 2000-01-01"),
    ("ts-future", with_("samples.ts_ms.2", NOW_MS + 2 * 3_600_000), 400, "samples.ts_ms.2",
     "is more than 1 h after the service's clock"),
    ("ts-year-33658", with_("samples.ts_ms.0", 10**15), 400, "samples.ts_ms.0", "is more than 1 h after"),
    ("ts-beyond-int64", with_("samples.ts_ms.0", 10**30), 400, "samples.ts_ms.0", "is more than 1 h after"),
    ("ts-older-than-backfill", with_("samples.ts_ms.0", NOW_MS - 2 * 86_400_000), 400, "samples.ts_ms.0",
     'older than backfill_days = 1 of agent connector "node-a"'),
    ("ts-string", with_("samples.ts_ms.0", "1757462400000"), 400, "samples.ts_ms.0", "valid integer"),
    ("ts-float", with_("samples.ts_ms.0", 1.7574624e12), 400, "samples.ts_ms.0", "valid integer"),
    ("lengths-differ", edit(lambda b: b["samples"]["value"].append(1.0)), 400, "samples",
     "samples.value has 4 values, device_id has 3"),
    ("too-many-samples", with_("samples.share", [1.0] * (MAX_SAMPLES + 1)), 400, "samples.share",
     f"at most {MAX_SAMPLES} items"),
    ("comma-bomb", _comma_bomb, 400, "body", "holds more values than a batch may"),
    ("a-million-devices", _million_devices, 400, "body", "holds more values than a batch may"),
    ("too-many-devices", with_("devices", [{"device_id": f"G{i}", "environment": "onprem"}
                                           for i in range(MAX_DEVICES + 1)]),
     400, "devices", f"at most {MAX_DEVICES} items"),
    ("10MB-gpu-model", with_("devices.0.gpu_model", MB10), 400, "devices.0.gpu_model",
     "at most 100 characters"),
    ("10MB-workload-key", with_("samples.workload_key.1", MB10), 400, "samples.workload_key.1",
     "longer than 500 characters"),
    ("10MB-team", with_("workloads.0.team", MB10), 400, "workloads.0.team", "at most 200 characters"),
    ("nul-device-id", with_("devices.0.device_id", "GPU-1\x00"), 400, "devices.0.device_id",
     "control characters"),
    ("newline-in-key", with_("samples.workload_key.0", "k8s:ns/p\nFAKE LOG LINE"), 400,
     "samples.workload_key.0", "control characters"),
    ("nul-batch-id", with_("batch_id", "host\x001:2"), 400, "batch_id", "should match pattern"),
    ("unknown-metric", with_("samples.metric.0", "gpu_utilization"), 400, "samples.metric.0",
     "Input should be 'gpu_util'"),
    ("negative-share", with_("samples.share.1", -0.5), 400, "samples.share.1", "greater than or equal to 0"),
    ("share-above-1", with_("samples.share.2", 1.5), 400, "samples.share.2", "less than or equal to 1"),
    ("gpu-index-2e40", with_("devices.0.gpu_index", 2**40), 400, "devices.0.gpu_index",
     "less than or equal to 65535"),
    ("gpu-fraction-zero", with_("devices.0.gpu_fraction", 0.0), 400, "devices.0.gpu_fraction",
     "greater than 0"),
    ("repeated-reading", edit(_repeat_row), 400, "samples.ts_ms.2", "row 2 repeats row 0"),
    ("device-twice", edit(lambda b: b["devices"].append({"device_id": "GPU-1", "environment": "aws"})), 400,
     "devices.1.device_id", "'GPU-1' repeats devices.0"),
    ("workload-twice", edit(lambda b: b["workloads"].append({"workload_key": "k8s:ns/p/c"})), 400,
     "workloads.1.workload_key", "repeats workloads.0"),
    ("undescribed-device", with_("samples.device_id.0", "GPU-9"), 400, "samples.device_id.0",
     "'GPU-9' is not in devices"),
    ("nested-1000", lambda: _nested(1000), 400, "body", "recursion limit exceeded"),
    ("json-string", raw(b'"x"'), 400, "body", "Input should be an object"),
    ("json-null", raw(b"null"), 400, "body", "Input should be an object"),
    ("json-array", raw(b"[]"), 400, "body", "Input should be an object"),
    ("empty-body", raw(b""), 400, "body", "EOF while parsing"),
    ("invalid-utf8", raw(b'{"batch_id": "\xff"}'), 400, "body", "invalid unicode code point"),
    ("lone-surrogate", raw(b'{"batch_id": "\\ud800\\u0041"}'), 400, "body", "lone leading surrogate"),
    ("extra-key", with_("extra", 1), 400, "extra", "Extra inputs are not permitted"),
    ("replayed-id-other-content", edit(_reuse_id), 409, "batch_id",
     "batch_id: host1:1 was stored before with other content"),
]  # fmt: skip


# Refusals happen before the database is touched, so every case runs on SQLite; on PostgreSQL (half
# a second of table truncation per test) the cases it would have stored differently or failed on
# with a 500 before the checks: NaN (a float8 value there), NUL, over-long strings, 2⁴⁰, the 409.
ON_POSTGRES = {"nan-value", "nul-device-id", "10MB-gpu-model", "10MB-workload-key", "gpu-index-2e40",
               "ts-beyond-int64", "replayed-id-other-content"}  # fmt: skip
PARAMS = [pytest.param("sqlite", *c[1:], id=f"sqlite-{c[0]}") for c in CASES] + [
    pytest.param("postgres", *c[1:], id=f"postgres-{c[0]}", marks=pytest.mark.postgres)
    for c in CASES
    if c[0] in ON_POSTGRES
]


@pytest.mark.parametrize(("db_url", "body", "status", "field", "fragment"), PARAMS, indirect=["db_url"])
def test_push_corpus(
    engine: Engine, body: Callable[[], bytes], status: int, field: str, fragment: str
) -> None:
    with engine.begin() as conn:
        conn.execute(
            insert(ConnectorState.__table__),
            [{"name": "node-a", "type": "agent", "status": "OK", "watermark": NOW}],
        )
    with push_client(engine, backfill_days=1) as client:
        assert post(client, batch(seq=1, n=3)).status_code == 200
        before = counts(engine)
        r = post(client, body())
    assert r.status_code == status, r.text[:500]
    answer = r.json()
    assert answer["code"] == ("BATCH_ID_CONFLICT" if status == 409 else "INVALID_BATCH")
    assert answer["field"] == field
    assert fragment in answer["error"] and answer["error"].startswith(f"{field}: ")
    assert counts(engine) == before
    with engine.connect() as conn:
        assert conn.execute(select(PushedSample.__table__.c.value).order_by("row_no")).scalars().all() == [
            0.0,
            10.0,
            20.0,
        ]
        assert conn.execute(select(ConnectorState.__table__.c.watermark)).scalar_one() == NOW


def test_the_corpus_is_large_enough() -> None:
    names = [c[0] for c in CASES]
    assert len(names) >= 18 and len(set(names)) == len(names) and set(names) >= ON_POSTGRES
