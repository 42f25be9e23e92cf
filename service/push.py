"""``POST /api/v1/batches``: node agents push sample batches into the staging tables.

Wire format (JSON, ``Content-Type: application/json``, ``Authorization: Bearer <token>``)::

    {"batch_id": "<agent-id>:<seq>",           # unique per batch; a replay is acknowledged, not stored
     "agent": "gpu-node-17",                   # the `agent` connector's name (the token must be its)
     "devices": [{"device_id": "GPU-…", "environment": "onprem", …DeviceInfo fields}],
     "workloads": [{"workload_key": "…", …WorkloadInfo fields}],
     "samples": {"device_id": [...], "ts_ms": [...], "metric": [...], "value": [...],
                 "workload_key": [...], "share": [...]}}   # columnar, equal lengths, SAMPLE_SCHEMA units

Answers: 200 ``{"batch_id", "duplicate": false, "samples": n}`` when stored; 200 with
``"duplicate": true`` for a batch id already stored with the same content (nothing is stored
twice); 409 ``{"error", "field": "batch_id", "code": "BATCH_ID_CONFLICT"}`` for a batch id stored
with other content; 400 ``{"error", "field", "code": "INVALID_BATCH"}`` naming the first bad field
(``service.push_batch`` says what is refused: NaN/Infinity, times before 2000, more than 1 h
ahead or older than ``backfill_days``, sizes, repeats); 401 without a bearer token (or a
revoked/expired one); 403 for a token no agent connector has, or one that is not the named
agent's; 413 over
``[limits] max_push_body_b`` (``service.limits.body``, chunked bodies too).
Tokens: a ``push:CONNECTOR`` API token, or (deprecated, one more release) the connector's
configured ``token`` key (``service.auth.push_callers``). The batch row and its
samples are written in one transaction; devices and workloads are upserted in it too, and a batch
older than the agent connector's watermark moves the watermark back, never past now −
``backfill_days`` (see ``_rewind_watermark``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from typing import Any, Literal
from weakref import WeakKeyDictionary

import polars as pl
from prometheus_client import Counter
from sqlalchemy import Engine, and_, delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from connectors.base import SAMPLE_SCHEMA, ConnectorConfig
from service.agent_source import AgentConfig
from service.auth.push_callers import PushRefusal, push_caller, refuse_agent
from service.dbtypes import table_of
from service.models import ConnectorState, PushedBatch, PushedDevice, PushedSample, PushedWorkload
from service.push_batch import BadBatch, BatchIn, backfill_start, check_batch, content_sha256, parse_batch
from service.telemetry import Telemetry
from service.timeutil import from_ms

ROUTE = "/api/v1/batches"
Clock = Callable[[], dt.datetime]


class PushMetrics:
    """``gpu_ledger_push_batches_total{agent, outcome}`` (accepted | duplicate | conflict | rejected) and
    ``gpu_ledger_push_samples_total{agent}``, registered once per :class:`Telemetry`."""

    def __init__(self, telemetry: Telemetry):
        self.batches = Counter(
            "gpu_ledger_push_batches",
            "Pushed batches by agent connector and outcome (accepted, duplicate, conflict, rejected).",
            ["agent", "outcome"],
            registry=telemetry.registry,
        )
        self.samples = Counter(
            "gpu_ledger_push_samples", "Pushed samples stored.", ["agent"], registry=telemetry.registry
        )

    @classmethod
    def of(cls, telemetry: Telemetry) -> PushMetrics:
        """The push metrics of ``telemetry``'s registry, created once (a registry refuses a name twice)."""
        existing = _PUSH_METRICS.get(telemetry)
        if existing is None:
            existing = _PUSH_METRICS[telemetry] = cls(telemetry)
        return existing


_PUSH_METRICS: WeakKeyDictionary[Telemetry, PushMetrics] = WeakKeyDictionary()


def _error(status: int, message: str, field: str | None = None, code: str | None = None) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    body = {"error": message, "field": field} | ({"code": code} if code else {})
    return JSONResponse(body, status_code=status, headers=headers)


Outcome = Literal["stored", "duplicate", "conflict"]
INSERT_ROWS = 10_000  # samples per INSERT: bounds the Python objects alive at once


