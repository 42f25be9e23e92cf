"""Push defects of issue 9: NaN/Infinity, a reused batch id, sample times, the watermark's floor."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from typing import Any

import pytest
from push_client import NOW, NOW_MS, batch, counts, post, push_client
from sqlalchemy import Engine, insert, select, update
from sqlalchemy.exc import IntegrityError

from service.models import ConnectorState, PushedBatch, PushedSample
from service.push import store_batch
from service.push_batch import BatchIn, content_sha256, parse_batch
from service.timeutil import from_ms

EMPTY = {
    "pushed_batch": 0,
    "pushed_sample": 0,
    "pushed_device": 0,
    "pushed_workload": 0,
    "connector_state": 0,
}


def _set(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    *parents, last = path.split(".")
    node: Any = body
    for key in parents:
        node = node[int(key)] if key.isdigit() else node[key]
    node[int(last) if last.isdigit() else last] = value
    return body


# --- 1. NaN and ±Infinity: refused naming the field, never "duplicate" ---------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("samples.value.1", float("nan")),
        ("samples.value.2", float("inf")),
        ("samples.share.0", float("-inf")),
        ("devices.0.gpu_fraction", float("nan")),
        ("devices.0.tdp_w", float("inf")),
    ],
)
def test_nan_and_infinity_are_refused_naming_the_field(engine: Engine, field: str, value: float) -> None:
    with push_client(engine) as client:
        r = post(client, _set(batch(), field, value))  # json.dumps writes NaN / Infinity literals
        assert r.status_code == 400, r.text
        assert r.json() == {
            "error": f"{field}: Input should be a finite number",
            "field": field,
            "code": "INVALID_BATCH",
        }
        assert counts(engine) == EMPTY
        assert post(client, batch()).json()["duplicate"] is False  # the id was never taken


def test_a_huge_exponent_is_infinity_too(engine: Engine) -> None:
    body = json.dumps(batch()).replace('"value": [0.0,', '"value": [1e400,').encode()
    with push_client(engine) as client:
        r = post(client, body)
    assert (r.status_code, r.json()["field"]) == (400, "samples.value.0")


def test_an_integrity_error_is_never_read_as_a_duplicate(engine: Engine) -> None:
    # Past the checks nothing but a concurrent push of the same id may break a constraint; should
    # something else, it is an error to see, not a batch to acknowledge (and lose).
    good = parse_batch(json.dumps(batch()).encode())
    twice = BatchIn.model_construct(**{**dict(good), "devices": good.devices * 2})  # skips the checks
    with pytest.raises(IntegrityError):
        store_batch(engine, twice, NOW)
    assert counts(engine) == EMPTY


# --- 2. a batch id replayed: same content → duplicate, other content → 409 -----------------------


def test_replay_with_the_same_content_in_other_bytes_is_a_duplicate(engine: Engine) -> None:
    body = batch()
    respelled = json.dumps(dict(reversed(list(body.items()))), indent=2).replace("700.0", "700").encode()
    with push_client(engine) as client:
        assert post(client, body).json()["duplicate"] is False
        r = post(client, respelled)
    assert (r.status_code, r.json()) == (200, {"batch_id": "host1:1", "duplicate": True, "samples": 3})
    assert counts(engine)["pushed_sample"] == 3


def test_replay_with_other_content_is_a_conflict(engine: Engine) -> None:
    other = batch()
    other["samples"]["value"][2] = 99.0
    with push_client(engine) as client:
        assert post(client, batch()).status_code == 200
        before = counts(engine)
        r = post(client, other)
        metrics = client.app.state.telemetry.render().decode()  # type: ignore[attr-defined]
    assert r.status_code == 409
    assert r.json()["code"] == "BATCH_ID_CONFLICT" and r.json()["field"] == "batch_id"
    assert r.json()["error"].startswith("batch_id: host1:1 was stored before with other content")
    assert counts(engine) == before
    with engine.connect() as conn:
        values = conn.execute(select(PushedSample.__table__.c.value).order_by("row_no")).scalars().all()
    assert values == [0.0, 10.0, 20.0]  # the first content stands
    assert 'gpu_ledger_push_batches_total{agent="node-a",outcome="conflict"} 1.0' in metrics


def test_a_batch_stored_before_content_hashes_replays_as_a_duplicate(engine: Engine) -> None:
    other = batch()
    other["samples"]["value"][2] = 99.0
    with push_client(engine) as client:
        assert post(client, batch()).status_code == 200
        with engine.begin() as conn:  # as migration 0002 left it
            conn.execute(update(PushedBatch.__table__).values(content_sha256=None))
        r = post(client, other)
    assert (r.status_code, r.json()["duplicate"]) == (200, True)


def test_the_content_hash_is_stored(engine: Engine) -> None:
    with push_client(engine) as client:
        assert post(client, batch()).status_code == 200
    with engine.connect() as conn:
        stored = conn.execute(select(PushedBatch.__table__.c.content_sha256)).scalar_one()
    assert stored == content_sha256(parse_batch(json.dumps(batch()).encode()))


@pytest.mark.parametrize("db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
@pytest.mark.parametrize(("same", "outcome"), [(True, "duplicate"), (False, "conflict")])
def test_a_concurrent_push_of_the_same_id_is_decided_by_looking_it_up(
    engine: Engine, same: bool, outcome: str
) -> None:
    # The test holds the batch row uncommitted; the push's INSERT waits on it, then breaks the
    # primary key once the test commits: the IntegrityError path, made deterministic.
    theirs = parse_batch(json.dumps(batch()).encode())
    sha = content_sha256(theirs) if same else "0" * 64
    result: list[str] = []
    with engine.connect() as holder:
        tx = holder.begin()
        holder.execute(
            insert(PushedBatch.__table__),
            [{"batch_id": "host1:1", "agent": "node-a", "received_at": NOW, "content_sha256": sha}],
        )
        pusher = threading.Thread(target=lambda: result.append(store_batch(engine, theirs, NOW)))
        pusher.start()
        time.sleep(0.3)  # the push is now blocked on the row's lock
        assert result == []
        tx.commit()
        pusher.join(10)
    assert result == [outcome]
    assert counts(engine)["pushed_sample"] == 0


# --- 3. sample times: 2000-01-01 ≤ ts ≤ now + 1 h --------------------------------------------------


@pytest.mark.parametrize(
    ("ts_ms", "fragment"),
    [
        (0, "0 (1970-01-01T00:00:00Z) is before 2000-01-01"),
        (-1, "-1 (1969-12-31T23:59:59.999000Z) is before 2000-01-01"),
        (946_684_799_999, "is before 2000-01-01"),
        (NOW_MS + 3_600_001, "is more than 1 h after the service's clock"),
        (10**30, "1000000000000000000000000000000 is more than 1 h after"),
    ],
)
def test_sample_times_out_of_bounds_are_refused_naming_the_row(
    engine: Engine, ts_ms: int, fragment: str
) -> None:
    body = batch(n=3)
    body["samples"]["ts_ms"][2] = ts_ms
    with push_client(engine, backfill_days=10_000) as client:  # the 2000 floor, not the backfill's
        r = post(client, body)
    assert (r.status_code, r.json()["field"], r.json()["code"]) == (400, "samples.ts_ms.2", "INVALID_BATCH")
    assert fragment in r.json()["error"]
    assert counts(engine) == EMPTY


def test_the_bounds_themselves_are_accepted(engine: Engine) -> None:
    body = batch(n=2)
    body["samples"]["ts_ms"] = [946_684_800_000, NOW_MS + 3_600_000]
    with push_client(engine, backfill_days=10_000) as client:
        assert post(client, body).status_code == 200


# --- 4. the watermark never moves back past backfill_days ------------------------------------------


def _watermark(engine: Engine, at: dt.datetime | None = None) -> dt.datetime | None:
    table = ConnectorState.__table__
    with engine.begin() as conn:
        if at is not None:
            conn.execute(
                insert(table), [{"name": "node-a", "type": "agent", "status": "OK", "watermark": at}]
            )
        return conn.execute(select(table.c.watermark)).scalar_one()


def test_a_late_batch_within_backfill_rewinds_the_watermark(engine: Engine) -> None:
    _watermark(engine, NOW)
    start_ms = NOW_MS - 23 * 3_600_000  # 23 h late, backfill_days = 1
    with push_client(engine, backfill_days=1) as client:
        assert post(client, batch(start_ms=start_ms)).status_code == 200
    assert _watermark(engine) == from_ms(start_ms) + dt.timedelta(hours=1)  # + presence gap


@pytest.mark.parametrize("start_ms", [NOW_MS - 24 * 3_600_000 - 1, NOW_MS - 30 * 86_400_000, 0])
def test_a_batch_older_than_backfill_is_refused_and_moves_nothing(engine: Engine, start_ms: int) -> None:
    _watermark(engine, NOW)
    body = batch(n=2, start_ms=NOW_MS - 600_000)
    body["samples"]["ts_ms"][1] = start_ms
    with push_client(engine, backfill_days=1) as client:
        r = post(client, body)
    assert (r.status_code, r.json()["field"]) == (400, "samples.ts_ms.1")
    if start_ms > 0:
        assert 'older than backfill_days = 1 of agent connector "node-a" allows' in r.json()["error"]
        assert "raise backfill_days and send the batch again" in r.json()["error"]
    assert _watermark(engine) == NOW
    assert counts(engine) == {**EMPTY, "connector_state": 1}


def test_the_backfill_edge_is_accepted(engine: Engine) -> None:
    _watermark(engine, NOW)
    with push_client(engine, backfill_days=1) as client:
        assert post(client, batch(start_ms=NOW_MS - 24 * 3_600_000)).status_code == 200
    assert _watermark(engine) == NOW - dt.timedelta(hours=23)


def test_a_huge_backfill_setting_still_stops_at_2000(engine: Engine) -> None:
    # now − 10⁹ days is no datetime: the floor is 2000-01-01, not an OverflowError on every push.
    _watermark(engine, NOW)
    body = batch(n=2)
    body["samples"]["ts_ms"][1] = 946_684_799_999
    with push_client(engine, backfill_days=1e9) as client:
        r = post(client, body)
        assert (r.status_code, r.json()["field"]) == (400, "samples.ts_ms.1")
        assert "is before 2000-01-01" in r.json()["error"]
        assert post(client, batch(start_ms=946_684_800_000)).status_code == 200
    assert _watermark(engine) == from_ms(946_684_800_000) + dt.timedelta(hours=1)


def test_storing_clamps_the_rewind_at_backfill(engine: Engine) -> None:
    # store_batch holds the line itself too, whatever a caller checked: a batch 30 days old
    # (bypassing check_batch) moves the watermark back to now − backfill_days, no further.
    _watermark(engine, NOW)
    old = parse_batch(json.dumps(batch(start_ms=NOW_MS - 30 * 86_400_000)).encode())
    assert store_batch(engine, old, NOW, 3600.0, backfill_days=2) == "stored"
    assert _watermark(engine) == NOW - dt.timedelta(days=2)


# --- 5. accepted on purpose: out-of-range readings and undescribed workloads -------------------------


def test_out_of_range_readings_and_unknown_workloads_are_harmless(engine: Engine) -> None:
    # A sensor's bad reading is the ledger's to refuse, one by one, while the batch's good ones go
    # on; an undescribed workload key is ledgered without project or team, like any unattributed use.
    from service.agent_source import AgentConfig, AgentConnector
    from service.ledger.ingest import ingest_window
    from service.models import LedgerHour, Rejection

    body = batch(n=4)
    body["samples"]["value"] = [-5.0, 150.0, 40.0, 40.0]
    body["samples"]["workload_key"] = ["k8s:ns/p/c", "k8s:ns/p/c", "k8s:ns/p/c", "k8s:nobody/x/y"]
    with push_client(engine) as client:
        assert post(client, body).status_code == 200
    connector = AgentConnector(AgentConfig(name="node-a", token="a" * 32), engine=engine, clock=lambda: NOW)
    start = from_ms(body["samples"]["ts_ms"][0])
    result = ingest_window(engine, "node-a", connector, start, NOW, clock=lambda: NOW)
    assert (result.samples_read, result.samples_rejected) == (4, 2)
    with engine.connect() as conn:
        reasons = conn.execute(select(Rejection.__table__.c.reason)).scalars().all()
        ledger = conn.execute(select(LedgerHour.__table__.c.workload_key, LedgerHour.__table__.c.team)).all()
    assert sorted(r.split(" (")[0] for r in reasons) == ["utilization outside 0–100 %"] * 2
    assert sorted(ledger) == [("k8s:nobody/x/y", None), ("k8s:ns/p/c", "research")]


@pytest.mark.parametrize("order", [(10.0, 90.0), (90.0, 10.0)])
def test_a_reading_sent_twice_under_two_batch_ids_keeps_the_largest_value(
    engine: Engine, order: tuple[float, float]
) -> None:
    # Within a batch a repeated reading is refused; across batches (a node whose spool lost its
    # sequence under a new agent_id) both are stored, and the connector must not keep an
    # arbitrary one: the ledger's rule (the largest value wins) holds whatever arrived first.
    from service.agent_source import AgentConfig, AgentConnector

    with push_client(engine) as client:
        for agent_id, value in zip(("host1", "host2"), order, strict=True):
            body = batch(n=1)
            body["batch_id"], body["samples"]["value"] = f"{agent_id}:1", [value]
            assert post(client, body).status_code == 200
    connector = AgentConnector(AgentConfig(name="node-a", token="a" * 32), engine=engine, clock=lambda: NOW)
    (got,) = connector.collect(NOW - dt.timedelta(hours=2), NOW)
    assert got.samples["value"].to_list() == [90.0]


def test_samples_are_stored_exactly(engine: Engine) -> None:
    # COPY on PostgreSQL goes through CSV text: floats, quotes, commas and '' must come back as sent.
    body = batch(n=4)
    body["devices"][0]["device_id"] = 'GPU-"1",x'
    body["workloads"] = [{"workload_key": 'k8s:a,"b"/c'}]
    body["samples"].update(
        device_id=['GPU-"1",x'] * 4,
        value=[0.1 + 0.2, 1e15, -0.0, 1 / 3],
        workload_key=['k8s:a,"b"/c', "", 'k8s:a,"b"/c', ""],
        share=[0.25, 1.0, 0.0, 1e-300],
    )
    with push_client(engine) as client:
        assert post(client, body).status_code == 200
    table = PushedSample.__table__
    columns = [table.c[c] for c in ("device_id", "ts_ms", "metric", "value", "workload_key", "share")]
    with engine.connect() as conn:
        stored = conn.execute(select(*columns).order_by(table.c.row_no)).all()
    s = body["samples"]
    assert [tuple(r) for r in stored] == list(
        zip(s["device_id"], s["ts_ms"], s["metric"], s["value"], s["workload_key"], s["share"], strict=True)
    )


def test_a_batch_without_attribution_facts_hashes_as_before_facts_existed() -> None:
    # Pinned from the tree before issue 16 added `tags`/`facts`: a batch an older agent spooled and
    # replays after the service's upgrade must stay a duplicate, not become a conflict.
    assert content_sha256(parse_batch(json.dumps(batch()).encode())) == (
        "d0b4fe03b6bcdcb6970fcf603fc4aa5cc23913dcd7d0fb8d0d40f24030841f58"
    )
    with_facts = batch()
    with_facts["workloads"][0]["facts"] = {"k8s.namespace_label:team": "vision"}
    assert content_sha256(parse_batch(json.dumps(with_facts).encode())) != content_sha256(
        parse_batch(json.dumps(batch()).encode())
    )
    with_vendor = batch()
    with_vendor["devices"][0]["vendor"] = "amd"  # a sampler that names its vendor: new content
    assert content_sha256(parse_batch(json.dumps(with_vendor).encode())) != content_sha256(
        parse_batch(json.dumps(batch()).encode())
    )