def store_batch(
    engine: Engine,
    batch: BatchIn,
    now: dt.datetime,
    presence_gap_s: float = 3600.0,
    backfill_days: float = 1.0,
) -> Outcome:
    """Store ``batch`` (which passed ``check_batch``) in one transaction: ``"stored"``. For a batch
    id stored before, nothing is written: ``"duplicate"`` when the content is the same (or was
    stored before content hashes were kept, migration 0002), ``"conflict"`` when it differs."""
    sha = content_sha256(batch)
    s = batch.samples
    first_ts_ms = min(s.ts_ms, default=None)
    head = {
        "batch_id": batch.batch_id,
        "agent": batch.agent,
        "received_at": now,
        "samples": len(s.ts_ms),
        "content_sha256": sha,
        "first_ts_ms": first_ts_ms,
        "last_ts_ms": max(s.ts_ms, default=None),
    }
    try:
        with engine.begin() as conn:
            stored = _stored_sha(conn, batch.batch_id)
            if stored is not None:
                return _replay(stored[0], sha)
            conn.execute(insert(table_of(PushedBatch)), [head])
            _insert_samples(conn, batch)
            devices = [d.model_dump() for d in batch.devices]
            _replace(conn, PushedDevice, "device_id", batch.agent, devices, now)
            workloads = [w.model_dump() for w in batch.workloads if w.workload_key]
            _replace(conn, PushedWorkload, "workload_key", batch.agent, workloads, now)
            if first_ts_ms is not None:
                reach = from_ms(first_ts_ms) + dt.timedelta(seconds=presence_gap_s)
                _rewind_watermark(conn, batch.agent, reach, backfill_start(now, backfill_days))
    except IntegrityError:
        # The checks leave one constraint a valid batch can break: the same id committed by a
        # concurrent push. Decided by looking the id up; anything else is a bug, not a duplicate.
        with engine.connect() as conn:
            stored = _stored_sha(conn, batch.batch_id)
        if stored is None:
            raise
        return _replay(stored[0], sha)
    return "stored"


def _stored_sha(conn: Any, batch_id: str) -> tuple[str | None] | None:
    """``(content_sha256,)`` of the stored batch ``batch_id``, None when there is none."""
    table = table_of(PushedBatch)
    row = conn.execute(select(table.c.content_sha256).where(table.c.batch_id == batch_id)).first()
    return None if row is None else (row[0],)


def _replay(stored_sha: str | None, sha: str) -> Outcome:
    return "duplicate" if stored_sha is None or stored_sha == sha else "conflict"


def _insert_samples(conn: Any, batch: BatchIn) -> None:
    """The batch's samples, built column-wise by Polars (no Python loop per sample) and written
    as ``service.billing.store`` writes billing lines: tuples in slices on SQLite (an ORM insert's
    per-row bind processing was most of the time), ``COPY`` on PostgreSQL (200,000 samples: 14 s
    through ``insert`` — longer than the agent's request timeout)."""
    s = batch.samples
    frame = (
        pl.DataFrame({c: getattr(s, c) for c in SAMPLE_SCHEMA}, schema=SAMPLE_SCHEMA)
        .with_row_index("row_no")
        .with_columns(pl.lit(batch.batch_id).alias("batch_id"), pl.lit(batch.agent).alias("agent"))
    )
    names = ", ".join(frame.columns)
    if conn.dialect.name == "postgresql":
        # Strings hold no control characters (push_batch refuses them); Polars quotes the rest,
        # and writes an empty workload key as "" (not NULL).
        data = frame.write_csv(include_header=False, float_precision=None).encode()
        cursor = conn.connection.driver_connection.cursor()
        try:
            with cursor.copy(f"COPY pushed_sample ({names}) FROM STDIN (FORMAT csv)") as copy:
                for i in range(0, len(data), 1 << 20):
                    copy.write(data[i : i + (1 << 20)])
        finally:
            cursor.close()
        return
    if conn.dialect.name == "sqlite":
        sql = f"INSERT INTO pushed_sample ({names}) VALUES ({', '.join('?' * frame.width)})"
        for rows in frame.iter_slices(INSERT_ROWS):
            conn.exec_driver_sql(sql, rows.rows())
        return
    for rows in frame.iter_slices(INSERT_ROWS):
        conn.execute(insert(table_of(PushedSample)), rows.to_dicts())


def _rewind_watermark(conn: Any, agent: str, reach: dt.datetime, floor: dt.datetime) -> None:
    """Late data (a node cut off from the service for hours, then draining its spool): move the
    connector's watermark back to ``reach`` (first reading + presence gap) when it lies past it, so
    the scheduler's next catch-up window (from watermark − presence_gap − 1 h) re-reads those
    hours. Batches of a healthy agent arrive within that reach and change nothing; without this, a
    backlog beyond it would sit in staging and never reach the ledger. Never before ``floor``
    (now − backfill_days): ``check_batch`` refuses older samples, and this keeps the promise that
    no push makes the next run re-read more than ``backfill_days``. A run in flight can still
    move the watermark past ``reach`` when it finishes (it keeps the max): rare, and ``gpu-ledger
    ingest`` over those hours repairs it."""
    reach = max(reach, floor)
    table = table_of(ConnectorState)
    conn.execute(
        update(table).where(table.c.name == agent, table.c.watermark > reach).values(watermark=reach)
    )


def _replace(
    conn: Any, model: Any, key: str, agent: str, items: list[dict[str, Any]], now: dt.datetime
) -> None:
    """Upsert by delete-then-insert: portable, and the whole batch is one transaction anyway.
    Keys go 500 to a DELETE: SQLite and PostgreSQL cap the parameters of one statement."""
    if not items:
        return
    table = table_of(model)
    keys = [item[key] for item in items]
    for i in range(0, len(keys), 500):
        conn.execute(delete(table).where(and_(table.c.agent == agent, table.c[key].in_(keys[i : i + 500]))))
    conn.execute(insert(table), [{**item, "agent": agent, "updated_at": now} for item in items])


def batches_endpoint(
    engine: Engine, connectors: Iterable[ConnectorConfig], telemetry: Telemetry, clock: Clock
) -> Callable[[Request], Any]:
    """The ``POST /api/v1/batches`` handler for the ``agent`` connectors among ``connectors``."""
    agents = [c for c in connectors if isinstance(c, AgentConfig)]
    gap_s = {c.name: c.presence_gap_s for c in agents}
    backfill_days = {c.name: c.backfill_days for c in agents}
    metrics = PushMetrics.of(telemetry)

    async def post_batches(request: Request) -> Response:
        # Who may push: service.auth.push_callers (push:CONNECTOR tokens, or the deprecated
        # connector `token` key); checked again against the batch's agent once it is parsed.
        caller = push_caller(request.scope, request.headers.get("authorization"), agents)
        if isinstance(caller, PushRefusal):
            metrics.batches.labels("", "rejected").inc()
            return _error(caller.status, caller.message, caller.field, caller.code)
        agent = caller.label
        try:  # parsing 64 MiB takes seconds: never on the event loop
            batch = await run_in_threadpool(parse_batch, await request.body())
        except BadBatch as exc:
            metrics.batches.labels(agent, "rejected").inc()
            return _error(400, exc.message, exc.field, "INVALID_BATCH")
        if not caller.may_push(batch.agent) or batch.agent not in gap_s:
            metrics.batches.labels(agent, "rejected").inc()
            refusal = refuse_agent(request.scope, caller, batch.agent)
            return _error(refusal.status, refusal.message, refusal.field, refusal.code)
        agent, now = batch.agent, clock()
        try:
            await run_in_threadpool(check_batch, batch, now, backfill_days[agent], agent)
        except BadBatch as exc:
            metrics.batches.labels(agent, "rejected").inc()
            return _error(400, exc.message, exc.field, "INVALID_BATCH")
        outcome = await run_in_threadpool(store_batch, engine, batch, now, gap_s[agent], backfill_days[agent])
        metrics.batches.labels(agent, "accepted" if outcome == "stored" else outcome).inc()
        if outcome == "conflict":
            return _error(
                409,
                f"batch_id: {batch.batch_id} was stored before with other content; nothing was stored. "
                "A batch id must never be reused: two agents share an agent_id, or a spool lost its NEXT_SEQ",
                "batch_id",
                "BATCH_ID_CONFLICT",
            )
        if outcome == "stored":
            metrics.samples.labels(agent).inc(len(batch.samples.ts_ms))
        body = {
            "batch_id": batch.batch_id,
            "duplicate": outcome == "duplicate",
            "samples": len(batch.samples.ts_ms),
        }
        return JSONResponse(body)

    return post_batches
